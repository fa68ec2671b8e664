"""The measured serving runs as serving scenarios: each row of benchmarks/data/serving_runs_calibration.csv
mapped to a model spec, a cluster, a fixed ServingPlan, a Workload and an Engine, or skipped with
the reason. The rules are in benchmarks/data/README.md ("Serving runs"); every default a row takes
is listed in its case's ``assumptions``.

    from benchmarks.serving_set import serving_cases
    cases, skipped = serving_cases()
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from paraplan.cost.serving import Engine, ServingPlan, WorkerPlan, Workload
from paraplan.graph import ModelSpec, build_graph, preset
from paraplan.hardware import Cluster, build_cluster, node_type

from benchmarks.trtllm_bench import trtllm_bench_limits

__all__ = [
    "ServingCase",
    "Skipped",
    "serving_cases",
    "map_row",
    "load_rows",
    "burst_tpot_is_prefill",
    "DEFAULT_CSV",
    "METRICS",
]

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "serving_runs_calibration.csv"
METRICS = ("output_tok_s_per_gpu", "ttft_ms", "tpot_ms")

MODELS = {
    "meta-llama/Llama-3.1-70B": "llama3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3.1-70b",  # same architecture as 3.1 70B
    "meta-llama/Llama-3.1-8B": "llama3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
    "meta-llama/Llama-3.1-405B": "llama3.1-405b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama3.1-405b",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama4-scout",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "llama4-maverick",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",  # R1 is V3's architecture
    "nvidia/DeepSeek-R1-FP4": "deepseek-v3",
    "nvidia/DeepSeek-R1-0528-NVFP4": "deepseek-v3",
    "DeepSeek-V3/R1": "deepseek-v3",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "moonshotai/Kimi-K2.5": "kimi-k2",  # the K2 text tower (graph/data/presets.yaml kimi-k2)
}
NO_ARCHITECTURE = ("zhipuai/GLM-5", "Qwen/Qwen3.5-397B-A17B", "MiniMaxAI/MiniMax-M2.5")

# GPU label (as the rows write it) -> node preset of hardware/data/catalog.yaml
GPUS = {
    "H100 80GB HBM3": "dgx-h100",
    "H100 SXM 80GB (DGX H100)": "dgx-h100",
    "h100_sxm": "dgx-h100",
    "H200 141GB HBM3": "dgx-h200",
    "H200 SXM 141GB (DGX H200)": "dgx-h200",
    "H200 (doc label '131GB HBM3')": "dgx-h200",
    "h200_sxm": "dgx-h200",
    "H200": "dgx-h200",
    "B200 180GB (DGX B200)": "dgx-b200",
    "b200_sxm": "dgx-b200",
    "B200": "dgx-b200",
    "GB200 192GB (GB200 NVL72)": "gb200-nvl72",
    "gb200": "gb200-nvl72",
    "GB200 NVL72": "gb200-nvl72",
    "GB300": "gb300-nvl72",
    "gb300": "gb300-nvl72",
    "b300_sxm": "dgx-b300",
    "A100-SXM4-80GB": "dgx-a100-80gb",
    "L40S": "l40s-8gpu-pcie",
    "GH200 480GB": "gh200-mgx",
    "RTX 6000 Pro Blackwell Server Edition": "rtx-pro-6000-8gpu",
}

# TensorRT-LLM's defaults where a throughput table states none: BuildConfig / LlmArgs
# max_batch_size 2048 and max_num_tokens 8192 (tensorrt_llm/builder.py, llmapi/llm_args.py).
TRT_MAX_BATCH = 2048
TRT_MAX_TOKENS = 8192

BENCH_SOURCES = ("trtllm_perf_overview_v0.17", "trtllm_perf_overview_v1.0")
"""The trtllm-bench throughput tables: their batch limits are trtllm-bench's own, derived from the
dataset (benchmarks/trtllm_bench.py), not the library defaults."""


@dataclass(frozen=True)
class ServingCase:
    """One row as a serving scenario, with the measured values it is scored on (by metric)."""

    id: str
    source: str
    model: str  # preset name
    cluster_preset: str
    cluster_gpus: int
    plan: ServingPlan
    workload: Workload
    engine: Engine
    measured: dict[str, float]
    assumptions: tuple[str, ...] = ()
    label: str = ""

    @property
    def spec(self) -> ModelSpec:
        return _preset(self.model)

    @property
    def cluster(self) -> Cluster:
        return _cluster(self.cluster_preset, self.cluster_gpus)


@dataclass(frozen=True)
class Skipped:
    id: str
    source: str
    reason: str


@cache
def _preset(name: str) -> ModelSpec:
    return preset(name)


@cache
def _cluster(preset_name: str, gpus: int) -> Cluster:
    """``gpus`` GPUs of ``preset_name``: part of one node, or whole nodes holding them."""
    dpn = node_type(preset_name).devices_per_node
    if gpus <= dpn:
        return build_cluster(preset_name, gpus=gpus)
    return build_cluster(preset_name, nodes=math.ceil(gpus / dpn))


def load_rows(path: Path | str = DEFAULT_CSV) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _num(text: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    m = re.match(r"^-?[\d.]+(?:e-?\d+)?|^inf$", text)
    return float(m.group(0)) if m else None


def _weights(row: dict[str, str], model: str) -> str:
    w = row["weights_precision"].lower().strip()
    if model == "gpt-oss-120b" and ("fp4" in w):
        return "mxfp4"  # gpt-oss ships MXFP4 expert weights (openai/gpt-oss-120b config.json)
    if w.startswith(("fp4", "nvfp4")):
        return "nvfp4"
    if w.startswith("fp8"):
        return "fp8"
    if w.startswith("int4"):
        return "int4"
    return "bf16"


def _kv(row: dict[str, str], weights: str, engine: str) -> tuple[str, str | None]:
    """KV precision: the row's; else FP8 for FP8 / NVFP4 weights (ModelOpt checkpoints set
    kv_cache_quant_algo FP8 in hf_quant_config.json, and AIConfigurator infers FP8 KV for such
    runs), else the model dtype (the engines' 'auto')."""
    kv = row["kv_precision"].lower().strip()
    if kv.startswith("fp8"):
        return "fp8", None
    if kv.startswith(("fp16", "bf16")):
        return "bf16", None
    if weights in ("nvfp4", "fp8"):
        return "fp8", "kv_precision fp8 (not stated; the checkpoint's default)"
    return "bf16", "kv_precision bf16 (not stated; the engine's 'auto')"


def _version(row: dict[str, str]) -> str | None:
    """The engine version as the row gives it (its first word); None if unstated or if it is a
    Dynamo runtime's version (rows "via Dynamo": Dynamo 0.x ships TensorRT-LLM / vLLM 1.x)."""
    v = row["engine_version"].strip().split()
    if not v or "dynamo" in row["engine"].lower():
        return None
    return v[0]


def _engine(row: dict[str, str]) -> str | None:
    e = row["engine"].lower()
    if "tensorrt" in e or e.startswith("trtllm"):
        return "trtllm"
    if "sglang" in e:
        return "sglang"
    if "vllm" in e:
        return "vllm"
    return None


WORKER = re.compile(r"(\d+)x\(tp(\d+) pp(\d+) adp(\d*) moe_tp(\d+) moe_ep(\d+)(?: bs(\d+))?\)")
AGG = re.compile(r"tp(\d+) pp(\d+) adp(\d*) moe_tp(\d+) moe_ep(\d+)")


def _worker(tp: int, pp: int, adp: int, moe_ep: int) -> tuple[int, int, int, bool] | str:
    """AIConfigurator's (tp, pp, attention-dp, moe_ep) as the plan's (tp, pp, ep, dp_attention):
    attention DP over adp ranks is dp_attention with tp = adp; a worker mixing attention TP and
    DP (tp > 1 and adp > 1) has no plan field."""
    if adp > 1 and tp > 1:
        return f"attention tp {tp} x dp {adp} in one worker (the plan has tp or dp_attention, not both)"
    if adp > 1:
        return adp, pp, max(1, moe_ep), True
    return tp, pp, max(1, moe_ep), False


@dataclass(frozen=True)
class _Row:
    """What map_row reads from a row before either mapping pass (the measured tables' or
    AIConfigurator's) reads the layout: the model preset, the GPU label, the engine, the lengths
    and the precisions."""

    row: dict[str, str]
    model: str
    gpu: str
    engine: str
    isl: float
    osl: float
    weights: str
    kv: str


def map_row(row: dict[str, str]) -> ServingCase | Skipped:
    """One CSV row as a ServingCase, or Skipped with the reason (benchmarks/data/README.md)."""
    rid, source = row["id"], row["source_key"]
    name = row["model"].strip()
    if name in NO_ARCHITECTURE:
        return Skipped(rid, source, f"model {name}: no architecture source in the project (models.json)")
    if name not in MODELS:
        return Skipped(rid, source, f"model {name}: no preset")
    model = MODELS[name]
    gpu = row["gpu"].strip()
    if gpu not in GPUS:
        return Skipped(rid, source, f"gpu {gpu!r}: not in the catalog")
    engine = _engine(row)
    if engine is None:
        return Skipped(rid, source, f"engine {row['engine']!r}: not vLLM, SGLang or TensorRT-LLM")
    notes = row["notes"]
    if "MTP" in notes and "num_nextn_predict_layers" in notes:
        return Skipped(rid, source, "MTP speculative decoding (draft layers) is not modelled")
    if source in (
        "sglang_gb200_part2",
        "sglang_gb200_part1",
        "sglang_96xh100_pd_ep",
        "deepseek_infer_overview",
    ):
        return Skipped(
            rid, source, "one phase's per-GPU rate of a P/D deployment, not an end-to-end workload"
        )
    isl, osl = _num(row["isl"]), _num(row["osl"])
    if isl is None or osl is None:
        return Skipped(rid, source, "isl or osl not stated")
    weights = _weights(row, model)
    kv, kv_note = _kv(row, weights, engine)
    assumptions = [kv_note] if kv_note else []
    measured = _measured(row)
    if not measured:
        return Skipped(rid, source, "no output tok/s per GPU, TTFT or TPOT measured")
    r = _Row(row, model, gpu, engine, isl, osl, weights, kv)
    if source.startswith("aiconfigurator"):
        return _aic(r, measured, assumptions)
    return _table(r, measured, assumptions)


def _measured(row: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    tok = _num(row["output_tok_s_per_gpu"])
    if tok:
        out["output_tok_s_per_gpu"] = tok
    for metric in ("ttft", "tpot"):
        for col in (f"{metric}_ms_mean", f"{metric}_ms_stat_unstated", f"{metric}_ms_median"):
            v = _num(row[col])
            if v:
                out[f"{metric}_ms"] = v
                break
    return out


def _table(r: _Row, measured: dict[str, float], assumptions: list[str]) -> ServingCase | Skipped:
    """TensorRT-LLM tables (max load, online) and the blog rows with a stated layout."""
    row, rid, source = r.row, r.row["id"], r.row["source_key"]
    gpus = int(_num(row["num_gpus"]) or 1)
    tp = int(_num(row["tp"]) or 1)
    pp = int(_num(row["pp"]) or 1)
    ep = int(_num(row["ep"]) or 1)
    dp_attn = row["dp_attention"].strip().lower().startswith("yes")
    spec = _preset(r.model)
    if source == "trtllm_perf_overview_v1.0" and spec.is_moe:
        # the doc runs MoE models with enable_attention_dp and --ep (size unstated): ep = tp
        dp_attn, ep = tp > 1, tp
        assumptions.append(f"attention DP + ep {tp} (doc: enable_attention_dp, EP size unstated)")
    if tp * pp != gpus:
        return Skipped(rid, source, f"num_gpus {gpus} is not tp x pp = {tp * pp}")
    kv_fraction = 0.95 if source.startswith("trtllm_perf_overview") else None
    max_batch, max_tokens = TRT_MAX_BATCH, TRT_MAX_TOKENS
    concurrency: int | None = None
    rate: float | None = None
    num_requests: int | None = None
    nr = re.search(r"num_requests=(\d+)|(\d+) requests", row["notes"])
    if nr:
        num_requests = int(nr.group(1) or nr.group(2))
    mb = re.search(r"max_batch_size (\d+)", row["notes"])
    mt = re.search(r"max_num_tokens (\d+)", row["notes"])
    kf = re.search(r"kv_cache_free_gpu_mem_fraction ([\d.]+)", row["notes"])
    ranks = tp if dp_attn else 1
    if mb:
        max_batch = int(mb.group(1)) * ranks  # per rank under attention DP (TensorRT-LLM)
    if mt:
        max_tokens = int(mt.group(1)) * ranks
    if kf and source == "trtllm_dsr1_best_perf":
        kv_fraction = float(kf.group(1))
    if source in BENCH_SOURCES and not (mb or mt):
        max_batch, max_tokens = _bench_limits(r, spec, tp, pp)
        assumptions.append(
            f"trtllm-bench limits from the dataset: max_batch_size {max_batch // pp} per micro-batch, "
            f"max_num_tokens {max_tokens} (benchmarks/trtllm_bench.py; whole worker under attention DP)"
        )
    conc = _num(row["concurrency"])
    if conc is not None:
        concurrency = int(conc)
    stated_rate = _num(row["request_rate"])
    if stated_rate is not None:
        rate = stated_rate
    if conc is None and stated_rate is None:
        assumptions.append("max load: requests in flight limited by max_batch and the KV cache")
    if source == "trtllm_perf_overview_v0.14_online":
        assumptions.append("TensorRT-LLM 0.14 Triton backend: no chunked context (its default)")
    if burst_tpot_is_prefill(rate, num_requests, r.isl, r.osl, max_tokens) and "tpot_ms" in measured:
        measured = {k: v for k, v in measured.items() if k != "tpot_ms"}
        assumptions.append("TPOT not scored: the whole output falls inside the burst's prompt phase")
    chunked = source != "trtllm_perf_overview_v0.14_online"
    plan = ServingPlan(
        tp=tp,
        pp=pp,
        ep=ep,
        dp_attention=dp_attn,
        max_batch=max_batch,
        max_num_tokens=max_tokens,
        chunked_prefill=chunked,
    )
    workload = Workload(
        isl=r.isl,
        osl=r.osl,
        concurrency=concurrency,
        request_rate=rate,
        weights_precision=r.weights,
        kv_precision=r.kv,
        num_requests=num_requests,
    )
    return _case(r, gpus, plan, workload, measured, assumptions, kv_fraction)


@cache
def _params(model: str) -> float:
    return float(build_graph(_preset(model)).num_params)


def _bench_limits(r: _Row, spec: ModelSpec, tp: int, pp: int) -> tuple[int, int]:
    """max_batch (all pp micro-batches) and max_num_tokens of a trtllm-bench throughput row."""
    got = trtllm_bench_limits(
        params=_params(r.model),
        layers=spec.num_layers,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        tp=tp,
        pp=pp,
        gpu_GiB=node_type(GPUS[r.gpu]).accelerator.hbm_bytes / 2**30,
        weights_precision=r.weights,
        kv_precision=r.kv,
        isl=r.isl,
        osl=r.osl,
    )
    return got.max_batch_size * pp, got.max_num_tokens


def burst_tpot_is_prefill(
    rate: float | None, num_requests: int | None, isl: float, osl: float, max_num_tokens: int
) -> bool:
    """Whether a run's measured TPOT (mean inter-token latency) is a prompt step's time rather
    than a decode step's: all ``num_requests`` requests arrive at once (``rate`` inf) and their
    prompts take at least ``osl`` steps of ``max_num_tokens`` tokens (num_requests x isl /
    max_num_tokens >= osl). In-flight batching puts the waiting prompts into every step, so
    each request's whole output is generated in steps that each carry a full prompt budget:
    its inter-token latency is that step's time, which the serving model's burst
    (cost/serving.py ``_burst``: decode-only steps after the prompts) does not predict as TPOT.
    The rule (benchmarks/data/README.md, "Serving runs") drops TPOT for those rows only; their
    throughput and TTFT are scored."""
    if rate != math.inf or num_requests is None or max_num_tokens <= 0:
        return False
    return num_requests * isl / max_num_tokens >= osl


def _aic(r: _Row, measured: dict[str, float], assumptions: list[str]) -> ServingCase | Skipped:
    """AIConfigurator reference rows: the layout in the notes (``tpX ppX adpX moe_tpX moe_epX``,
    or ``P: n x (...); D: m x (...)`` for xPyD)."""
    row = r.row
    rid, source, notes = row["id"], row["source_key"], row["notes"]
    conc = _num(row["concurrency"])
    sc = re.search(r"silicon_concurrency=(\d+)", notes)
    concurrency = int(conc) if conc is not None else (int(sc.group(1)) if sc else None)
    bs = _num(row["batch_size"])
    if row["disaggregated"].strip().lower().startswith("yes"):
        pools = WORKER.findall(notes)
        if len(pools) != 2:
            return Skipped(rid, source, "disaggregated layout not found in the notes")
        shaped = []
        for n, tp, pp, adp, _mtp, mep, pbs in pools:
            w = _worker(int(tp), int(pp), int(adp or 1), int(mep))
            if isinstance(w, str):
                return Skipped(rid, source, w)
            shaped.append((int(n), w, int(pbs or 1)))
        (pn, (ptp, ppp, pep, pdp), pbs_), (dn, (dtp, dpp, dep, ddp), dbs) = shaped
        prefill = WorkerPlan(tp=ptp, pp=ppp, ep=pep, dp_attention=pdp, workers=pn)
        decode = WorkerPlan(tp=dtp, pp=dpp, ep=dep, dp_attention=ddp, workers=dn)
        gpus = pn * ptp * ppp + dn * dtp * dpp
        if concurrency is None:
            return Skipped(rid, source, "disaggregated row without a concurrency")
        plan = ServingPlan(
            mode="disaggregated",
            max_batch=dbs * (dtp if ddp else 1),
            max_num_tokens=int(pbs_ * r.isl * (ptp if pdp else 1)),
            prefill=prefill,
            decode=decode,
        )
    else:
        m = AGG.search(notes)
        if not m:
            return Skipped(rid, source, "layout not found in the notes")
        w = _worker(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1), int(m.group(5)))
        if isinstance(w, str):
            return Skipped(rid, source, w)
        tp, pp, ep, dp = w
        gpus = tp * pp
        ranks = tp if dp else 1
        if concurrency is None:
            if bs is None:
                return Skipped(rid, source, "neither concurrency nor batch size stated")
            concurrency = int(bs) * ranks
            measured = {k: v for k, v in measured.items() if k != "ttft_ms"}
            assumptions.append(
                "concurrency = batch x ranks (not stated); TTFT not scored (queue depth unknown)"
            )
        # the reference runs admit the whole concurrency (AIConfigurator's collector launches
        # the engine with a batch limit of at least it); bs is its per-rank batch
        max_batch = max(concurrency, int(bs) * ranks if bs else 0)
        plan = ServingPlan(tp=tp, pp=pp, ep=ep, dp_attention=dp, max_batch=max(max_batch, 1))
    if not measured:
        return Skipped(rid, source, "no metric left to score")
    workload = Workload(
        isl=r.isl, osl=r.osl, concurrency=concurrency, weights_precision=r.weights, kv_precision=r.kv
    )
    assumptions.append("TTFT/TPOT statistic unstated: scored as the mean")
    return _case(r, gpus, plan, workload, measured, assumptions)


def _case(
    r: _Row,
    gpus: int,
    plan: ServingPlan,
    workload: Workload,
    measured: dict[str, float],
    assumptions: list[str],
    kv_fraction: float | None = None,
) -> ServingCase:
    """The ServingCase of a mapped row: its plan and workload on ``gpus`` GPUs of the row's node
    preset, under the row's engine and version (``kv_fraction``: the engine's KV memory knob where
    the source states it)."""
    row = r.row
    return ServingCase(
        row["id"],
        row["source_key"],
        r.model,
        GPUS[r.gpu],
        gpus,
        plan,
        workload,
        Engine(r.engine, _version(row), kv_fraction=kv_fraction),
        measured,
        tuple(assumptions),
        row["source_where"],
    )


def serving_cases(path: Path | str = DEFAULT_CSV) -> tuple[list[ServingCase], list[Skipped]]:
    """Every row of ``path`` mapped (map_row): the cases and the skipped rows."""
    cases: list[ServingCase] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for row in load_rows(path):
        out = map_row(row)
        if isinstance(out, Skipped):
            skipped.append(out)
        elif out.id not in seen:
            seen.add(out.id)
            cases.append(out)
    return cases, skipped
