"""``vllm serve`` arguments for a serving plan (vLLM 0.33.0; checked by vLLM's own
``EngineArgs.add_cli_args(FlexibleArgumentParser())`` in tests/export/test_vllm_parser.py).

Mapping (plan -> flag):
- a replica of tp x pp GPUs: ``--tensor-parallel-size tp --pipeline-parallel-size pp``; under
  ``dp_attention`` the tp GPUs are vLLM data-parallel ranks of attention TP 1:
  ``--tensor-parallel-size 1 --data-parallel-size tp`` (vLLM docs "Data Parallel Deployment": the
  MoE layers of the DP ranks form one group of TP x DP ranks);
- ``ep > 1``: ``--enable-expert-parallel`` (EP = every rank of the group; rules/serving.py refuses
  1 < ep < tp); ep 1 leaves experts TP-sharded;
- ``max_batch`` / ``max_num_tokens``: ``--max-num-seqs`` / ``--max-num-batched-tokens``, per DP rank
  (each rank has its own scheduler), so divided by tp under dp_attention;
- ``chunked_prefill`` false: ``--no-enable-chunked-prefill`` (on by default);
- KV memory: ``--gpu-memory-utilization`` from the predicted memory (rules/serving.py kv_fraction);
- ``workload.kv_precision`` fp8: ``--kv-cache-dtype fp8``; weights come in the checkpoint
  (``MODEL`` names an FP8 / NVFP4 checkpoint; vLLM reads its quantization config);
- disaggregated pools: each pool is a vLLM instance with the NIXL connector
  ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`` (vLLM docs
  "Disaggregated Prefilling"), joined by a proxy or by Dynamo (paraplan/export/serving/dynamo.py).
"""

from __future__ import annotations

import json

from paraplan.cost.serving import Engine, ServingPlan, Workload
from paraplan.export.serving.common import (
    Launch,
    Memory,
    check_aggregated,
    fraction,
    launches,
    per_rank,
    script,
    weights_note,
)
from paraplan.hardware import Cluster
from paraplan.rules.serving import EngineWorker, GpuMemory, kv_dtype

__all__ = ["NIXL_CONNECTOR", "vllm_engine_args", "render_vllm", "vllm_launches", "render"]

NIXL_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
"""The KV connector both pools of a disaggregated vLLM deployment carry (vLLM docs, Dynamo vLLM
disaggregated recipes)."""


def vllm_engine_args(
    worker: EngineWorker,
    workload: Workload,
    memory: GpuMemory,
    max_model_len: int | None = None,
) -> list[str]:
    """The engine flags of one worker (what ``vllm serve MODEL`` and ``python -m dynamo.vllm``
    both take after the model)."""
    if worker.dp_attention:
        args = ["--tensor-parallel-size", "1", "--data-parallel-size", str(worker.tp)]
    else:
        args = ["--tensor-parallel-size", str(worker.tp)]
    args += ["--pipeline-parallel-size", str(worker.pp)]
    if worker.ep > 1:
        args.append("--enable-expert-parallel")
    args += [
        "--max-num-seqs",
        str(per_rank(worker.max_batch, worker)),
        "--max-num-batched-tokens",
        str(per_rank(worker.max_num_tokens, worker)),
    ]
    if not worker.chunked_prefill:
        args.append("--no-enable-chunked-prefill")
    args += ["--gpu-memory-utilization", fraction("vllm", memory, worker)]
    dtype = kv_dtype("vllm", workload.kv_precision)
    if dtype != "auto":
        args += ["--kv-cache-dtype", dtype]
    if max_model_len is not None:
        args += ["--max-model-len", str(max_model_len)]
    if worker.role is not None:
        args += ["--kv-transfer-config", json.dumps(NIXL_CONNECTOR, separators=(",", ":"))]
    return args


def vllm_launches(
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> list[Launch]:
    """One ``vllm serve`` per worker kind (replica, or prefill and decode workers)."""

    def argv_of(w: EngineWorker, mem: GpuMemory) -> tuple[list[str], dict[str, str]]:
        return ["vllm", "serve", model_id, *vllm_engine_args(w, workload, mem, max_model_len)], {}

    return launches("vllm", plan, workload, memory, argv_of, cluster=cluster, max_model_len=max_model_len)


def render_vllm(
    plan: ServingPlan,
    workload: Workload,
    engine: Engine,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> list[str]:
    """``vllm serve MODEL ...`` of an aggregated plan's replica as argv (a disaggregated plan has
    two pools: ``vllm_launches`` gives both, the Dynamo export deploys them)."""
    del engine  # the flags are vLLM 0.33's whatever engine the plan was costed for
    check_aggregated("vllm", plan)
    starts = vllm_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
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
    """The launch script: each worker kind's ``vllm serve`` with how many to run."""
    starts = vllm_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
    notes = [weights_note(workload, model_id)]
    if plan.mode == "disaggregated":
        notes.append("the pools exchange KV caches over NIXL; put a proxy or Dynamo's frontend before them")
    return script("vllm", model_id, starts, notes)
