"""solver/caps.py ``some_split_fits`` under one recompute mode for every stage: a mode whose last
stage cannot hold its least k is passed over before the other stages' caps are built. The
verdict must equal ``fits_some_split`` of every mode's full caps (``layer_caps``), fitting and
unfitting layouts alike, and the last stage's bytes alone must equal its entry of
``kind_bytes_per_stage``."""

from __future__ import annotations

import itertools

import pytest
from paraplan.cost import Job, Layout, Precision, Recompute, stage_terms
from paraplan.cost.memory_layers import kind_bytes_per_stage, last_stage_kind_bytes
from paraplan.cost.plan import plan_key
from paraplan.cost.split import pipeline_slots
from paraplan.graph import build_graph, preset
from paraplan.hardware import build_cluster
from paraplan.solver.caps import fits_some_split, layer_caps, some_split_fits

MODES = [Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE]


def _layouts() -> list[Layout]:
    """DeepSeek-V3 on 2,048 H800 layouts that fit and that do not; among them some whose last
    stage holds exactly its least k in some mode (pp 16, vp 2, micro-batch 1, ZeRO 0/1), where a
    probe one k too strict refuses a fitting layout."""
    out = []
    grid = itertools.product((2, 4, 8, 16), (1, 4), (0, 1, 3), ((2, 8), (1, 32)), (1, 2))
    for pp, mb, zero, (tp, ep), vp in grid:
        out.append(Layout(dp=2048 // (tp * pp), tp=tp, pp=pp, ep=ep, micro_batch=mb, zero=zero, vp=vp))
    return out


def test_the_last_stage_probe_keeps_every_verdict() -> None:
    graph = build_graph(preset("deepseek-v3"))
    num_layers = graph.spec.num_layers
    cluster = build_cluster("hgx-h800", gpus=2048)
    job = Job(seq_len=4096, global_batch=15360, precision=Precision.FP8)
    verdicts: set[bool] = set()
    for layout in _layouts():
        terms = stage_terms(graph, layout, job, cluster)
        assert terms.heterogeneous
        pp, vp = layout.pp, layout.vp
        slots = pipeline_slots(num_layers, pp, vp) or (0,) * pp
        k_total = (num_layers + sum(slots)) // vp
        k_hi = k_total - (pp - 1)
        for r in MODES:
            assert last_stage_kind_bytes(terms, r) == kind_bytes_per_stage(terms, r)[-1]
        for stage_modes in (None, (Recompute.FULL,) * pp, (Recompute.NONE,) * (pp - 1) + (Recompute.FULL,)):
            full = layer_caps(terms, MODES, k_hi, stage_modes, num_layers)
            want = fits_some_split(full, pp, k_total, True, slots)
            assert some_split_fits(terms, MODES, k_hi, stage_modes, num_layers, uniform=True) == want, (
                layout,
                stage_modes,
            )
            verdicts.add(want)
    assert verdicts == {True, False}  # both answers are checked


@pytest.mark.parametrize("uniform", [True, False])
def test_the_probe_reads_the_memo_of_caps_as_before(uniform: bool) -> None:
    """With the search's caps memo, the verdicts and the caps kept are those without it."""
    graph = build_graph(preset("deepseek-v3"))
    cluster = build_cluster("hgx-h800", gpus=2048)
    job = Job(seq_len=4096, global_batch=15360, precision=Precision.FP8)
    num_layers = graph.spec.num_layers
    memo: dict = {}
    for layout in _layouts()[::5]:
        terms = stage_terms(graph, layout, job, cluster)
        pp, vp = layout.pp, layout.vp
        slots = pipeline_slots(num_layers, pp, vp) or (0,) * pp
        k_total = (num_layers + sum(slots)) // vp
        k_hi = k_total - (pp - 1)
        got = some_split_fits(terms, MODES, k_hi, None, num_layers, uniform, memo)
        assert got == some_split_fits(terms, MODES, k_hi, None, num_layers, uniform)
        full = layer_caps(terms, MODES, k_hi, None, num_layers)
        assert got == fits_some_split(full, pp, k_total, uniform, slots)
        base = plan_key(layout, frozenset({"order"}))
        for r in MODES:  # a mode's caps kept in the memo are its full caps
            kept = memo.get((base, r, k_hi, None, num_layers))
            assert kept is None or kept == {k: v for k, v in full.items() if k[1] == r}
