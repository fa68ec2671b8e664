"""Serving exports (issue 23): a serving plan rendered as the launch of the engine that runs it.

One module per target: ``vllm`` (``vllm serve`` arguments), ``sglang``
(``python -m sglang.launch_server``), ``trtllm`` (``trtllm-serve`` and its extra-LLM-API YAML) and
``dynamo`` (an NVIDIA Dynamo DynamoGraphDeployment, prefill and decode workers for a disaggregated
plan). Which engine runs which setting, and each engine's KV memory knob, are rules/serving.py's;
every renderer checks them first and refuses with the field, the value and the engines that run it.

The renderers are pure functions of (ServingPlan, Workload, model id, predicted memory per GPU):
``render_vllm`` / ``render_sglang`` give argv lists, ``render_trtllm`` argv and YAML,
``dynamo_deployment`` the manifest's documents; ``render_serving(name, ...)`` the text a file gets.
``export_serving(result, name)`` renders a serving result (``kind: serving``; paraplan.serving's
ServingResult or its JSON) and is what ``paraplan.export(result, "vllm")`` and
``paraplan plan SCENARIO --export vllm`` reach for one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from paraplan.cost.serving import ServingPlan, Workload
from paraplan.errors import ExportError
from paraplan.export.serving import dynamo, sglang, trtllm, vllm
from paraplan.export.serving.common import Launch, Memory, gpu_memory
from paraplan.export.serving.dynamo import dynamo_deployment
from paraplan.export.serving.result import is_serving_result, read_serving_result
from paraplan.export.serving.sglang import render_sglang, sglang_launches
from paraplan.export.serving.trtllm import render_trtllm, trtllm_launches
from paraplan.export.serving.vllm import render_vllm, vllm_launches
from paraplan.hardware import Cluster
from paraplan.rules.serving import GpuMemory, kv_fraction, kv_fractions

__all__ = [
    "SERVING_TARGETS",
    "ServingTarget",
    "GpuMemory",
    "Launch",
    "gpu_memory",
    "kv_fraction",
    "kv_fractions",
    "render_vllm",
    "render_sglang",
    "render_trtllm",
    "dynamo_deployment",
    "vllm_launches",
    "sglang_launches",
    "trtllm_launches",
    "render_serving",
    "export_serving",
    "is_serving_result",
]


class ServingTarget(NamedTuple):
    filename: str
    engine: str | None  # the engine it launches; None: the result's engine (Dynamo wraps any)


SERVING_TARGETS: dict[str, ServingTarget] = {
    "vllm": ServingTarget("vllm.sh", "vllm"),
    "sglang": ServingTarget("sglang.sh", "sglang"),
    "trtllm": ServingTarget("trtllm.sh", "trtllm"),
    "dynamo": ServingTarget("dynamo.yaml", None),
}
"""Serving target name -> the file it writes and the engine it launches."""


def render_serving(
    name: str,
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    engine: str = "vllm",
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> str:
    """The text of target ``name`` (a launch script, or Dynamo's manifest for ``engine``)."""
    key = name.strip().lower()
    if key not in SERVING_TARGETS:
        raise ExportError(
            f"unknown serving export target {name!r}; choose one of {', '.join(SERVING_TARGETS)}"
        )
    kw: dict[str, Any] = {"cluster": cluster, "max_model_len": max_model_len}
    if key == "vllm":
        return vllm.render(plan, workload, model_id, memory, **kw)
    if key == "sglang":
        return sglang.render(plan, workload, model_id, memory, **kw)
    if key == "trtllm":
        return trtllm.render(plan, workload, model_id, memory, **kw)
    return dynamo.render(engine, plan, workload, model_id, memory, **kw)


def export_serving(result: Any, name: str, model_id: str | None = None) -> str:
    """Target ``name``'s text for a serving result (paraplan.serving's ``ServingResult`` or its
    JSON; read by paraplan/export/serving/result.py): the plan, the workload and the engine of its
    scenario, the per-GPU memory it predicts. ``model_id``: the checkpoint to serve (default: the
    model's HF id where paraplan knows it)."""
    x = read_serving_result(result, model_id)
    text = render_serving(name, x.plan, x.workload, x.model_id, x.memory, engine=x.engine, cluster=x.cluster)
    if x.model_note is None:
        return text
    head, _, rest = text.partition("\n")
    if head.startswith("#!"):
        return f"{head}\n# {x.model_note}\n{rest}"
    return f"# {x.model_note}\n{text}"
