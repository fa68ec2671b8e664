"""The SGLang exports judged by SGLang 0.5.23's own ``ServerArgs`` (tests/export/sglang_args_check.py
in the interpreter tests/serving_engines.py finds): every rendered ``sglang.launch_server`` and
``dynamo.sglang`` worker parses (unknown arguments are errors), and SGLang's resolution pipeline
(``resolve_once``: parallel layout, attention DP, memory, disaggregation; the model's config.json
read from a local directory) and ``check_server_args`` accept it, to the values the plan means."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from paraplan.rules.serving import kv_dtype, kv_fraction, plan_workers

from paraplan.export.serving import sglang_launches
from paraplan.export.serving.common import memory_for
from paraplan.export.serving.dynamo import dynamo_worker_args
from tests.export.serving_cases import CASES, cluster_of, memory_of, model_dirs
from tests.serving_engines import run_in_engine

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

CHECK = Path(__file__).with_name("sglang_args_check.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One SGLang process for every case: the rendered launches and Dynamo workers, then controls."""
    models = model_dirs(tmp_path_factory.mktemp("models"))
    rendered = []
    for case in CASES:
        if "sglang" not in case.engines:
            continue
        mem = memory_of(case, "sglang")
        model = str(models[case.hf])
        launches = sglang_launches(
            case.plan, case.workload, model, mem, cluster=cluster_of(case), max_model_len=case.max_model_len
        )
        for w, launch in zip(plan_workers(case.plan), launches, strict=True):
            rendered.append(("serve", case, w, mem, launch.argv))
            argv = dynamo_worker_args("sglang", w, case.workload, model, mem, case.max_model_len)
            rendered.append(("dynamo", case, w, mem, argv))
    ds3 = str(models["deepseek-v3"])
    controls = [
        ["--model-path", ds3, "--tp-size", "8", "--tensor-parallel", "8"],  # an abbreviation
        ["--model-path", ds3, "--tp-size", "8", "--attn-dp-size", "3"],  # 3 does not divide 8
    ]
    out = run_in_engine(
        "sglang", CHECK, [{"argv": r[4]} for r in rendered] + [{"argv": c} for c in controls], 900
    )
    n = len(rendered)
    return {"rendered": [(*r[:4], v) for r, v in zip(rendered, out[:n], strict=True)], "controls": out[n:]}


def test_every_rendered_launch_parses_to_the_plan(run: dict[str, Any]) -> None:
    verdicts = run["rendered"]
    assert len(verdicts) == 2 * sum(len(plan_workers(c.plan)) for c in CASES if "sglang" in c.engines)
    for kind, case, w, mem, verdict in verdicts:
        where = (case.name, kind, w.role)
        assert verdict["ok"], (*where, verdict.get("error"))
        v = verdict["values"]
        assert (v["tp_size"], v["pp_size"]) == (w.tp, w.pp), where
        assert v["attn_dp_size"] == (w.tp if w.dp_attention else 1), where
        assert v["dp_size"] == 1, where  # replicas are separate servers
        assert v["ep_size"] == w.ep, where
        assert v["max_running_requests"] == w.max_batch, where
        assert v["chunked_prefill_size"] == (w.max_num_tokens if w.chunked_prefill else -1), where
        assert v["mem_fraction_static"] == kv_fraction("sglang", memory_for(mem, w)), where
        assert v["kv_cache_dtype"] == kv_dtype("sglang", case.workload.kv_precision), where
        assert v["context_length"] == case.max_model_len, where
        assert v["disaggregation_mode"] == (w.role or "null"), where
        assert v["disaggregation_transfer_backend"] == (
            "nixl" if w.role else v["disaggregation_transfer_backend"]
        )


def test_sglang_rejects_an_unknown_flag_and_a_broken_layout(run: dict[str, Any]) -> None:
    unknown, layout = run["controls"]
    assert not unknown["ok"] and "--tensor-parallel" in unknown["error"]
    assert not layout["ok"] and "AssertionError" in layout["error"]
