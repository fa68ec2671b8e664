"""``trtllm-serve`` with its extra-LLM-API YAML (``--extra_llm_api_options``) for a serving plan
(TensorRT-LLM 1.2.1, PyTorch backend). The YAML's keys are ``TorchLlmArgs`` fields
(``tensorrt_llm.llmapi.llm_args``). TensorRT-LLM's own validator cannot run here: PyPI's
``tensorrt-llm==1.2.1`` is a 10 kB stub (``wheel_stub``) that downloads the real wheel from
NVIDIA's package index at install time, which this project's machines and CI cannot reach (and the
wheel needs the CUDA/TensorRT stack). tests/export/test_serving_exports.py checks the keys against
the ``TorchLlmArgs`` / ``KvCacheConfig`` field names of serving_exports.md Sec. 1 instead.

Mapping (plan -> CLI flag / YAML key):
- ``--tp_size tp --pp_size pp``; ``ep > 1``: ``--ep_size ep`` and YAML ``moe_expert_parallel_size``,
  ``moe_tensor_parallel_size`` = tp / ep; ``dp_attention``: YAML ``enable_attention_dp: true``;
- ``max_batch`` / ``max_num_tokens``: ``--max_batch_size`` / ``--max_num_tokens``, per rank, so
  divided by tp under attention DP (each attention-DP rank schedules its own requests);
- ``chunked_prefill``: YAML ``enable_chunked_prefill`` (off by default in TensorRT-LLM);
- KV memory: YAML ``kv_cache_config.free_gpu_memory_fraction`` from the predicted memory
  (rules/serving.py kv_fraction) and ``kv_cache_config.dtype`` (fp8 KV). Not the CLI's
  ``--kv_cache_free_gpu_memory_fraction``: trtllm-serve merges the YAML over the CLI arguments
  (``update_llm_args_with_extra_dict``) and a YAML ``kv_cache_config`` replaces the CLI-made one whole;
- disaggregated pools: each pool's YAML has ``cache_transceiver_config: {backend: DEFAULT}``;
  ``trtllm-serve disaggregated -c disagg_config.yaml`` (``context_servers`` / ``generation_servers``
  with ``num_instances`` and ``urls``) joins them (TensorRT-LLM docs "Disaggregated serving").
"""

from __future__ import annotations

from typing import Any

import yaml

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

__all__ = [
    "TORCH_LLM_ARGS_KEYS",
    "trtllm_cli_args",
    "trtllm_extra_options",
    "trtllm_launches",
    "disagg_config",
    "render_trtllm",
    "render",
]

TORCH_LLM_ARGS_KEYS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "moe_expert_parallel_size",
    "moe_tensor_parallel_size",
    "enable_attention_dp",
    "enable_chunked_prefill",
    "kv_cache_config",
    "cache_transceiver_config",
    "max_batch_size",
    "max_num_tokens",
    "max_seq_len",
)
"""The ``TorchLlmArgs`` fields the YAML may carry (serving_exports.md Sec. 1, TensorRT-LLM column)."""
KV_CACHE_CONFIG_KEYS = ("dtype", "free_gpu_memory_fraction")
"""``KvCacheConfig`` fields written."""


def trtllm_extra_options(worker: EngineWorker, workload: Workload, memory: GpuMemory) -> dict[str, Any]:
    """The extra-LLM-API options (``TorchLlmArgs`` keys) of one worker."""
    out: dict[str, Any] = {
        "enable_attention_dp": worker.dp_attention,
        "enable_chunked_prefill": worker.chunked_prefill,
    }
    if worker.ep > 1:
        out["moe_expert_parallel_size"] = worker.ep
        out["moe_tensor_parallel_size"] = worker.tp // worker.ep
    out["kv_cache_config"] = {
        "dtype": kv_dtype("trtllm", workload.kv_precision),
        "free_gpu_memory_fraction": float(fraction("trtllm", memory, worker)),
    }
    if worker.role is not None:
        out["cache_transceiver_config"] = {"backend": "DEFAULT"}
    return out


def trtllm_cli_args(worker: EngineWorker, max_model_len: int | None = None) -> list[str]:
    """The ``trtllm-serve MODEL`` flags of one worker (before ``--extra_llm_api_options``)."""
    args = ["--backend", "pytorch", "--tp_size", str(worker.tp), "--pp_size", str(worker.pp)]
    if worker.ep > 1:
        args += ["--ep_size", str(worker.ep)]
    args += [
        "--max_batch_size",
        str(per_rank(worker.max_batch, worker)),
        "--max_num_tokens",
        str(per_rank(worker.max_num_tokens, worker)),
    ]
    if max_model_len is not None:
        args += ["--max_seq_len", str(max_model_len)]
    return args


def trtllm_launches(
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> list[Launch]:
    """One ``trtllm-serve`` per worker kind (replica, or prefill and decode workers), each with its
    extra-LLM-API YAML as a side file."""

    def argv_of(w: EngineWorker, mem: GpuMemory) -> tuple[list[str], dict[str, str]]:
        name = f"extra-llm-api-{w.role}.yaml" if w.role else "extra-llm-api.yaml"
        options = trtllm_extra_options(w, workload, mem)
        argv = ["trtllm-serve", model_id, *trtllm_cli_args(w, max_model_len), "--extra_llm_api_options", name]
        return argv, {name: yaml.safe_dump(options, sort_keys=False)}

    return launches("trtllm", plan, workload, memory, argv_of, cluster=cluster, max_model_len=max_model_len)


def disagg_config(launches: list[Launch], port: int = 8000) -> dict[str, Any]:
    """``trtllm-serve disaggregated -c`` config: the context (prefill) and generation (decode)
    servers, one URL per instance (hosts are placeholders to fill in)."""

    def pool(role: str, base: int) -> dict[str, Any]:
        launch = next(x for x in launches if x.role == role)
        return {
            "num_instances": launch.count,
            "urls": [f"{role}-{i}:{base + i}" for i in range(launch.count)],
        }

    return {
        "hostname": "localhost",
        "port": port,
        "backend": "pytorch",
        "context_servers": pool("prefill", port + 1),
        "generation_servers": pool("decode", port + 1001),
    }


def render_trtllm(
    plan: ServingPlan,
    workload: Workload,
    engine: Engine,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> tuple[list[str], str]:
    """An aggregated plan's ``trtllm-serve`` argv and the text of its extra-LLM-API YAML."""
    del engine
    check_aggregated("trtllm", plan)
    starts = trtllm_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
    return starts[0].argv, next(iter(starts[0].files.values()))


def render(
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> str:
    starts = trtllm_launches(plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len)
    text = script("trtllm", model_id, starts, [weights_note(workload, model_id)])
    if plan.mode == "disaggregated":
        cfg = yaml.safe_dump(disagg_config(starts), sort_keys=False).rstrip("\n")
        text += (
            "\n# the router over both pools (fill in the hosts)\n"
            f"cat > disagg_config.yaml <<'YAML'\n{cfg}\nYAML\n"
            "trtllm-serve disaggregated -c disagg_config.yaml\n"
        )
    return text
