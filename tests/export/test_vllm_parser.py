"""The vLLM exports judged by vLLM 0.33.0's own parser (tests/export/vllm_args_check.py in the
interpreter tests/serving_engines.py finds): every rendered ``vllm serve`` and ``dynamo.vllm``
worker parses with ``EngineArgs.add_cli_args(FlexibleArgumentParser())`` (unknown arguments are
errors), ``EngineArgs.from_cli_args`` and vLLM's Cache/Scheduler/Parallel configs, to the values
the plan means; vLLM's validators refuse what rules/serving.py refuses for vLLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from paraplan.cost.serving import Engine, ServingPlan, Workload
from paraplan.rules.serving import (
    EngineWorker,
    GpuMemory,
    engine_refusals,
    kv_dtype,
    kv_fraction,
    plan_workers,
    rank_limit,
)

from paraplan.errors import ExportError
from paraplan.export.serving import render_vllm, vllm_launches
from paraplan.export.serving.common import Memory, memory_for
from paraplan.export.serving.dynamo import dynamo_worker_args
from paraplan.export.serving.vllm import vllm_engine_args
from tests.export.serving_cases import CASES, Case, cluster_of, memory_of, model_dirs
from tests.serving_engines import run_in_engine

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

CHECK = Path(__file__).with_name("vllm_args_check.py")
GIB = 2**30
MEM = GpuMemory(40 * GIB, 60 * GIB, 4 * GIB, 1.5 * GIB, 140.4 * GIB)


def _cases(models: dict[str, Path]) -> list[tuple[str, Case, EngineWorker, Memory, dict[str, Any]]]:
    """(kind, case, worker, memory, {"argv", "max_model_len"}) for every rendered vLLM launch and
    Dynamo vLLM worker of the vLLM cases."""
    out = []
    for case in CASES:
        if "vllm" not in case.engines:
            continue
        mem = memory_of(case, "vllm")
        model = str(models[case.hf])
        launches = vllm_launches(
            case.plan, case.workload, model, mem, cluster=cluster_of(case), max_model_len=case.max_model_len
        )
        for worker, launch in zip(plan_workers(case.plan), launches, strict=True):
            out.append(
                ("serve", case, worker, mem, {"argv": launch.argv, "max_model_len": case.max_model_len})
            )
            argv = dynamo_worker_args("vllm", worker, case.workload, model, mem, case.max_model_len)
            out.append(("dynamo", case, worker, mem, {"argv": argv, "max_model_len": case.max_model_len}))
    return out


FEW_TOKENS = ServingPlan(tp=8, max_batch=512, max_num_tokens=256)
WHOLE = ServingPlan(tp=8, ep=8, dp_attention=True, max_batch=64, chunked_prefill=False)
WHOLE_OK = ServingPlan(
    tp=8, ep=8, dp_attention=True, max_batch=64, max_num_tokens=32768, chunked_prefill=False
)
PAST_THE_RULES = [(FEW_TOKENS, None), (WHOLE, 4096), (WHOLE_OK, 4096)]
"""Plans rendered straight from vllm_engine_args, past rules/serving.py: vLLM must agree with the
rules on each (the first two are refused, the third runs)."""
BAD_FLAG = {"argv": ["vllm", "serve", "m", "--tp-size", "8"], "max_model_len": None}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One vLLM process for every case: the rendered launches, then the controls."""
    rendered = _cases(model_dirs(tmp_path_factory.mktemp("models")))
    workload = Workload(isl=1024, osl=1024)
    controls: list[dict[str, Any]] = [BAD_FLAG]
    for plan, model_len in PAST_THE_RULES:
        (w,) = plan_workers(plan)
        argv = ["vllm", "serve", "m", *vllm_engine_args(w, workload, MEM, model_len)]
        controls.append({"argv": argv, "max_model_len": model_len})
    out = run_in_engine("vllm", CHECK, [r[4] for r in rendered] + controls, timeout_s=600)
    n = len(rendered)
    return {
        "rendered": [(*r[:4], v) for r, v in zip(rendered, out[:n], strict=True)],
        "controls": out[n:],
    }


def test_every_rendered_launch_parses_to_the_plan(run: dict[str, Any]) -> None:
    verdicts = run["rendered"]
    assert len(verdicts) == 2 * sum(len(plan_workers(c.plan)) for c in CASES if "vllm" in c.engines)
    for kind, case, w, mem, verdict in verdicts:
        assert verdict["ok"], (case.name, kind, verdict.get("error"))
        v = verdict["values"]
        where = (case.name, kind, w.role)
        assert v["world_size_across_dp"] == w.gpus, where  # TP x DP x PP = the worker's GPUs
        assert v["tensor_parallel_size"] == (1 if w.dp_attention else w.tp), where
        assert v["data_parallel_size"] == (w.tp if w.dp_attention else 1), where
        assert v["pipeline_parallel_size"] == w.pp, where
        assert v["enable_expert_parallel"] == (w.ep > 1), where
        assert v["max_num_seqs"] == rank_limit(w.max_batch, w), where
        assert v["max_num_batched_tokens"] == rank_limit(w.max_num_tokens, w), where
        assert v["enable_chunked_prefill"] == (None if w.chunked_prefill else False), where
        assert v["gpu_memory_utilization"] == kv_fraction("vllm", memory_for(mem, w)), where
        assert v["kv_cache_dtype"] == kv_dtype("vllm", case.workload.kv_precision), where
        assert v["max_model_len"] == case.max_model_len, where
        assert v["kv_connector"] == ("NixlConnector" if w.role else None), where


def test_vllm_rejects_what_it_does_not_know_and_what_the_rules_refuse(run: dict[str, Any]) -> None:
    # the oracle can fail: a misspelt flag; and vLLM's own SchedulerConfig agrees with the rules
    bad_flag, *rest = run["controls"]
    assert not bad_flag["ok"] and "--tp-size" in bad_flag["error"]
    cluster = cluster_of(CASES[0])
    workload = Workload(isl=1024, osl=1024)
    for (plan, model_len), verdict in zip(PAST_THE_RULES, rest, strict=True):
        refused = engine_refusals("vllm", plan, workload, cluster, max_model_len=model_len)
        assert verdict["ok"] == (not refused), (plan, verdict, [r.message for r in refused])
        if refused:
            assert "SchedulerConfig" in verdict["error"]
    assert [v["ok"] for v in rest] == [False, False, True]


def test_render_vllm_refuses_with_the_engines_that_run_the_plan() -> None:
    case = next(c for c in CASES if c.name == "moe-ep-groups")
    with pytest.raises(
        ExportError, match=r"plan\.ep=4: vllm 0\.33\.0 .* sglang 0\.5\.23, trtllm 1\.2\.1 run it"
    ):
        render_vllm(case.plan, case.workload, Engine("vllm"), "m", MEM, cluster=cluster_of(case))
