"""Serving plans the engine-parser tests render (aggregated and disaggregated; dense, MoE, MLA),
with the memory the cost model predicts for each and a local model directory per model (its HF
config.json from graph/data/hf; SGLang's resolution reads it, nothing is downloaded)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost.serving import Engine, ServingPlan, WorkerPlan, Workload, evaluate_serving
from paraplan.graph import preset
from paraplan.hardware import Cluster, build_cluster
from paraplan.rules.serving import GpuMemory
from paraplan.rules.serving_memory import pool_memories

from paraplan.export.serving import gpu_memory

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "graph" / "data" / "hf"

__all__ = ["Case", "CASES", "model_dirs", "memory_of"]


@dataclass(frozen=True)
class Case:
    name: str
    preset: str  # paraplan model preset (cost model)
    hf: str  # graph/data/hf/<hf>.json: the config.json of the model directory
    cluster: str
    plan: ServingPlan
    workload: Workload
    max_model_len: int | None = None
    engines: tuple[str, ...] = ("vllm", "sglang", "trtllm")


FP8_KV = Workload(isl=1024, osl=1024, concurrency=256, kv_precision="fp8")
CASES = (
    Case(
        "dense-tp", "llama3-8b", "llama3-8b", "dgx-h200", ServingPlan(tp=2, replicas=4, max_batch=256), FP8_KV
    ),
    Case(
        "dense-pp-whole-prompts",
        "llama3-8b",
        "llama3-8b",
        "dgx-h100",
        ServingPlan(tp=2, pp=2, max_batch=128, max_num_tokens=8192, chunked_prefill=False),
        Workload(isl=2048, osl=256, concurrency=128),
        max_model_len=8192,
    ),
    Case(
        "moe-ep",
        "qwen3-30b-a3b",
        "qwen3-30b-a3b",
        "dgx-h200",
        ServingPlan(tp=8, ep=8, max_batch=512, max_num_tokens=16384),
        Workload(isl=1024, osl=1024, concurrency=512, weights_precision="fp8"),
    ),
    Case(
        "moe-ep-groups",
        "qwen3-30b-a3b",
        "qwen3-30b-a3b",
        "dgx-h200",
        ServingPlan(tp=8, ep=4, max_batch=256),
        FP8_KV,
        engines=("sglang", "trtllm"),
    ),
    Case(
        "mla-dp-attention",
        "deepseek-v3",
        "deepseek-v3",
        "dgx-b200",
        ServingPlan(tp=8, ep=8, dp_attention=True, max_batch=1024, max_num_tokens=16384),
        Workload(isl=1024, osl=1024, concurrency=1024, weights_precision="fp8", kv_precision="fp8"),
    ),
    Case(
        "mla-disaggregated",
        "deepseek-v3",
        "deepseek-v3",
        "gb200-nvl72",
        ServingPlan(
            mode="disaggregated",
            prefill=WorkerPlan(tp=8, ep=8, workers=3),
            decode=WorkerPlan(tp=16, ep=16, dp_attention=True, workers=2),
            max_batch=1024,
            max_num_tokens=16384,
        ),
        Workload(isl=4096, osl=1024, concurrency=2048, weights_precision="nvfp4", kv_precision="fp8"),
    ),
)


def cluster_of(case: Case) -> Cluster:
    if case.cluster == "gb200-nvl72":
        return build_cluster(case.cluster, gpus=72)
    return build_cluster(case.cluster, nodes=4)


def memory_of(case: Case, engine: str) -> GpuMemory | dict[str, GpuMemory]:
    """The cost model's per-GPU memory of the case's plan under ``engine``'s rule: the prediction's,
    and for a disaggregated plan each pool's (rules/serving_memory.py pool_memories)."""
    cluster = cluster_of(case)
    pred = evaluate_serving(preset(case.preset), cluster, case.plan, case.workload, Engine(engine))
    assert pred.fits, (case.name, engine, pred.reasons)
    if case.plan.mode == "disaggregated":
        return pool_memories(preset(case.preset), cluster, case.plan, case.workload, Engine(engine))
    return gpu_memory(pred, cluster)


def model_dirs(root: Path) -> dict[str, Path]:
    """One directory per HF config the cases use, each holding that config.json."""
    out = {}
    for hf in sorted({c.hf for c in CASES}):
        d = root / hf
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(json.loads((HF / f"{hf}.json").read_text())))
        out[hf] = d
    return out
