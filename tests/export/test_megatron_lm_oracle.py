"""Megatron-LM 0.19.2's own code accepts every Megatron export and builds the planned model.

For 19 plans over every preset family megatron-core builds (tests/export/architecture_plans.py),
``megatron_lm_oracle.py`` runs under Python 3.12 with megatron-core 0.19.2 (which ships
Megatron-LM's ``megatron/training``; it needs Python >= 3.12): ``parse_and_validate_args`` on
the exported arguments and environment in a world of the plan's size, the process groups of
``initialize_model_parallel`` on torch's fake backend, and the GPT model ``pretrain_gpt.py``
builds, on the meta device. Its parameter count must equal the layer graph's plus the few
parameters the graph does not model (architecture_plans.unmodelled_params).

The 3.12 interpreter: $PARAPLAN_MEGATRON_LM_PYTHON, else ``.venv-megatron-lm/bin/python`` in
the repository (``.ci/run`` builds it); skipped when neither exists.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest
from paraplan.cost.plan import chunk_layers
from paraplan.graph import build_graph

from paraplan.export import ExportError, context
from paraplan.export.megatron import FLAGS, _flag_args, megatron_args, megatron_env
from tests.megatron_lm import run_in_megatron_lm

sys.path.insert(0, str(Path(__file__).parent))
from architecture_plans import (  # noqa: E402
    MEGATRON_CASES,
    MOE_STATE_CASES,
    REFUSED_BY_MEGATRON,
    result,
    unmodelled_params,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ORACLE = Path(__file__).with_name("megatron_lm_oracle.py")


def _unchecked_argv(ctx: object) -> list[str]:
    """The flags megatron_args would write, without enforcing paraplan's rules first."""
    argv: list[str] = []
    for key, value in _flag_args(ctx):  # type: ignore[arg-type]
        argv.append(FLAGS[key])
        argv += [str(v) for v in value] if isinstance(value, tuple) else [] if value is None else [str(value)]
    return argv


def _stated(case: tuple[dict, dict], **plan: object) -> tuple[dict, dict]:
    return case[0], {**case[1], **plan}


_QWEN_EP8 = MEGATRON_CASES["qwen3-30b-a3b-ep8"]
_DSV3_PP8 = MEGATRON_CASES["deepseek-v3-pp8-ep16"]
UNCHECKED_STATE: dict[str, tuple[tuple[dict, dict], str]] = {
    "overlap-pp8-without-vp": (
        _stated(_DSV3_PP8, moe_overlap=True, recompute="selective"),
        "virtual_pipeline_model_parallel_size must be specified",
    ),
    "overlap-allgather": (
        _stated(_QWEN_EP8, moe_overlap=True, moe_dispatcher="allgather", recompute="selective"),
        "alltoall/flex token dispatcher",
    ),
    "overlap-full-recompute": (_stated(_QWEN_EP8, moe_overlap=True), "disable full recomputation"),
    "overlap-without-ep": (
        _stated(MEGATRON_CASES["mixtral-8x7b-ep8"], ep=1, dp=16, moe_overlap=True, recompute="selective"),
        "only supported with expert model parallelism",
    ),
    "partial-graphs-full-recompute": (
        _stated(_QWEN_EP8, cuda_graphs="partial"),
        "full recompute is only supported with full iteration CUDA graph",
    ),
}
"""Plans paraplan's rules (rules/moe_state.py) refuse, with the words megatron-core 0.19.2's own
checks refuse their unchecked flags in: the rule and Megatron agree."""


@cache
def _verdicts() -> dict[str, dict]:
    """The oracle's verdict on every case, from one run of the 3.12 interpreter."""
    cases = []
    every = {**MEGATRON_CASES, **{n: c for n, (c, _) in MOE_STATE_CASES.items()}}
    for name, case in every.items():
        ctx = context(result(case))
        cases.append(
            {
                "name": name,
                "argv": megatron_args(ctx),
                "env": megatron_env(ctx),
                "num_devices": ctx.plan.num_devices,
                # the simulated GPU's compute capability (validate_args reads it)
                "arch_major": 10 if ctx.cluster.accelerator.generation.startswith("blackwell") else 9,
            }
        )
    for name, (case, _) in UNCHECKED_STATE.items():  # the argv without paraplan's rules
        ctx = context(result(case))
        cases.append({"name": name, "argv": _unchecked_argv(ctx), "num_devices": ctx.plan.num_devices})
    return run_in_megatron_lm(ORACLE, cases, timeout_s=900)


@pytest.mark.parametrize("name", MEGATRON_CASES)
def test_megatron_lm_accepts_the_export_and_builds_the_planned_model(name: str) -> None:
    verdict = _verdicts()[name]
    assert verdict["ok"], verdict.get("error")
    res = result(MEGATRON_CASES[name])
    p, spec = res.plan, context(res).spec
    assert verdict["groups"] == {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep}
    expected = build_graph(spec).num_params + unmodelled_params(
        spec, padded_vocab=verdict["padded_vocab"], max_positions=MEGATRON_CASES[name][0]["job"]["seq_len"]
    )
    assert verdict["params"] == expected
    if res.plan.recompute_layers:  # partial recompute as Megatron-LM's parser reads it
        assert verdict["recompute"][:3] == ["full", "block", res.plan.recompute_layers[0]]
    if "--pipeline-model-parallel-layout" in megatron_args(context(res)):  # the plan's exact chunks
        assert verdict["layout_chunks"] == [list(row) for row in chunk_layers(context(res).plan)]
    else:
        assert verdict["layout_chunks"] is None


def test_two_plans_need_the_explicit_layout() -> None:
    """Issue 13 item 4: uneven chunks of a dense and of a MoE model with dense first layers."""
    layouts = [
        n
        for n, c in MEGATRON_CASES.items()
        if "--pipeline-model-parallel-layout" in megatron_args(context(result(c)))
    ]
    assert {"llama3.1-405b-pp8-vp8-layout", "deepseek-v3-pp8-vp2-layout"} <= set(layouts)


def test_the_plans_cover_every_family_and_parallel_axis() -> None:
    plans = [result(case).plan for case in MEGATRON_CASES.values()]
    families = {case[0]["model"].get("preset", "explicit").split("-")[0] for case in MEGATRON_CASES.values()}
    assert families == {
        "explicit",
        "gpt3",
        "llama2",
        "llama3",
        "llama3.1",
        "mistral",
        "qwen2.5",
        "qwen3",
        "nemotron4",
        "mixtral",
        "deepseek",
        "gpt",
    }
    assert len(plans) >= 15
    assert {p.zero for p in plans} == {0, 1, 2, 3}
    for axis in ("tp", "pp", "vp", "cp", "ep"):
        assert any(getattr(p, axis) > 1 for p in plans), axis


@pytest.mark.parametrize("name", REFUSED_BY_MEGATRON)
def test_megatron_refuses_an_architecture_it_cannot_build(name: str) -> None:
    scenario, plan, what = REFUSED_BY_MEGATRON[name]
    with pytest.raises(ExportError, match=re.escape(what)):
        megatron_args(context(result((scenario, plan))))


PRECISION_CASES = {
    "mxfp8-b200": {"bf16": True, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp4": None, "fp4_recipe": None},
    "nvfp4-b200": {"bf16": True, "fp8": None, "fp8_recipe": None, "fp4": "e2m1", "fp4_recipe": "nvfp4"},
    "fp8-blockwise-h100": {
        "bf16": True,
        "fp8": "hybrid",
        "fp8_recipe": "blockwise",
        "fp4": None,
        "fp4_recipe": None,
    },
}


@pytest.mark.parametrize("name", PRECISION_CASES)
def test_block_scaled_precisions_reach_megatron_as_their_recipes(name: str) -> None:
    """Megatron-LM's parser reads the planned precision back as megatron-core's recipe."""
    verdict = _verdicts()[name]
    assert verdict["ok"], verdict.get("error")
    assert verdict["precision"] == PRECISION_CASES[name]


MEGATRON_STATE_DEFAULTS: dict[str, object] = {
    "moe_flex_dispatcher_backend": "deepep",
    "overlap_moe_expert_parallel_comm": False,
    "cuda_graph_impl": "none",
    "cuda_graph_modules": [],
    "moe_router_force_load_balancing": False,
    "moe_expert_capacity_factor": None,
    "moe_token_drop_policy": "probs",
    "moe_pad_expert_input_to_capacity": False,
    "check_for_nan_in_loss_and_grad": True,
    "fine_grained_activation_offloading": False,
    "offload_modules": [],
    "moe_router_fusion": False,
    "moe_permute_fusion": False,
}
"""megatron-core 0.19.2's defaults of the MoE software state (TransformerConfig); the dispatcher
is always written for a MoE model (paraplan's default alltoall, not megatron-core's allgather)."""


@pytest.mark.parametrize("name", MOE_STATE_CASES)
def test_megatron_lm_reads_back_the_moe_software_state(name: str) -> None:
    """Issue 22 item 1: the dispatcher, EP overlap, CUDA graphs and routing of the plan reach
    megatron-core's TransformerConfig (built at the plan's parallel sizes, so its own checks run),
    and the model is still the planned one."""
    verdict = _verdicts()[name]
    assert verdict["ok"], verdict.get("error")
    case, wanted = MOE_STATE_CASES[name]
    spec = context(result(case)).spec
    dispatcher = {"moe_token_dispatcher_type": "alltoall" if spec.is_moe else "allgather"}
    assert verdict["moe_state"] == MEGATRON_STATE_DEFAULTS | dispatcher | wanted
    if modules := case[0]["job"].get("recompute_modules"):  # --recompute-modules as parsed
        assert verdict["recompute"][0] == "selective"
        assert sorted(verdict["recompute"][3]) == sorted(modules)
    p = result(case).plan
    assert verdict["groups"] == {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep}
    expected = build_graph(spec).num_params + unmodelled_params(
        spec, padded_vocab=verdict["padded_vocab"], max_positions=case[0]["job"]["seq_len"]
    )
    assert verdict["params"] == expected


@pytest.mark.parametrize("name", UNCHECKED_STATE)
def test_paraplan_and_megatron_refuse_the_same_moe_state(name: str) -> None:
    """What rules/moe_state.py refuses, megatron-core's own checks refuse too (the flags written
    without paraplan's rules), in the words given."""
    case, words = UNCHECKED_STATE[name]
    with pytest.raises(ExportError, match="plan.(moe_overlap|cuda_graphs)"):
        megatron_args(context(result(case)))
    verdict = _verdicts()[name]
    assert not verdict["ok"]
    assert words in verdict["error"]
