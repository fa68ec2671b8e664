"""``python -m sglang.launch_server`` arguments for a serving plan (SGLang 0.5.23; checked by
SGLang's own ``ServerArgs.add_cli_args`` / ``ServerArgs.from_cli_args`` in
tests/export/test_sglang_parser.py).

Mapping (plan -> flag):
- a replica of tp x pp GPUs: ``--tp-size tp --pp-size pp``; under ``dp_attention`` attention runs
  data-parallel over the tp GPUs: ``--attn-dp-size tp`` (SGLang 0.5.23's spelling; the older
  ``--dp-size tp --enable-dp-attention`` is rewritten to it, ``srt/arg_groups/parallel_hook.py``);
- ``ep > 1``: ``--ep-size ep`` (each expert split over tp / ep ranks);
- ``max_batch``: ``--max-running-requests`` (server-wide: SGLang divides it over the attention-DP
  ranks, ``srt/model_executor/pool_configurator.py``); ``max_num_tokens``: ``--chunked-prefill-size``
  (``-1`` when chunked prefill is off) and ``--max-prefill-tokens``;
- KV memory: ``--mem-fraction-static`` from the predicted memory (rules/serving.py kv_fraction);
- ``workload.kv_precision`` fp8: ``--kv-cache-dtype fp8_e4m3``;
- disaggregated pools: ``--disaggregation-mode prefill|decode`` with
  ``--disaggregation-transfer-backend nixl`` (SGLang docs "PD Disaggregation"), joined by
  ``sglang-router`` or Dynamo.
"""

from __future__ import annotations

from paraplan.cost.serving import Engine, ServingPlan, Workload
from paraplan.export.serving.common import (
    Launch,
    Memory,
    check_aggregated,
    fraction,
    launches,
    script,
    weights_note,
)
from paraplan.hardware import Cluster
from paraplan.rules.serving import EngineWorker, GpuMemory, kv_dtype

__all__ = ["TRANSFER_BACKEND", "sglang_server_args", "sglang_launches", "render_sglang", "render"]

TRANSFER_BACKEND = "nixl"
"""KV transfer between the pools (``--disaggregation-transfer-backend``; mooncake is the other)."""


def sglang_server_args(
    worker: EngineWorker,
    workload: Workload,
    memory: GpuMemory,
    max_model_len: int | None = None,
) -> list[str]:
    """The server flags of one worker after ``--model-path MODEL`` (``python -m
    sglang.launch_server`` and ``python -m dynamo.sglang`` take the same)."""
    args = ["--tp-size", str(worker.tp), "--pp-size", str(worker.pp)]
    if worker.dp_attention:
        args += ["--attn-dp-size", str(worker.tp)]
    if worker.ep > 1:
        args += ["--ep-size", str(worker.ep)]
    chunk = worker.max_num_tokens if worker.chunked_prefill else -1
    args += [
        "--max-running-requests",
        str(worker.max_batch),
        "--chunked-prefill-size",
        str(chunk),
        "--max-prefill-tokens",
        str(worker.max_num_tokens),
        "--mem-fraction-static",
        fraction("sglang", memory, worker),
    ]
    dtype = kv_dtype("sglang", workload.kv_precision)
    if dtype != "auto":
        args += ["--kv-cache-dtype", dtype]
    if max_model_len is not None:
        args += ["--context-length", str(max_model_len)]
    if worker.role is not None:
        args += ["--disaggregation-mode", worker.role, "--disaggregation-transfer-backend", TRANSFER_BACKEND]
    return args


def sglang_launches(
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> list[Launch]:
    """One ``python -m sglang.launch_server`` per worker kind (replica, or prefill and decode
    workers)."""

    def argv_of(w: EngineWorker, mem: GpuMemory) -> tuple[list[str], dict[str, str]]:
        server = sglang_server_args(w, workload, mem, max_model_len)
        return ["python", "-m", "sglang.launch_server", "--model-path", model_id, *server], {}

    return launches("sglang", plan, workload, memory, argv_of, cluster=cluster, max_model_len=max_model_len)


def render_sglang(
    plan: ServingPlan,
    workload: Workload,
    engine: Engine,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> list[str]:
    """``python -m sglang.launch_server ...`` of an aggregated plan's replica as argv."""
    del engine
    check_aggregated("sglang", plan)
    starts = sglang_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
    return starts[0].argv


def render(
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> str:
    starts = sglang_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
    notes = [weights_note(workload, model_id)]
    if plan.mode == "disaggregated":
        notes.append("join the pools with sglang-router (--pd-disaggregation) or Dynamo's frontend")
    return script("sglang", model_id, starts, notes)
