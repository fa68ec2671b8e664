"""Optimal means optimal on TPU tori: the CP-SAT objective equals the exhaustive minimum over the
same space, where placement is the rank order on the torus axes (and DCN between slices) and, on
v4/v5p slices of whole cubes, the slice shape itself (optical circuit switching)."""

from __future__ import annotations

import random

import pytest
from paraplan.cost import Job, Precision
from paraplan.cost.plan import PartialPlan
from paraplan.graph import Activation, ModelSpec, build_graph
from paraplan.hardware import build_cluster
from paraplan.solver import Options
from paraplan.solver.enumerate import enumerate_plans
from paraplan.solver.space import layouts

from tests.seeds import seeds
from tests.solver.test_oracle import check_against_enumeration

# (slice preset, slices): shapes to choose among (v5p-256 = 4x4x8 in 3 orientations), rings,
# lines below a cube (v5p-32 = 2x4x4... 16 chips 2x2x4), v5e sub-slices without wraparound, DCN
TORI = [("v5p-256", 1), ("v5p-32", 2), ("v5e-16", 2), ("v5e-32", 1), ("v4-8", 4)]


def random_torus_instance(rng: random.Random, preset: str, slices: int):
    heads = rng.choice([8, 16])
    hidden = heads * rng.choice([64, 128, 256])
    spec = ModelSpec(
        name="rand",
        num_layers=rng.randint(2, 4),
        hidden=hidden,
        ffn_hidden=hidden * 4,
        num_heads=heads,
        num_kv_heads=rng.choice([h for h in (1, 2, 4, heads) if heads % h == 0]),
        vocab=rng.choice([512, 32000]),
        activation=rng.choice(list(Activation)),
    )
    cluster = build_cluster(preset, nodes=slices)
    job = Job(
        seq_len=rng.choice([1024, 4096, 16384]),
        global_batch=rng.choice([8, 16, 32]),
        precision=Precision.BF16,
    )
    fixed = PartialPlan(zero=rng.choice([None, 1, 3]), micro_batch=1)
    return build_graph(spec), cluster, job, fixed, Options(max_micro_batch=1, max_vp=2)


@pytest.mark.parametrize("seed", seeds(10, fast=(1, 2, 3)))
def test_torus_placement_matches_enumeration(seed: int) -> None:
    preset, slices = TORI[seed % len(TORI)]
    check_against_enumeration(seed, random_torus_instance(random.Random(seed), preset, slices))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_slice_shape_choice_matches_enumeration(seed: int) -> None:
    """v5p-256 (128 chips) may be 4x4x8, 4x8x4 or 8x4x4: the enumeration weighs every shape and
    the solver's optimum equals its minimum."""
    instance = random_torus_instance(random.Random(100 + seed), "v5p-256", 1)
    graph, cluster, job, fixed, options = instance
    shapes = {
        lay.torus_shape
        for lay in layouts(
            graph.spec, cluster, job.seq_len, job.global_batch, fixed, options, prune_dominated=False
        )
    }
    assert shapes == {(4, 4, 8), (4, 8, 4), (8, 4, 4)}
    check_against_enumeration(seed, instance)


def test_shape_choice_changes_the_optimum() -> None:
    """Fixing the slice to a worse shape cannot beat the free choice, and on a job whose tensor
    traffic outweighs its matmuls (small hidden, tp 16) the shape matters: 16 chips are two full
    4-rings on 4x4x8 but a 4-ring and half a 8-ring (a line) on 4x8x4."""
    spec = ModelSpec(
        name="narrow",
        num_layers=2,
        hidden=1024,
        ffn_hidden=4096,
        num_heads=16,
        num_kv_heads=16,
        vocab=32000,
        activation=Activation.SWIGLU,
    )
    graph, cluster = build_graph(spec), build_cluster("v5p-256", nodes=1)
    job = Job(seq_len=4096, global_batch=16, precision=Precision.BF16)
    opts = Options(max_micro_batch=1, max_vp=1)
    free = enumerate_plans(graph, cluster, job, PartialPlan(tp=16, pp=1, micro_batch=1), opts)
    per_shape = {
        s: enumerate_plans(
            graph, cluster, job, PartialPlan(tp=16, pp=1, micro_batch=1, torus_shape=s), opts
        ).best_s
        for s in cluster.torus.shapes
    }
    assert free.best_s == pytest.approx(min(per_shape.values()))
    assert max(per_shape.values()) > min(per_shape.values()) * (1 + 1e-6)
