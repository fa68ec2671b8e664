"""The measured-memory file as paraplan scenarios: each run mapped to model, cluster, job, plan.

The file (``data/memory_runs_calibration.csv``, docs: docs/memory.md) has other columns
than the step-time file, so it has its own mapping; the rules follow benchmarks/calibration_set.py
wherever the two files say the same thing, and each default a row takes is listed in its
``MemoryCase.defaults``:

- **statistic**: ``measured_what`` allocated -> paraplan's ``peak_allocated_bytes``, reserved ->
  ``peak_reserved_bytes``; unstated (and OOM rows, whose reading is the last one before the
  failure, not the need) -> no error, the row counts for fit only. An allocated row whose notes
  give the same run's reserved peak too ("real reserved X GiB": SimuMax's rows, the max over
  ranks of torch.cuda.max_memory_reserved) is scored on both (``MemoryCase.reserved_gib``).
- **device memory**: the mapped preset's (A100 80GB -> dgx-a100-80gb, H100 80GB -> dgx-h100,
  H200 -> dgx-h200, B200 -> dgx-b200). Two parts the catalog lacks are mapped for memory only
  (their step times are not used here): the 96 GB HBM2e H100 of torchtitan's Dec 2024 runs ->
  dgx-h100 with the capacity scaled by 96/80 (95.6 GiB; the source says its readings sit at
  "~88% of 95 GiB"), and the unnamed Blackwell part of torchtitan's NVFP4 doc -> gb200-nvl72 with
  the 184.3 GiB the doc's percentages imply (179.94 GiB = 97.6%). Fit is then the predicted
  ``peak_memory_bytes`` against that capacity.
- **model**: dense rows from their columns (SwiGLU, RMSNorm; tied embeddings where the notes say
  so); MoE rows from the architecture they name: a preset (Qwen3-30B-A3B, Nemotron 3 Nano, and
  DeepSeek-V3 truncated to the row's layers with one dense layer and no MTP, as SimuMax's "1
  dense + 3 MoE"), else the model's published config (``_MOE_CONFIGS``: DeepSeek-V2, Moonlight
  16B-A3B, torchtitan's DeepSeek-V3 16B), truncated to the row's layers.
- **plan**: the row's degrees; vp 1 and micro-batch 1 where unstated (torchtitan's Table 6 rows:
  local batch 8 per DP rank, torchtitan's default pipeline micro-batch of 1, so 8 micro-batches);
  ZeRO 1 for Megatron's distributed optimizer, 3 for FSDP2, 0 for a single device; sequence
  parallel as stated, else on when tp > 1 (Megatron-Bridge recipes); ep wider than dp*cp folds
  over tp (etp = 1), as calibration_set.py.
- **recompute**: none / full as stated; Megatron's selective ``core_attn`` -> selective;
  Megatron-Bridge ``--recompute-modules`` other than core_attn alone (layernorm, moe_act,
  mla_up_proj, mlp, moe) -> selective with ``job.recompute_modules`` (cost/recompute_modules.py);
  torchtitan's op-level selective checkpointing (``selective (op-level SAC)``) -> selective with
  ``job.selective_policy: torchtitan_op`` (cost/recompute.py: it keeps chosen matmul outputs,
  between Megatron's selective and full, memory.md); an unstated torchtitan AC mode -> the same
  (its config default).
- **loss**: torchtitan rows ``job.cross_entropy: upcast`` (torchtitan's cross_entropy_loss casts
  the logits to fp32 before torch's cross_entropy), ``compiled`` where the run compiles with a
  torchtitan that compiles the loss too (2025 on; the Dec 2024 runs compiled the blocks only:
  ``_titan_loss``); a row whose notes name a chunked loss (torchtitan's ChunkedLossWrapper,
  torchtune's CEWithChunkedOutputLoss) ``job.loss_chunks: 8``, both their defaults; the Megatron
  rows fused (SimuMax's cases are "cef", cross-entropy fusion).
- **variable sequence lengths**: a fine-tuning row (the model column says SFT) whose notes do not
  say it was packed to a fixed length -> ``job.variable_seq_len`` (an assumption: the Bridge Llama
  3 70B SFT rows' source blames fragmentation for their out-of-memory, which a loop of fixed
  tensor shapes does not grow; the recipe's packing settings were not read).
- **job**: precision as calibration_set.py (``_precision``); fp32 gradients except
  Megatron-Bridge rows (their performance recipes reduce in bf16, as in the step-time mapping);
  ``optimizer_moments: bf16`` for the Bridge recipes that set the precision-aware optimizer's
  moments to bf16 (Moonlight, DeepSeek-V3, OLMoE: ``_BF16_MOMENTS``); ``moe_probs_applied:
  activation`` for the Megatron-Core rows (SimuMax, Megatron-Bridge: megatron-core applies the
  router's probabilities in the experts' activation), auto (combine) for torchtitan's
  (rules/moe_probs.py);
  ``job.allocator`` expandable_segments where the row says so, else default.
- **MoE software state**: benchmarks/moe_state.py read from the row's notes and precision text
  ("TE CUDA graphs ..." -> partial graphs), SimuMax's "capacity factor 1 with pad-to-capacity" ->
  ``moe_routing: {capacity_factor: 1.0}``.

Skipped with the reason: rows whose optimizer state paraplan does not model (torchtune's pure
bf16 AdamW keeps 2 B states, paraplan 12 B of fp32 master, momentum and variance; QLoRA's NF4
base weights); rows on a part the catalog lacks, or a MoE model without a preset or published
config; malformed rows (a needed field empty, text where a number belongs, an unknown
``measured_what`` or ``oom``, more fields than the header). Any file with the columns
``REQUIRED_COLUMNS`` (measured peaks outside the calibration file) is mapped by the same rules;
a file without them is a ConfigError naming the columns.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.graph import preset
from paraplan.graph.presets import to_fields

from benchmarks.calibration_set import _precision
from benchmarks.moe_state import moe_state
from paraplan.errors import ConfigError

__all__ = [
    "MemoryCase",
    "MemorySkipped",
    "load_memory_cases",
    "MEMORY_CSV_PATH",
    "REQUIRED_COLUMNS",
    "source_of",
]

MEMORY_CSV_PATH = Path(__file__).parent / "data" / "memory_runs_calibration.csv"
GIB = 2**30

_HARDWARE = (  # (text in the gpu column, preset, capacity GiB where the row's part differs)
    ("HBM2e 96GB", "dgx-h100", 79.65 * 96 / 80),
    ("H100 80GB", "dgx-h100", None),
    ("H200", "dgx-h200", None),
    ("Blackwell SM100", "gb200-nvl72", 184.3),  # before B200: its text says "e.g. GB200"
    ("B200", "dgx-b200", None),
    ("A100", "dgx-a100-80gb", None),
)

LOSS_CHUNKS = 8
"""Chunks of a row whose notes name a chunked loss: torchtitan 0.3.0's ChunkedLossWrapper
``num_chunks`` and torchtune's CEWithChunkedOutputLoss ``num_output_chunks`` both default to 8."""

_MLA = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512}
# published configs (HF config.json of deepseek-ai/DeepSeek-V2 and moonshotai/Moonlight-16B-A3B;
# torchtitan models/deepseek_v3/__init__.py "16B": the Moonlight shape with vocab 102400)
_MOE_CONFIGS: dict[str, dict[str, Any]] = {
    "DeepSeek-V2": {
        "hidden": 5120,
        "ffn_hidden": 12288,
        "heads": 128,
        "kv_heads": 128,
        "vocab": 102400,
        "experts": 160,
        "top_k": 6,
        "shared_experts": 2,
        "moe_ffn_hidden": 1536,
        "shared_ffn_hidden": 1536,
        "first_dense_layers": 1,
        "q_lora_rank": 1536,
        **_MLA,
    },
    "Moonlight 16B-A3B": {
        "hidden": 2048,
        "ffn_hidden": 11264,
        "heads": 16,
        "kv_heads": 16,
        "vocab": 163840,
        "experts": 64,
        "top_k": 6,
        "shared_experts": 2,
        "moe_ffn_hidden": 1408,
        "shared_ffn_hidden": 1408,
        "first_dense_layers": 1,
        **_MLA,
    },
    "DeepSeek-V3 16B": {
        "hidden": 2048,
        "ffn_hidden": 10944,
        "heads": 16,
        "kv_heads": 16,
        "vocab": 102400,
        "experts": 64,
        "top_k": 6,
        "shared_experts": 2,
        "moe_ffn_hidden": 1408,
        "shared_ffn_hidden": 1408,
        "first_dense_layers": 1,
        **_MLA,
    },
}
# Megatron-Bridge recipes whose optimizer keeps Adam's moments in bf16 (use_precision_aware_optimizer,
# exp_avg_dtype = exp_avg_sq_dtype = torch.bfloat16: megatron-bridge 0.3.1 recipes/moonlight/
# moonlight_16b.py, deepseek/deepseek_v3.py, olmoe/olmoe_7b.py; the Qwen3, Nemotron and Llama
# recipes keep fp32)
_BF16_MOMENTS = ("Moonlight", "DeepSeek-V3", "OLMoE")
_MOE_PRESETS = {"Qwen3-30B-A3B": "qwen3-30b-a3b", "Nemotron 3 Nano": "nemotron3-nano-30b-a3b"}


@dataclass(frozen=True)
class MemoryCase:
    row_id: str
    source: str  # simumax | megatron-bridge | torchtune | torchtitan
    scenario: dict[str, Any]
    statistic: str  # allocated | reserved | unstated
    measured_gib: float | None
    oom: bool
    capacity_gib: float | None  # the row's device memory where the preset's differs
    defaults: tuple[str, ...] = field(default=())
    reserved_gib: float | None = None  # a second reading, reserved, where an allocated row gives one


@dataclass(frozen=True)
class MemorySkipped:
    row_id: str
    reason: str


_MEGATRON_SOURCES = ("simumax", "megatron-bridge")
"""The sources whose runs are Megatron-Core's (SimuMax simulates and measures Megatron-LM)."""


def source_of(row_id: str) -> str:
    """The source family of a row, from its id prefix."""
    for prefix, name in (("simumax", "simumax"), ("mbridge", "megatron-bridge"), ("ttune", "torchtune")):
        if row_id.startswith(prefix):
            return name
    return "torchtitan"  # tt*, ao-* (torchao's runs are torchtitan's trainer)


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def _model(row: dict[str, str], defaults: list[str]) -> dict[str, Any] | str:
    """Scenario model fields of a row, or the reason it cannot be mapped."""
    name, layers = row["model"], int(row["n_layers"])
    for key, fields in _MOE_CONFIGS.items():
        if name.startswith(key):
            return {"name": key, "layers": layers, "activation": "swiglu", "norm": "rmsnorm", **fields}
    if name.startswith("DeepSeek-V3 dims"):  # SimuMax's truncation: 1 dense + 3 MoE, no MTP
        values = {k: v for k, v in to_fields(preset("deepseek-v3")).items() if k not in ("name", "rope")}
        return {
            **values,
            "name": "deepseek-v3-truncated",
            "layers": layers,
            "first_dense_layers": 1,
            "mtp_layers": 0,
        }
    for key, preset_name in _MOE_PRESETS.items():
        if name.startswith(key):
            values = {k: v for k, v in to_fields(preset(preset_name)).items() if k != "name"}
            if int(values["layers"]) != layers:
                return f"preset {preset_name} has {values['layers']} layers, the row {layers}"
            return {**values, "name": preset_name}
    if row["experts"]:
        return f"MoE model {name!r} without a preset or published config"
    ffn, kv = _int(row["ffn_hidden"]), _int(row["n_kv_heads"])
    if ffn is None or kv is None:
        return "architecture incomplete"
    tied = "tied embeddings" in row["notes"].lower()
    return {
        "name": name,
        "layers": layers,
        "hidden": int(row["hidden"]),
        "ffn_hidden": ffn,
        "heads": int(row["n_heads"]),
        "kv_heads": kv,
        "vocab": int(row["vocab"]),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "tied_embeddings": tied,
    }


def _recompute(row: dict[str, str], defaults: list[str]) -> str:
    text = row["recompute"].lower().strip()
    if text.startswith("none") or text == "selective modules []":
        return "none"
    if text.startswith("full"):
        return "full"
    if not text:
        defaults.append("recompute=selective, op-level (AC mode not stated: torchtitan's config default)")
        return "selective"
    if ("op" in text and "sac" in text) or "selectiveac" in text.replace(" ", ""):
        return "selective"
    return "selective"


def _modules(row: dict[str, str]) -> list[str]:
    """Megatron's ``--recompute-modules`` of a row ("selective modules layernorm, moe_act",
    "selective mlp, core_attn"): ``job.recompute_modules`` (cost/recompute_modules.py); [] for
    core_attn alone (Megatron's default) and for rows that name none."""
    text = row["recompute"].lower().strip()
    if not text.startswith("selective") or "sac" in text or "selectiveac" in text.replace(" ", ""):
        return []
    words = re.sub(r"^selective( modules)?", "", text).split(",")
    modules = sorted({w.strip() for w in words if w.strip() and not set(w.strip()) & set("([])")})
    return [] if modules in ([], ["core_attn"]) else modules


def _titan_loss(row: dict[str, str]) -> str:
    """torchtitan's loss kernel: compiled where the run compiles and its torchtitan compiles the
    loss (2025 on: ``compile.components`` ["model", "loss"], torchtitan 0.3.0 config/configs.py),
    else the eager upcast (the Dec 2024 runs, torchtitan 9dec370, compiled the blocks only)."""
    compiled = "compile" in (row["precision"] + row["notes"]).lower()
    return "compiled" if compiled and "2024" not in row["framework_version"] else "upcast"


def _zero(row: dict[str, str]) -> int:
    text = row["zero_or_fsdp"].lower()
    if "fsdp" in text:
        return 3
    if "distributed optimizer" in text:
        return 1
    return 0


def _row_case(row: dict[str, str]) -> MemoryCase | MemorySkipped:
    rid, defaults = row["id"], []
    if "pure bf16" in row["precision"].lower():
        return MemorySkipped(
            rid, "pure bf16 AdamW state (2 B per state; paraplan models fp32 master + moments)"
        )
    hardware = next(((p, c) for key, p, c in _HARDWARE if key in row["gpu"]), None)
    if hardware is None:
        return MemorySkipped(rid, f"gpu {row['gpu']!r} not in the catalog")
    model = _model(row, defaults)
    if isinstance(model, str):
        return MemorySkipped(rid, model)
    tp, pp, cp, ep = (_int(row[k]) or 1 for k in ("tp", "pp", "cp", "ep"))
    n = int(row["num_gpus"])
    dp = _int(row["dp"]) or n // (tp * pp * cp)
    vp = _int(row["vp"]) or 1
    mb = _int(row["micro_batch"])
    if mb is None:
        mb = 1
        defaults.append("micro_batch=1 (torchtitan's default pipeline micro-batch)")
    gbs = _int(row["global_batch"])
    if gbs is None:
        local = re.search(r"local batch (\d+) per DP rank", row["notes"])
        if local is None:
            return MemorySkipped(rid, "global batch not stated")
        gbs = int(local.group(1)) * dp
        defaults.append(f"global_batch={gbs} (local batch {local.group(1)} x dp)")
    sp_text = row["sequence_parallel"].lower()
    sp = sp_text.startswith("yes") if sp_text and not sp_text.startswith("n/a") else tp > 1
    if not sp_text and tp > 1:
        defaults.append("sequence_parallel=on")
    bridge = source_of(rid) == "megatron-bridge"
    titan = source_of(rid) == "torchtitan"
    allocator = "expandable_segments" if "expandable_segments" in row["notes"].lower() else "default"
    job: dict[str, Any] = {
        "seq_len": int(row["seq_len"]),
        "global_batch": gbs,
        "precision": _precision(row["precision"]),
        "fp32_grads": not bridge,
        "allocator": allocator,
        **({"cross_entropy": _titan_loss(row), "selective_policy": "torchtitan_op"} if titan else {}),
        **({"recompute_modules": modules} if (modules := _modules(row)) else {}),
        # where the router's probabilities are applied: Megatron-Core's rows (SimuMax's Megatron-LM,
        # Megatron-Bridge) in the experts' activation; torchtitan's at the combine (auto: combine)
        **({"moe_probs_applied": "activation"} if source_of(rid) in _MEGATRON_SOURCES else {}),
    }
    if "sft" in row["model"].lower() and "packed to" not in row["notes"].lower():
        job["variable_seq_len"] = True
        defaults.append("variable_seq_len (fine-tuning batches, not packed to a fixed length)")
    if re.search(
        r"chunked (ce|cross.entropy)|chunkedlosswrapper|cewithchunkedoutputloss", row["notes"].lower()
    ):
        job["loss_chunks"] = LOSS_CHUNKS
        defaults.append(f"loss_chunks={LOSS_CHUNKS} (the chunked loss's default chunk count)")
    if bridge and any(row["model"].startswith(m) for m in _BF16_MOMENTS):
        job["optimizer_moments"] = "bf16"
        defaults.append("optimizer_moments=bf16 (the recipe's precision-aware optimizer)")
    plan: dict[str, Any] = {
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "vp": vp,
        "micro_batch": mb,
        "zero": _zero(row),
        "sequence_parallel": sp,
        "recompute": _recompute(row, defaults),
    }
    if row["experts"]:
        state_row = {
            "notes": row["notes"] + "; " + row["precision"],
            "source_key": "megatron_bridge_perf" if bridge else rid,
            "model": row["model"],
            "hardware": row["gpu"],
        }
        moe_plan, moe_job, moe_defaults = moe_state(state_row)
        if "cuda graphs" in row["precision"].lower():
            moe_plan["cuda_graphs"] = "partial"
            moe_defaults = [d for d in moe_defaults if not d.startswith("cuda_graphs")]
        if "pad-to-capacity" in row["notes"].lower():
            moe_job["moe_routing"] = {"capacity_factor": 1.0}
        plan |= moe_plan
        job |= moe_job
        defaults += moe_defaults
        if ep > dp * cp:
            plan["etp"] = 1
            defaults.append("etp=1 (EP folded over tp)")
    measured = float(row["measured_peak_gib"]) if row["measured_peak_gib"].strip() else None
    if measured is not None and not 0 < measured < 1e6:
        return MemorySkipped(rid, f"malformed row: measured_peak_gib {measured!r} (GiB above 0)")
    oom = row["oom"].strip().lower() == "yes"
    statistic = row["measured_what"] if measured is not None and not oom else "unstated"
    preset_name, capacity = hardware
    second = re.search(r"real reserved ([\d.]+) GiB", row["notes"]) if statistic == "allocated" else None
    return MemoryCase(
        rid,
        source_of(rid),
        {"model": model, "cluster": {"preset": preset_name, "gpus": n}, "job": job, "plan": plan},
        statistic,
        measured,
        oom,
        capacity,
        tuple(defaults),
        float(second.group(1)) if second else None,
    )


REQUIRED_COLUMNS = (
    "id",
    "model",
    "n_layers",
    "hidden",
    "ffn_hidden",
    "n_heads",
    "n_kv_heads",
    "vocab",
    "experts",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vp",
    "zero_or_fsdp",
    "sequence_parallel",
    "recompute",
    "micro_batch",
    "seq_len",
    "global_batch",
    "precision",
    "measured_peak_gib",
    "measured_what",
    "oom",
)
"""The columns the mapping reads (``framework_version`` and ``notes`` are read where present)."""
_STATISTICS = ("allocated", "reserved", "unstated")


def _safe_case(row: dict[str | None, str | list[str] | None], line: int) -> MemoryCase | MemorySkipped:
    """``_row_case`` of one CSV row, or the reason it cannot be mapped: a row that lacks a column
    the mapping needs, has a number where text is expected (or the reverse) or an unknown
    statistic is skipped with the reason, never raised."""
    rid = str(row.get("id") or "").strip() or f"line {line}"
    if None in row:  # more fields than the header names
        return MemorySkipped(rid, "malformed row: more fields than the header")
    text = {str(k): (v if isinstance(v, str) else "") for k, v in row.items()}
    missing = [c for c in REQUIRED_COLUMNS if not text.get(c, "").strip() and c in _NEEDED]
    if missing:
        return MemorySkipped(rid, f"malformed row: no {', '.join(missing)}")
    what = text["measured_what"].strip().lower() or "unstated"
    if what not in _STATISTICS:
        return MemorySkipped(rid, f"malformed row: measured_what {what!r} (allocated | reserved | unstated)")
    oom = text["oom"].strip().lower()
    if oom not in ("yes", "no", ""):
        return MemorySkipped(rid, f"malformed row: oom {oom!r} (yes | no)")
    text = {**text, "id": rid, "measured_what": what}
    text.setdefault("notes", "")
    text.setdefault("framework_version", "")
    try:
        return _row_case(text)
    except (ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError) as e:
        return MemorySkipped(rid, f"malformed row: {type(e).__name__} {str(e)[:60]}")


_NEEDED = ("id", "model", "n_layers", "gpu", "num_gpus", "seq_len")
"""Columns a row must fill (the rest may be empty: defaults or a skip with the reason)."""


def load_memory_cases(path: Path | str = MEMORY_CSV_PATH) -> tuple[list[MemoryCase], list[MemorySkipped]]:
    """Every row of a file with the memory file's columns, mapped by the rules above; a row that
    cannot be mapped is skipped with the reason (``MemorySkipped``), never raised. A file without
    the columns is a ConfigError naming those it lacks."""
    cases: list[MemoryCase] = []
    skipped: list[MemorySkipped] = []
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        absent = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if absent:
            raise ConfigError(
                f"{path}: no column {', '.join(absent)}; a measured-memory file has the columns of "
                f"{MEMORY_CSV_PATH.name} (benchmarks/memory_set.py)"
            )
        for line, row in enumerate(reader, start=2):
            c = _safe_case(row, line)  # type: ignore[arg-type]
            (cases if isinstance(c, MemoryCase) else skipped).append(c)
    return cases, skipped
