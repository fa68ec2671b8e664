"""The branch and bound's work savings give the answers the full work gives (issue 26, speed).

- ``caps.some_split_fits`` asks the recompute modes one at a time and stops at the first that
  fits: its verdict must be ``fits_some_split`` of every mode's caps.
- ``tables.build_tables(cutoff_s=...)`` leaves the upper bound unscored when the lower bound is
  above the cutoff: the lower bound and the caps must be those of the full build, and below the
  cutoff the upper bound and its plan too; the skipped upper bound is never below the lower one.
- ``hardware.efficiency`` builds an Efficiency once per set of the data file's values: a fit that
  swaps or edits the table (benchmarks/calibrate.py) must see its own values.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import paraplan.hardware.efficiency  # noqa: F401  (the module, below: the package re-exports its function)
import pytest
from paraplan.cost import Job, Recompute, stage_terms
from paraplan.cost.plan import PartialPlan
from paraplan.cost.split import pipeline_slots
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.solver import Options
from paraplan.solver.caps import CapsMemo, fits_some_split, layer_caps, some_split_fits
from paraplan.solver.placement import orders
from paraplan.solver.space import families, zeros
from paraplan.solver.tables import build_tables

CASES = [
    ("llama3-8b", "dgx-h100", 1, 8192, 64),
    ("llama2-13b", "dgx-a100-40gb", 2, 4096, 128),
    ("gpt3-175b", "dgx-a100-80gb", 8, 2048, 256),
    ("mixtral-8x7b", "dgx-h100", 2, 4096, 64),
    ("nemotron-h-56b", "dgx-h100", 4, 4096, 64),
]
MODE_SETS = [list(Recompute), [Recompute.NONE], [Recompute.NONE, Recompute.SELECTIVE]]


def _layouts(model: str, node: str, nodes: int, seq: int, batch: int, step: int):
    graph = build_graph(preset(model))
    cluster = build_cluster(node, nodes=nodes)
    job = Job(seq_len=seq, global_batch=batch)
    for family in families(graph.spec, cluster, seq, batch, PartialPlan(), Options())[::step]:
        for zero in zeros(family, PartialPlan()):
            yield graph, cluster, job, replace(family, zero=zero)


@pytest.mark.parametrize(("model", "node", "nodes", "seq", "batch"), CASES)
def test_asking_modes_until_one_fits_gives_the_full_verdict(
    model: str, node: str, nodes: int, seq: int, batch: int
) -> None:
    verdicts: set[bool] = set()
    for graph, cluster, job, layout in _layouts(model, node, nodes, seq, batch, 11):
        terms = stage_terms(graph, layout, job, cluster)
        n = graph.spec.num_layers
        pp, vp = layout.pp, layout.vp
        slots = pipeline_slots(n, pp, vp) or (0,) * pp
        k_total = (n + sum(slots)) // vp
        k_hi = k_total - (pp - 1)
        stage_modes = (Recompute.FULL,) + (Recompute.NONE,) * (pp - 1) if pp > 1 else None
        for modes in MODE_SETS:
            for uniform in (False, True):
                for fixed_modes in (None, stage_modes):
                    full = fits_some_split(
                        layer_caps(terms, modes, k_hi, fixed_modes, n), pp, k_total, uniform, slots
                    )
                    assert some_split_fits(terms, modes, k_hi, fixed_modes, n, uniform) == full
                    verdicts.add(full)
    assert verdicts == {True, False}  # both answers were checked


@pytest.mark.parametrize(("model", "node", "nodes", "seq", "batch"), CASES)
def test_a_table_above_the_cutoff_keeps_its_lower_bound_and_skips_its_upper(
    model: str, node: str, nodes: int, seq: int, batch: int
) -> None:
    skipped = kept = 0
    for graph, cluster, job, layout in _layouts(model, node, nodes, seq, batch, 17):
        modes = list(Recompute)
        full = build_tables(graph, cluster, job, layout, modes)
        if full.lower_bound_s == float("inf"):
            continue
        for cutoff in (full.lower_bound_s * 0.999, full.lower_bound_s * 1.001):
            tab = build_tables(graph, cluster, job, layout, modes, terms=full.terms, cutoff_s=cutoff)
            assert tab.k_max == full.k_max
            assert tab.lower_bound_s == full.lower_bound_s  # the same float, scored upper or not
            if full.lower_bound_s > cutoff:  # left out: no upper bound, and none was below
                assert tab.upper_bound_s == float("inf") and tab.upper_plan is None
                assert full.upper_bound_s >= full.lower_bound_s
                skipped += 1
            else:
                assert (tab.upper_bound_s, tab.upper_plan) == (full.upper_bound_s, full.upper_plan)
                kept += 1
    assert skipped > 5 and kept > 5


def test_efficiency_follows_a_swapped_or_edited_table() -> None:
    module = sys.modules["paraplan.hardware.efficiency"]
    before = module.efficiency("hopper")
    table = {g: dict(v) for g, v in module._raw().items()}
    original = module._raw
    module._raw = lambda: table  # as benchmarks/calibrate.py's _table
    try:
        assert module.efficiency("hopper") == before
        table["hopper"]["gemm_bf16"] = before.gemm_bf16 / 2  # edited in place, as a fit does
        assert module.efficiency("hopper").gemm_bf16 == before.gemm_bf16 / 2
        table["hopper"]["kernel_overhead_us"] = 7.0
        assert module.efficiency("hopper").kernel_overhead_s == pytest.approx(7e-6)
    finally:
        module._raw = original
    assert module.efficiency("hopper") == before
    with pytest.raises(ValueError, match="no efficiency calibration"):
        module.efficiency("no-such-generation")


@pytest.mark.parametrize(("model", "node", "nodes", "seq", "batch"), CASES)
def test_caps_read_no_rank_order_so_one_memo_serves_a_family(
    model: str, node: str, nodes: int, seq: int, batch: int
) -> None:
    """caps.CapsMemo shares a family's caps (its memory check on packed terms) with its layouts'
    tables (each order's own terms): every order's caps, and the packed terms', must be equal."""
    checked = 0
    for graph, cluster, job, layout in _layouts(model, node, nodes, seq, batch, 13):
        modes, n = list(Recompute), graph.spec.num_layers
        k_hi = n // layout.vp
        memo: CapsMemo = {}
        packed = layer_caps(stage_terms(graph, layout, job, cluster, packed=True), modes, k_hi, None, n, memo)
        for order in orders(layout, cluster, PartialPlan(), Options(), prune_dominated=False):
            terms = stage_terms(graph, replace(layout, order=order), job, cluster)
            assert layer_caps(terms, modes, k_hi, None, n) == packed
            assert layer_caps(terms, modes, k_hi, None, n, memo) == packed
            checked += 1
    assert checked > 10
