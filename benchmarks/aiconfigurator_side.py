"""AIConfigurator 0.12.0 on the serving calibration rows, for the side-by-side with paraplan.

    python -m benchmarks.aiconfigurator_side [CSV] [--out FILE.csv] [--python PATH]
        [--rows-out FILE.csv] [--ids ID,ID] [--jobs N] [--check-sweep]

Maps each row of the serving calibration file (default ``benchmarks/data/
serving_runs_calibration.csv``) to one AIConfigurator estimate by the rules of
``benchmarks/data/README_aiconfigurator.md`` (:func:`map_row`), runs them in AIConfigurator's own
venv (``--python``, else ``$PARAPLAN_AIC_PYTHON``, else ``.venv-aic/bin/python``) through
``benchmarks/aiconfigurator_driver.py`` in a subprocess, so AIConfigurator never becomes a
dependency of paraplan, and writes ``id,metric,measured,predicted,error`` (``--out``; metric one
of ``output_tok_s_per_gpu``, ``ttft_ms``, ``tpot_ms``; error = predicted / measured - 1): the
columns ``benchmarks/serving_fidelity.py`` writes for paraplan, so the two join on (id, metric)
(``python -m benchmarks.side_by_side``). ``--rows-out`` writes one line per row: how it was put to
AIConfigurator (protocol, model, system, backend, database version, layout) or why it was not.
Prints per source the median and p90 |error| per metric, the rows not expressed by reason, and the
overall figures last. ``--check-sweep`` also runs AIC's own ``sweep.sweep_agg`` on each max-load
row's layout and prints its top point beside the driver's ``agg_max`` (they agree to rounding).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.side_by_side import median, p90

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = Path(__file__).parent / "data" / "serving_runs_calibration.csv"
DRIVER = Path(__file__).parent / "aiconfigurator_driver.py"
METRICS = ("output_tok_s_per_gpu", "ttft_ms", "tpot_ms")
OUT_COLUMNS = ("id", "metric", "measured", "predicted", "error")

#: Measured columns per metric, in order of preference (AIC predicts one mean-field number; the
#: TRT-LLM online table gives means, the AIC reference set an unstated statistic; the order of
#: benchmarks/serving_set.py, so both benchmarks score a row against the same number).
MEASURED_COLUMNS: dict[str, tuple[str, ...]] = {
    "output_tok_s_per_gpu": ("output_tok_s_per_gpu",),
    "ttft_ms": ("ttft_ms_mean", "ttft_ms_stat_unstated", "ttft_ms_median"),
    "tpot_ms": ("tpot_ms_mean", "tpot_ms_stat_unstated", "tpot_ms_median"),
}

#: Row model id -> the id AIConfigurator ships a config for (same architecture: Llama 3.3 70B is
#: Llama 3.1 70B's architecture; an NVFP4/FP8 re-quantisation is the base model with explicit quant
#: modes). Mixtral's configs ship in ``aiconfigurator_core/model_configs`` but are not on AIC's
#: offline list, so the driver passes a local copy of the bundled config.json.
MODEL_IDS: dict[str, str | dict[str, str]] = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "mistralai/Mixtral-8x7B-v0.1": {"config_json": "mistralai--Mixtral-8x7B-v0.1_config.json"},
    "mistralai/Mixtral-8x22B-v0.1": {"config_json": "mistralai--Mixtral-8x22B-v0.1_config.json"},
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen/Qwen3.5-397B-A17B": "Qwen/Qwen3.5-397B-A17B",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
    "nvidia/DeepSeek-R1-FP4": "deepseek-ai/DeepSeek-R1",
    "nvidia/DeepSeek-R1-0528-NVFP4": "deepseek-ai/DeepSeek-R1",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "moonshotai/Kimi-K2.5": "moonshotai/Kimi-K2.5",
    "zhipuai/GLM-5": "zai-org/GLM-5",
    "MiniMaxAI/MiniMax-M2.5": "MiniMaxAI/MiniMax-M2.5",
}

#: MoE models among the TRT-LLM perf-overview rows (their layout rule differs from dense ones).
MOE_MODELS = frozenset(
    {
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "mistralai/Mixtral-8x7B-v0.1",
        "mistralai/Mixtral-8x22B-v0.1",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-235B-A22B-FP8",
    }
)

#: GPU label (substring, checked in this order) -> AIConfigurator system; None: AIC has no system.
SYSTEMS: tuple[tuple[str, str | None], ...] = (
    ("GH200", None),
    ("H800", None),
    ("GB300", "gb300"),
    ("GB200", "gb200"),
    ("B300", "b300_sxm"),
    ("B200", "b200_sxm"),
    ("H200", "h200_sxm"),
    ("H100", "h100_sxm"),
    ("A100", "a100_sxm"),
    ("L40S", "l40s"),
    ("RTX 6000 Pro", "rtx_pro_6000_server"),
)

#: TensorRT-LLM perf-overview precision -> (gemm, moe, kv, fmha) quant modes: what AIC itself
#: infers for nvidia/*-FP8 and *-NVFP4 ModelOpt checkpoints (the doc's checkpoints);
#: fp16/bf16 run unquantised.
TRT_QUANT: dict[str, tuple[str, str, str, str]] = {
    "fp8": ("fp8_static", "fp8", "fp8", "fp8"),
    "fp4": ("nvfp4", "nvfp4", "fp8", "fp8"),
    "nvfp4": ("nvfp4", "nvfp4", "fp8", "fp8"),
    "fp16": ("bfloat16", "bfloat16", "bfloat16", "bfloat16"),
    "bf16": ("bfloat16", "bfloat16", "bfloat16", "bfloat16"),
}

#: kv_cache_free_gpu_mem_fraction the TRT-LLM perf overview states ("0.95 in many cases").
TRT_PERF_KV_FRACTION = 0.95


class NotExpressible(Exception):
    """A row AIConfigurator cannot be asked about; the message is the reason."""


@dataclass
class Mapped:
    """One row as an AIConfigurator case (the driver's JSON) and what is measured on it."""

    id: str
    source: str
    case: dict[str, Any]
    measured: dict[str, float]
    assumptions: list[str] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text or "")
    return float(m.group(1)) if m else None


def _int(text: str | None, name: str, row_id: str) -> int:
    value = _num(text)
    if value is None:
        raise NotExpressible(f"{name} not stated")
    return int(value)


def measured_values(row: Mapping[str, str]) -> dict[str, float]:
    """The row's measured metrics, each from its preferred column (MEASURED_COLUMNS)."""
    out: dict[str, float] = {}
    for metric, columns in MEASURED_COLUMNS.items():
        for col in columns:
            value = _num(row.get(col))
            if value is not None and value > 0:
                out[metric] = value
                break
    return out


def system_of(gpu: str) -> str:
    for label, system in SYSTEMS:
        if label.lower() in gpu.lower():
            if system is None:
                raise NotExpressible(f"AIC 0.12.0 ships no system for GPU {gpu!r}")
            return system
    if gpu in {s for _, s in SYSTEMS}:  # the AIC reference rows name the system itself
        return gpu
    raise NotExpressible(f"no AIC system for GPU {gpu!r}")


def backend_of(engine: str) -> str:
    e = engine.lower()
    for key, name in (("tensorrt", "trtllm"), ("trtllm", "trtllm"), ("sglang", "sglang"), ("vllm", "vllm")):
        if key in e:
            return name
    raise NotExpressible(f"engine {engine!r} is not an AIC backend")


def model_of(model: str) -> str | dict[str, str]:
    if model not in MODEL_IDS:
        raise NotExpressible(f"model {model!r} has no AIC model config")
    return MODEL_IDS[model]


_LAYOUT = re.compile(r"tp(\d*) pp(\d*) adp(\d*) moe_tp(\d*) moe_ep(\d*)")
_POOL = re.compile(r"(\d+)x\(tp(\d*) pp(\d*) adp(\d*) moe_tp(\d*) moe_ep(\d*) bs(\d+)\)")


def _layout(tp: str, pp: str, adp: str, moe_tp: str, moe_ep: str) -> dict[str, int | None]:
    """AIC reference-set layout fields; an empty or 0 degree is left to AIC (dense models)."""
    return {
        "tp_size": int(tp or 1),
        "pp_size": int(pp or 1),
        "attention_dp_size": int(adp or 1),
        "moe_tp_size": int(moe_tp) if moe_tp and int(moe_tp) > 0 else None,
        "moe_ep_size": int(moe_ep) if moe_ep and int(moe_ep) > 0 else None,
    }


def _reference_quant(precision: str) -> dict[str, str]:
    """'fp4 (gemm nvfp4, moe nvfp4)' -> the AIC reference set's gemm/moe modes (KV and FMHA left
    to AIC's inference, as AIC's own regression tool does)."""
    m = re.search(r"gemm ([\w]*), moe ([\w]*)", precision)
    out = {}
    if m and m.group(1):
        out["gemm_quant_mode"] = m.group(1)
    if m and m.group(2):
        out["moe_quant_mode"] = m.group(2)
    return out


def _trt_quant(precision: str, kv: str) -> dict[str, str]:
    key = precision.split()[0].lower() if precision.strip() else ""
    if key not in TRT_QUANT:
        raise NotExpressible(f"weights_precision {precision!r} has no AIC quant mapping")
    gemm, moe, kv_mode, fmha = TRT_QUANT[key]
    if kv.lower().startswith(("fp16", "bf16")):
        kv_mode = fmha = "bfloat16"
    return {
        "gemm_quant_mode": gemm,
        "moe_quant_mode": moe,
        "kvcache_quant_mode": kv_mode,
        "fmha_quant_mode": fmha,
    }


def _trt_perf(row: Mapping[str, str], case: dict[str, Any], notes: list[str]) -> None:
    """TensorRT-LLM perf-overview rows: the fixed TP x PP at max load (agg_max)."""
    tp, pp = _int(row["tp"], "tp", row["id"]), _int(row["pp"] or "1", "pp", row["id"])
    est: dict[str, Any] = {"pp_size": pp, "free_gpu_memory_fraction": TRT_PERF_KV_FRACTION}
    if row["model"] in MOE_MODELS and row["source_key"] == "trtllm_perf_overview_v1.0":
        # the v1.0 doc runs MoE models with enable_attention_dp and an unstated --ep
        est.update(tp_size=1, attention_dp_size=tp, moe_tp_size=1, moe_ep_size=tp)
        if tp > 1:
            notes.append(f"MoE TP{tp} read as attention-DP {tp} + EP {tp} (doc: attention DP, EP unstated)")
    elif row["model"] in MOE_MODELS:
        est.update(tp_size=tp, moe_tp_size=tp, moe_ep_size=1)  # TRT-LLM 0.17 engines: MoE TP = TP
    else:
        est.update(tp_size=tp)
    est.update(_trt_quant(row["weights_precision"], row["kv_precision"]))
    version = (row["engine_version"] or "").split()[0] if row["engine_version"] else ""
    case.update(kind="agg_max", engine_version=version, estimate=est)


def _online(row: Mapping[str, str], case: dict[str, Any], notes: list[str]) -> None:
    """TensorRT-LLM 0.14 online rows: offered QPS -> AIC batch by Little's law (agg_rate)."""
    rate = row["request_rate"].strip().lower()
    est: dict[str, Any] = {
        "tp_size": _int(row["tp"], "tp", row["id"]),
        "pp_size": _int(row["pp"] or "1", "pp", row["id"]),
    }
    est.update(_trt_quant(row["weights_precision"], row["kv_precision"]))
    case.update(kind="agg_rate", engine_version=row["engine_version"], estimate=est)
    case["rate_qps"] = "inf" if rate in ("inf", "infinity") else float(rate)


def _reference(row: Mapping[str, str], case: dict[str, Any], notes: list[str]) -> None:
    """AIConfigurator's own measured reference rows: the exact layout and batch from the notes."""
    est: dict[str, Any] = _reference_quant(row["weights_precision"])
    if row["disaggregated"].startswith("yes"):
        p = re.search(r"P: " + _POOL.pattern, row["notes"])
        d = re.search(r"D: " + _POOL.pattern, row["notes"])
        if not (p and d):
            raise NotExpressible("disaggregated layout not found in notes")
        for prefix, m in (("prefill", p), ("decode", d)):
            layout = _layout(*m.groups()[1:6])
            est.update({f"{prefix}_{k}": v for k, v in layout.items()})
            est[f"{prefix}_num_workers"] = int(m.group(1))
            est[f"{prefix}_batch_size"] = int(m.group(7))
        case.update(kind="disagg_fixed", estimate=est)
    else:
        m = _LAYOUT.search(row["notes"])
        if m is None:
            raise NotExpressible("layout not found in notes")
        est.update(_layout(*m.groups()))
        est["batch_size"] = _int(row["batch_size"], "batch_size", row["id"])
        case.update(kind="agg_fixed", estimate=est)
    case["engine_version"] = row["engine_version"]


def _dsr1(row: Mapping[str, str], case: dict[str, Any], notes: list[str]) -> None:
    """TRT-LLM DeepSeek-R1 best-performance guide: max-throughput rows with their launch knobs."""
    if "MTP" in row["notes"]:
        raise NotExpressible(
            "MTP decoding: AIC needs the mean accepted draft tokens (nextn_accepted), which the guide "
            "does not state"
        )
    knobs = {
        k: _num(m.group(1))
        for k, m in (
            (k, re.search(k + r" ([0-9.]+)", row["notes"]))
            for k in ("max_batch_size", "max_num_tokens", "kv_cache_free_gpu_mem_fraction")
        )
        if m
    }
    if "max_batch_size" not in knobs:
        raise NotExpressible("max_batch_size not stated")
    gpus = _int(row["num_gpus"], "num_gpus", row["id"])
    est: dict[str, Any] = {
        "tp_size": 1,
        "attention_dp_size": gpus,
        "moe_tp_size": 1,
        "moe_ep_size": _int(row["ep"], "ep", row["id"]),
    }
    if row["dp_attention"] != "yes":
        raise NotExpressible("only the attention-DP max-throughput layout is mapped")
    est["batch_size"] = int(knobs["max_batch_size"] or 0)
    if knobs.get("max_num_tokens"):
        est["ctx_tokens"] = int(knobs["max_num_tokens"] or 0)
    if knobs.get("kv_cache_free_gpu_mem_fraction"):
        est["free_gpu_memory_fraction"] = knobs["kv_cache_free_gpu_mem_fraction"]
    if row["weights_precision"].startswith("nvfp4"):
        est.update(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    if row["kv_precision"].startswith(("fp16", "bf16")):
        est.update(kvcache_quant_mode="bfloat16")
    notes.append(
        f"batch per attention-DP rank = max_batch_size {est['batch_size']} (concurrency "
        f"{row['concurrency']} = {gpus} ranks x max_batch_size); ctx_tokens = max_num_tokens"
    )
    case.update(kind="agg_fixed", engine_version=row["engine_version"], estimate=est)


def _vllm_gb300(row: Mapping[str, str], case: dict[str, Any], notes: list[str]) -> None:
    """vLLM GB300 DeepSeek blog: the mixed-context row (ISL 2k / OSL 1k, concurrency unstated)."""
    if "prefill-only" in row["notes"]:
        raise NotExpressible("prefill-only total throughput: none of the three scored metrics is measured")
    est: dict[str, Any] = {
        "tp_size": 1,
        "attention_dp_size": _int(row["num_gpus"], "num_gpus", row["id"]),
        "moe_tp_size": 1,
        "moe_ep_size": _int(row["ep"], "ep", row["id"]),
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
    }
    case.update(kind="agg_max", engine_version=row["engine_version"], estimate=est, isl=2048, osl=1024)
    notes.append(
        "ISL '2k' / OSL '1k' read as 2048 / 1024; concurrency not stated: AIC's max-throughput point"
    )


_SOURCES = {
    "trtllm_perf_overview_v1.0": _trt_perf,
    "trtllm_perf_overview_v0.17": _trt_perf,
    "trtllm_perf_overview_v0.14_online": _online,
    "aiconfigurator_silicon_sample": _reference,
    "trtllm_dsr1_best_perf": _dsr1,
    "vllm_gb300_deepseek": _vllm_gb300,
}


def map_row(row: Mapping[str, str]) -> Mapped:
    """One calibration row -> an AIConfigurator case; raises NotExpressible with the reason."""
    source = row["source_key"]
    measured = measured_values(row)
    if not measured:
        raise NotExpressible("none of output_tok_s_per_gpu / ttft / tpot is measured")
    if source not in _SOURCES:
        raise NotExpressible(
            f"source {source}: per-phase large-scale-EP throughput whose batch unit and OSL the source "
            "does not state (no AIC protocol)"
        )
    notes: list[str] = []
    case: dict[str, Any] = {
        "id": row["id"],
        "model": model_of(row["model"]),
        "system": system_of(row["gpu"]),
        "backend": backend_of(row["engine"]),
        "num_gpus": _num(row["num_gpus"]),
    }
    if row["isl"]:
        case["isl"] = _int(row["isl"], "isl", row["id"])
    if row["osl"]:
        case["osl"] = _int(row["osl"], "osl", row["id"])
    _SOURCES[source](row, case, notes)
    if "isl" not in case or "osl" not in case:
        raise NotExpressible("isl/osl not stated")
    return Mapped(row["id"], source, case, measured, notes)


def map_rows(rows: Iterable[Mapping[str, str]]) -> tuple[list[Mapped], dict[str, str]]:
    """The rows AIC can be asked about, and the reason for each of the others (by id)."""
    mapped: list[Mapped] = []
    skipped: dict[str, str] = {}
    for row in rows:
        try:
            mapped.append(map_row(row))
        except NotExpressible as exc:
            skipped[row["id"]] = str(exc)
    return mapped, skipped


def aic_python(explicit: str | None = None) -> str | None:
    """The AIConfigurator venv's interpreter: the argument, $PARAPLAN_AIC_PYTHON, .venv-aic."""
    path = explicit or os.environ.get("PARAPLAN_AIC_PYTHON") or str(ROOT / ".venv-aic" / "bin" / "python")
    return path if Path(path).exists() else None


def run_driver(
    cases: Sequence[Mapping[str, Any]], python: str, jobs: int = 1, timeout_s: float | None = None
) -> dict[str, Any]:
    """Run the driver on ``cases`` in ``jobs`` parallel subprocesses; the merged JSON reply."""
    chunks = [list(cases[i::jobs]) for i in range(max(1, jobs)) if cases[i::jobs]]
    replies = []
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            # files, not pipes: a driver blocked on a full pipe while another is read would hang
            src, out = Path(tmp) / f"cases{i}.json", Path(tmp) / f"out{i}.txt"
            src.write_text(json.dumps(chunk))
            with src.open() as fin, out.open("w") as fout, (Path(tmp) / f"err{i}.txt").open("w") as ferr:
                procs.append(subprocess.Popen([python, str(DRIVER)], stdin=fin, stdout=fout, stderr=ferr))
        for i, proc in enumerate(procs):
            proc.wait(timeout=timeout_s)
            if proc.returncode != 0:
                err = (Path(tmp) / f"err{i}.txt").read_text()
                raise RuntimeError(f"AIConfigurator driver failed ({proc.returncode}): {err[-3000:]}")
            replies.append(json.loads((Path(tmp) / f"out{i}.txt").read_text().strip().splitlines()[-1]))
    return {
        "aiconfigurator": replies[0]["aiconfigurator"],
        "wall_s": max(r["wall_s"] for r in replies),
        "results": [res for r in replies for res in r["results"]],
    }


def error_rows(mapped: Sequence[Mapped], results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``id,metric,measured,predicted,error`` for every measured metric AIC predicted."""
    by_id = {r["id"]: r for r in results}
    out = []
    for m in mapped:
        res = by_id.get(m.id)
        if not res or not res.get("ok"):
            continue
        for metric in METRICS:
            if metric in m.measured and res["predicted"].get(metric):
                pred = float(res["predicted"][metric])
                out.append(
                    {
                        "id": m.id,
                        "metric": metric,
                        "measured": m.measured[metric],
                        "predicted": round(pred, 4),
                        "error": round(pred / m.measured[metric] - 1, 6),
                    }
                )
    return out


def summary_table(errors: Sequence[Mapping[str, Any]], sources: Mapping[str, str]) -> str:
    """Per source and metric: rows, median |error|, p90 |error|, signed median; overall last."""
    groups: dict[tuple[str, str], list[float]] = {}
    for e in errors:
        groups.setdefault((sources.get(e["id"], "?"), e["metric"]), []).append(float(e["error"]))
        groups.setdefault(("overall", e["metric"]), []).append(float(e["error"]))
    lines = [f"{'source':36} {'metric':22} {'n':>4} {'med|err|':>9} {'p90|err|':>9} {'med err':>8}"]
    for (src, metric), errs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "overall", kv[0])):
        a = [abs(x) for x in errs]
        lines.append(
            f"{src:36} {metric:22} {len(errs):4d} {median(a):9.1%} {p90(a):9.1%} {median(errs):+8.1%}"
        )
    return "\n".join(lines)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _write(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


ROW_COLUMNS = (
    "id", "source_key", "status", "aic_kind", "model", "system", "backend", "engine_version",
    "aic_db_version", "isl", "osl", "estimate", "at", "assumptions", "reason",
)  # fmt: skip


def row_records(
    rows: Sequence[Mapping[str, str]],
    mapped: Sequence[Mapped],
    skipped: Mapping[str, str],
    results: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One line per calibration row: how it was put to AIC and what came back, or why not."""
    by_map = {m.id: m for m in mapped}
    by_res = {r["id"]: r for r in results}
    out = []
    for row in rows:
        rec: dict[str, Any] = {"id": row["id"], "source_key": row["source_key"]}
        if row["id"] in skipped:
            rec.update(status="not expressible", reason=skipped[row["id"]])
        else:
            m, res = by_map[row["id"]], by_res.get(row["id"], {})
            c = m.case
            rec.update(
                status="ok" if res.get("ok") else "AIC error",
                aic_kind=c["kind"],
                model=c["model"] if isinstance(c["model"], str) else c["model"]["config_json"],
                system=c["system"],
                backend=c["backend"],
                engine_version=c.get("engine_version", ""),
                aic_db_version=res.get("aic_db_version", ""),
                isl=c["isl"],
                osl=c["osl"],
                estimate=json.dumps(
                    {k: v for k, v in c["estimate"].items() if v is not None}, sort_keys=True
                ),
                at=json.dumps(res.get("at", {}), sort_keys=True),
                assumptions="; ".join(m.assumptions),
                reason=res.get("reason", ""),
            )
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.aiconfigurator_side", description=__doc__.splitlines()[0]
    )
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV), help="serving calibration CSV")
    ap.add_argument("--out", help="write id,metric,measured,predicted,error here")
    ap.add_argument("--rows-out", help="write one line per row: mapping, AIC version, or the reason")
    ap.add_argument(
        "--python", help="AIConfigurator venv interpreter (default $PARAPLAN_AIC_PYTHON, .venv-aic)"
    )
    ap.add_argument("--ids", help="only these row ids (comma-separated)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel driver processes")
    ap.add_argument(
        "--check-sweep",
        action="store_true",
        help="max-load rows: also AIC's own sweep_agg top point, compared",
    )
    args = ap.parse_args(argv)

    rows = _read(Path(args.csv))
    if args.ids:
        keep = set(args.ids.split(","))
        rows = [r for r in rows if r["id"] in keep]
    mapped, skipped = map_rows(rows)
    python = aic_python(args.python)
    if python is None:
        print(
            "no AIConfigurator venv: pass --python, set PARAPLAN_AIC_PYTHON, or build .venv-aic "
            "(python3.12 -m venv .venv-aic && .venv-aic/bin/pip install aiconfigurator==0.12.0)",
            file=sys.stderr,
        )
        return 2
    cases = [{**m.case, "check_sweep": args.check_sweep} for m in mapped]
    reply = run_driver(cases, python, jobs=args.jobs)
    results = reply["results"]
    for r in results:
        if args.check_sweep and r.get("ok") and "sweep_agg_tok_s_per_gpu" in r["at"]:
            ours, theirs = r["predicted"]["output_tok_s_per_gpu"], r["at"]["sweep_agg_tok_s_per_gpu"]
            print(
                f"{r['id']}: agg_max {ours:.3f} tok/s/GPU, AIC sweep_agg top {theirs:.3f} "
                f"({ours / theirs - 1:+.2e})"
            )
    errors = error_rows(mapped, results)
    if args.out:
        _write(Path(args.out), OUT_COLUMNS, errors)
    if args.rows_out:
        _write(Path(args.rows_out), ROW_COLUMNS, row_records(rows, mapped, skipped, results))
    sources = {r["id"]: r["source_key"] for r in rows}
    print(
        f"AIConfigurator {reply['aiconfigurator']}: {len(rows)} rows, {len(mapped)} put to AIC, "
        f"{sum(1 for r in results if r.get('ok'))} answered, {len(errors)} scored metrics, "
        f"driver wall {reply['wall_s']} s"
    )
    reasons: dict[str, int] = {}
    for why in skipped.values():
        reasons[why] = reasons.get(why, 0) + 1
    for r in results:
        if not r.get("ok"):
            reasons[f"AIC: {r['reason']}"] = reasons.get(f"AIC: {r['reason']}", 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  not scored ({n}): {why}")
    print(summary_table(errors, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
