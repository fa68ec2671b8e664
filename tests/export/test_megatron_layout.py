"""Megatron layouts from the plan's layer positions (issue 13 item 4), judged by megatron-core.

``--pipeline-model-parallel-layout`` strings (rules/megatron.py ``layout_stages`` +
``compact_layout``) for DeepSeek-V3 (dense first layers, MTP) on pp 16 x vp 2, Llama 3.1 405B's
126 layers on pp 8 x vp 8 with uneven stages, and 200 random contiguous splits with and without
MTP layers: megatron-core's ``PipelineParallelLayerLayout`` parses and validates each, and builds
exactly the plan's decoder and MTP layers on every (pp rank, virtual stage), in order; where our
rule refuses an MTP placement, megatron-core refuses the layout too, and only then. Hybrid
models: ``--hybrid-layer-pattern`` cut at the plan's stages, read back by megatron-core 0.19.2's
``select_pipeline_segment``.

In-process: the installed megatron-core (0.16.1 in the test extra; its
pipeline_parallel_layer_layout.py is byte-identical to 0.19.2's). Under 0.19.2 itself: one run
of tests/export/megatron_layout_check.py in the Python 3.12 venv (.ci/run builds
``.venv-megatron-lm``; or $PARAPLAN_MEGATRON_LM_PYTHON), skipped without it.

The graph's MTP and hybrid-pattern fields (``mtp_layers``, ``layer_pattern``) are ModelSpec's;
``layered`` sets them on a preset here.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from paraplan.cost import Job, Plan, Precision, Recompute
from paraplan.graph import ModelSpec, build_graph
from paraplan.graph.presets import preset
from paraplan.hardware import build_cluster
from paraplan.rules import rules_of
from paraplan.rules.base import Draft, RuleContext, first_refusal
from paraplan.rules.deepspeed import balanced_split
from paraplan.rules.megatron import (
    compact_layout,
    hybrid_stage_pattern,
    mtp_placement_error,
    stage_contents,
)
from paraplan.rules.plans import virtual_stage_ranges

import paraplan
from paraplan.errors import ExportError
from paraplan.export import ExportContext, context
from paraplan.export.megatron import megatron_args, megatron_env, pipeline_args, pipeline_layout
from paraplan.export.megatron import render as render_megatron
from paraplan.export.nemo import bridge_overrides, nemo2_overrides
from paraplan.export.nemo import render as render_nemo
from tests.megatron_lm import run_in_megatron_lm

sys.path.insert(0, str(Path(__file__).parent))
import megatron_layout_check  # noqa: E402
from architecture_plans import MEGATRON_CASES, result, scenario  # noqa: E402
from architecture_plans import plan as plan_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("megatron_layout_check.py")

NEMOTRON_H_56B_PATTERN = (
    "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
)
"""Nemotron-H 56B, 118 layers (Megatron-Bridge 0.6.2 recipes/nemotronh/h100/nemotronh.py,
nemotronh_56b_pretrain_8gpu_h100_bf16_config)."""


def layered(base: ModelSpec, **extra: object) -> ModelSpec:
    """``base`` with the layer-kind fields the exporters read (mtp_layers, layer_pattern)."""
    return replace(base, **extra)  # type: ignore[arg-type]


def chunk_plan(counts: list[int], pp: int) -> Plan:
    """A plan whose virtual stage j = c * pp + s holds counts[j] layer positions."""
    vp = len(counts) // pp
    rows = tuple(tuple(counts[c * pp + s] for c in range(vp)) for s in range(pp))
    return Plan(
        dp=1,
        tp=1,
        pp=pp,
        vp=vp,
        recompute=(Recompute.NONE,) * pp,
        layers_per_stage=tuple(sum(r) for r in rows),
        layers_per_chunk=rows,
    )


DEEPSEEK_V3 = layered(preset("deepseek-v3"), mtp_layers=1)
LLAMA_405B = preset("llama3.1-405b")
NEMOTRON_H = preset("nemotron-h-56b")

CASES: dict[str, tuple[ModelSpec, Plan]] = {
    # MTP counted as position 61: 'E,tt|(tt|)*29,t|m,L'
    "deepseek-v3-pp16-vp2-mtp-stage": (DEEPSEEK_V3, chunk_plan([2] * 30 + [1, 1], 16)),
    # 61 decoder positions, MTP next to the loss: 'E,t|(tt|)*29,t|t,m,L'
    "deepseek-v3-pp16-vp2-mtp-with-loss": (DEEPSEEK_V3, chunk_plan([1] + [2] * 29 + [1, 1], 16)),
    "deepseek-v3-pp8-first-last": (
        DEEPSEEK_V3,
        Plan(dp=1, tp=1, pp=8, recompute=(Recompute.NONE,) * 8, layers_per_stage=(7, 8, 8, 8, 8, 8, 8, 6)),
    ),
    "llama3.1-405b-pp8-vp8-uneven": (
        LLAMA_405B,
        Plan(dp=1, tp=1, pp=8, vp=8, recompute=(Recompute.NONE,) * 8, layers_per_stage=(14,) + (16,) * 7),
    ),
    "llama3.1-405b-pp8-vp8-account-for": (
        LLAMA_405B,
        Plan(
            dp=1,
            tp=1,
            pp=8,
            vp=8,
            recompute=(Recompute.NONE,) * 8,
            layers_per_stage=(15,) + (16,) * 6 + (15,),
        ),
    ),
}


def _random_cases(n: int, seed: int = 13) -> dict[str, tuple[ModelSpec, Plan]]:
    """Random contiguous splits: pp 2-16, vp 1-4, 0-2 MTP layers counted as positions or not."""
    rng = random.Random(seed)
    base = preset("llama3-8b")
    out: dict[str, tuple[ModelSpec, Plan]] = {}
    for i in range(n):
        pp, vp, mtp = rng.randint(2, 16), rng.randint(1, 4), rng.choice([0, 0, 1, 2])
        positions_hold_mtp = bool(mtp) and rng.random() < 0.5
        stages = pp * vp
        total = rng.randint(stages, 160)
        cuts = sorted(rng.sample(range(1, total), stages - 1))
        counts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
        layers = total - mtp if positions_hold_mtp else total
        if layers < 1:
            continue
        spec = layered(base, num_layers=layers, mtp_layers=mtp)
        out[f"random-{i}-pp{pp}-vp{vp}-mtp{mtp}{'-pos' if positions_hold_mtp else ''}"] = (
            spec,
            chunk_plan(counts, pp),
        )
    return out


RANDOM_CASES = _random_cases(200)
HYBRID_CASES: dict[str, tuple[ModelSpec, Plan]] = {
    "nemotron-h-56b-pp4-uneven": (
        NEMOTRON_H,
        Plan(dp=1, tp=1, pp=4, recompute=(Recompute.NONE,) * 4, layers_per_stage=(28, 31, 31, 28)),
    ),
    "nemotron-h-56b-pp4-vp3": (NEMOTRON_H, chunk_plan([9] + [10] * 10 + [9], 4)),
    "nemotron-h-56b-pp1": (NEMOTRON_H, Plan(dp=1, tp=1, pp=1, layers_per_stage=(118,))),
}


def _layout_case(name: str, spec: ModelSpec, plan: Plan) -> dict:
    mtp = int(getattr(spec, "mtp_layers", 0))
    return {
        "name": name,
        "layout": pipeline_layout(plan, spec),
        "pp": plan.pp,
        "num_layers": spec.num_layers,
        "mtp": mtp,
    }


def _expected(spec: ModelSpec, plan: Plan) -> dict:
    """What megatron-core must build: the plan's decoder / MTP layers per [pp rank][vp stage]."""
    contents = stage_contents(spec, plan)
    pp, vp = plan.pp, plan.vp
    starts = [sum(d for d, _ in contents[:j]) for j in range(len(contents))]
    return {
        "ok": True,
        "vp": vp,
        "decoder": [[contents[v * pp + r][0] for v in range(vp)] for r in range(pp)],
        "offset": [[starts[v * pp + r] for v in range(vp)] for r in range(pp)],
        "mtp": [[contents[v * pp + r][1] for v in range(vp)] for r in range(pp)],
        "embedding": [[0, 0]],
        "loss": [[pp - 1, vp - 1]],
    }


def _check_verdict(name: str, spec: ModelSpec, plan: Plan, verdict: dict) -> None:
    refusal = mtp_placement_error(spec, plan)
    if refusal is not None:  # our rule refuses: megatron-core must refuse the layout too
        assert not verdict["ok"], (name, refusal)
        assert "mtp" in verdict["error"].lower() or "MTP" in verdict["error"], verdict["error"]
        return
    assert verdict == _expected(spec, plan), (name, pipeline_layout(plan, spec))


# --------------------------------------------------------------------------- pure


def _args(case: tuple[ModelSpec, Plan]) -> dict[str, object]:
    spec, plan = case
    return dict(pipeline_args(plan, spec))


def test_compact_layout_writes_megatrons_deepseek_v3_example() -> None:
    """Megatron's docs: DeepSeek-V3 on pp 16 x vp 2 is 'Et*3|(tt|)*29,m|L'."""
    stages = ["E,t*3"] + ["tt"] * 29 + ["m", "L"]
    assert compact_layout(stages) == "E,t*3|(tt|)*29,m|L"


def test_layouts_read_the_plans_positions() -> None:
    spec, plan = CASES["deepseek-v3-pp16-vp2-mtp-stage"]
    assert pipeline_layout(plan, spec) == "E,tt|(tt|)*29,t|m,L"
    spec, plan = CASES["deepseek-v3-pp16-vp2-mtp-with-loss"]
    assert pipeline_layout(plan, spec) == "E,t|(tt|)*29,t|t,m,L"


def test_layout_only_where_flags_cannot_build_the_split() -> None:
    """The layout replaces every flag it conflicts with (validate_args: at most one of the
    layout, vp and layers-per-virtual-stage; account-for and first/last are split rules)."""
    conflicts = {"vp", "first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss"}
    for name, (spec, plan) in {**CASES, **RANDOM_CASES}.items():
        keys = [k for k, _ in pipeline_args(plan, spec)]
        if "layout" in keys:
            assert not conflicts & set(keys), name
    args = _args(CASES["deepseek-v3-pp8-first-last"])
    assert args == {"pp": 8, "first_stage_layers": 7, "last_stage_layers": 6}  # MTP: last stage
    assert "layout" in _args(CASES["deepseek-v3-pp16-vp2-mtp-stage"])
    assert "layout" in _args(CASES["llama3.1-405b-pp8-vp8-uneven"])
    flags = _args(CASES["llama3.1-405b-pp8-vp8-account-for"])
    assert flags == {"pp": 8, "account_for_embedding": None, "account_for_loss": None, "vp": 8}


def test_hybrid_models_carry_their_stages_in_the_pattern() -> None:
    spec, plan = HYBRID_CASES["nemotron-h-56b-pp4-uneven"]
    args = dict(pipeline_args(plan, spec))
    assert set(args) == {"pp", "hybrid_pattern"}
    segments = str(args["hybrid_pattern"]).split("|")
    assert [len(s) for s in segments] == [28, 31, 31, 28]
    assert "".join(segments) == NEMOTRON_H_56B_PATTERN
    assert _args(HYBRID_CASES["nemotron-h-56b-pp1"]) == {"hybrid_pattern": NEMOTRON_H_56B_PATTERN}


# --------------------------------------------------------------------------- megatron-core


@pytest.mark.oracle
@pytest.mark.parametrize("name", [*CASES, *RANDOM_CASES])
def test_megatron_core_builds_the_plans_layers(name: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    spec, plan = {**CASES, **RANDOM_CASES}[name]
    _check_verdict(name, spec, plan, megatron_layout_check.judge(_layout_case(name, spec, plan)))


def test_the_random_cases_exercise_both_mtp_verdicts() -> None:
    refused = [n for n, (s, p) in RANDOM_CASES.items() if mtp_placement_error(s, p)]
    accepted_mtp = [
        n for n, (s, p) in RANDOM_CASES.items() if "mtp0" not in n and not mtp_placement_error(s, p)
    ]
    assert len(RANDOM_CASES) == 200 and refused and accepted_mtp


@cache
def _verdicts_0192() -> dict:
    cases = [_layout_case(n, s, p) for n, (s, p) in {**CASES, **RANDOM_CASES}.items()]
    cases += [
        {"name": n, "hybrid": hybrid_stage_pattern(s, p), "pp": p.pp} for n, (s, p) in HYBRID_CASES.items()
    ]
    out = run_in_megatron_lm(CHECK, cases, timeout_s=300)
    assert str(out["version"]).startswith("0.19.2"), out["version"]
    return out["verdicts"]


@pytest.mark.oracle
def test_megatron_core_0_19_2_builds_every_layout() -> None:
    verdicts = _verdicts_0192()
    for name, (spec, plan) in {**CASES, **RANDOM_CASES}.items():
        _check_verdict(name, spec, plan, verdicts[name])


@pytest.mark.oracle
@pytest.mark.parametrize("name", HYBRID_CASES)
def test_megatron_core_0_19_2_reads_the_hybrid_stages(name: str) -> None:
    spec, plan = HYBRID_CASES[name]
    verdict = _verdicts_0192()[name]
    ranges = virtual_stage_ranges(plan)
    pattern = spec.layer_pattern
    assert verdict == {
        "ok": True,
        "layers": spec.num_layers,
        "segments": [pattern[r.start : r.stop] for r in ranges],
        "offsets": [r.start for r in ranges],
    }


# --------------------------------------------------------------------------- rendered exports


def _context_with(case: str, spec: ModelSpec, **plan_knobs: object) -> ExportContext:
    """The export context of an oracle case with ``spec`` (the graph's new layer-kind fields)
    and plan knobs swapped in."""
    ctx = context(result(MEGATRON_CASES[case]))
    inst = replace(ctx.inst, graph=build_graph(spec))
    return ExportContext(result=ctx.result, inst=inst, plan=replace(ctx.plan, **plan_knobs))  # type: ignore[arg-type]


def _flags(argv: list[str]) -> dict[str, str | None]:
    return {
        t: (argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None)
        for i, t in enumerate(argv)
        if t.startswith("--")
    }


def _mtp_context() -> ExportContext:
    rows = ((3, 4), (4, 4), (4, 4), (4, 4), (4, 4), (4, 4), (4, 4), (4, 3))  # 62 positions: MTP last
    split = (7,) + (8,) * 6 + (7,)
    return _context_with(
        "deepseek-v3-pp8-vp2-layout", DEEPSEEK_V3, layers_per_chunk=rows, layers_per_stage=split
    )


def _hybrid_context(**knobs: object) -> ExportContext:
    split = (15, 15, 15, 15, 15, 15, 14, 14)
    return _context_with("llama3.1-405b-tp-pp-dp", NEMOTRON_H, layers_per_stage=split, **knobs)


def test_megatron_and_bridge_exports_carry_the_mtp_stage() -> None:
    ctx = _mtp_context()
    flags = _flags(megatron_args(ctx))
    assert flags["--mtp-num-layers"] == "1"
    assert flags["--pipeline-model-parallel-layout"] == "E,t*3|(t*4|)*14,tt,m,L"
    assert "--num-virtual-stages-per-pipeline-rank" not in flags
    bridge = bridge_overrides(ctx)
    assert bridge["model.pipeline_model_parallel_layout"] == flags["--pipeline-model-parallel-layout"]
    assert bridge["model.mtp_num_layers"] == 1


def test_hybrid_exports_carry_the_stages_in_the_pattern() -> None:
    split = (15, 15, 15, 15, 15, 15, 14, 14)
    ctx = _hybrid_context()
    script = render_megatron(ctx)
    flags = _flags(megatron_args(ctx))
    segments = str(flags["--hybrid-layer-pattern"]).split("|")
    assert [len(s) for s in segments] == list(split) and "".join(segments) == NEMOTRON_H_56B_PATTERN
    assert not {
        "--pipeline-model-parallel-layout",
        "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
    } & set(flags)
    assert "/pretrain_mamba.py" in script
    assert bridge_overrides(ctx)["model.hybrid_layer_pattern"] == flags["--hybrid-layer-pattern"]
    interleaved = _hybrid_context(vp=2)
    with pytest.raises(ExportError, match="HybridModelProvider"):
        bridge_overrides(interleaved)


@pytest.mark.oracle
@pytest.mark.slow
def test_megatron_lm_0_19_2_parses_the_mtp_and_hybrid_launches() -> None:
    """parse_and_validate_args of Megatron-LM 0.19.2 (tests/export/megatron_lm_oracle.py) takes
    both argument vectors: the MTP layout validates against --mtp-num-layers and builds the
    plan's decoder layers per stage; the hybrid pattern's '|' segments set the pipeline."""
    cases = [
        {"name": name, "argv": megatron_args(c), "env": megatron_env(c), "num_devices": c.plan.num_devices}
        for name, c in (("mtp", _mtp_context()), ("hybrid", _hybrid_context()))
    ]
    verdicts = run_in_megatron_lm(CHECK.with_name("megatron_lm_oracle.py"), cases, timeout_s=600)
    assert verdicts["mtp"]["ok"], verdicts["mtp"]
    rows = _mtp_context().plan.layers_per_chunk
    assert verdicts["mtp"]["layout_chunks"] == [list(r[:-1]) + [r[-1] - (s == 7)] for s, r in enumerate(rows)]
    assert verdicts["hybrid"]["ok"], verdicts["hybrid"]


@pytest.mark.parametrize("framework", ["torchtitan", "torch"])
@pytest.mark.parametrize("spec", [DEEPSEEK_V3, NEMOTRON_H], ids=["mtp", "hybrid"])
def test_frameworks_without_such_layers_refuse_them(framework: str, spec: ModelSpec) -> None:
    """torchtitan's models and the PyTorch script's reference model hold transformer blocks only."""
    job = Job(global_batch=64, seq_len=4096, precision=Precision.BF16)
    ctx = RuleContext(spec, job, build_cluster("dgx-h100", nodes=1))
    plan = Plan(dp=8, tp=1, pp=1, layers_per_stage=(spec.num_layers,))
    refusal = first_refusal(ctx, Draft(plan, Precision.BF16), rules_of(framework).model_rules)
    assert refusal is not None
    assert ("MTP" in refusal.rule) == (spec is DEEPSEEK_V3)
    assert "does not build" in refusal.rule


def test_nemo2_takes_the_hybrid_pattern_without_stages() -> None:
    ctx = _hybrid_context()
    assert nemo2_overrides(ctx)["model.config.hybrid_override_pattern"] == NEMOTRON_H_56B_PATTERN
    assert "splits the layers evenly" in render_nemo(ctx)


def test_deepspeed_partitions_mixed_block_classes_by_count_or_refuses() -> None:
    """DeepSpeed's type: partition weighs every block one: a DeepSeek-V3 plan with the balanced
    split exports (its note says the regex must match dense and MoE blocks); another split is
    refused with the balanced one as the nearest plan."""
    deepseek = scenario("deepseek-v3", 32, global_batch=1024)
    split = list(balanced_split(61, 8))
    res = paraplan.evaluate({**deepseek, "plan": plan_dict(32, 1, 8, layers_per_stage=split)})
    assert "type:DenseBlock|MoEBlock" in str(paraplan.export(res, "deepspeed"))
    uneven = paraplan.evaluate(
        {**deepseek, "plan": plan_dict(32, 1, 8, layers_per_stage=[7, 8, 8, 8, 8, 8, 8, 6])}
    )
    with pytest.raises(ExportError, match=r"no explicit layer counts.*\[8, 8, 8, 8, 8, 7, 7, 7\]"):
        paraplan.export(uneven, "deepspeed")
