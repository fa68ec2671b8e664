"""The calibration set as paraplan scenarios: each published run mapped to model, cluster, job, plan.

Knobs a source does not give take documented defaults, listed in ``Case.defaults`` per row:
- micro_batch 1, vp 1 (Megatron-LM / NeMo defaults);
- ZeRO: 1 (distributed optimizer) for NeMo and Megatron-Bridge, whose recipes enable it;
- sequence parallel: on whenever tp > 1 (NeMo / Megatron-Bridge recipes);
- recompute: the fastest of none / selective / full that fits memory, and full recompute of the
  fewest layers per chunk that fits (benchmarks/fidelity.py ``evaluate_case``; what a tuner
  would pick);
- flash attention off and dropout on for runs before 2022-06 (Megatron-LM 2021, Korthikanti 2022,
  BLOOM: GPT-3-style training with dropout 0.1); fused attention and no dropout after;
- attention kernel (``attention_kernel``, ``_attention_kernel``): FlashAttention-1 (``flash1``) for
  MosaicML llm-foundry (2023: flash-attn 1.x or its Triton port), FlashAttention-2 (``flash2``) for
  NeMo containers before 24.09 (Transformer Engine then picked flash-attn over its cuDNN fused
  attention on Hopper), the fused cuDNN / Transformer Engine kernel (the default) elsewhere; it
  only matters on Hopper and newer (cost/compute.py FLASH2_FRACTION, FLASH1_FRACTION);
- gradient sync overlapped with backward, except Megatron-LM before 2023 (no --overlap-grad-reduce)
  and the DeepSpeed ZeRO-3 baselines of Narayanan et al. 2021 Table 2 (overlap_comm off by default);
- NVL72 racks: up to 72 GPUs one rack; larger jobs use racks as 64-GPU NVLink domains
  (gb200-nvl72-64 / gb300-nvl72-64: NVIDIA's 128/256/512-GPU recipes are power-of-two);
- bf16 gradient reduction for NeMo / Megatron-Bridge performance recipes (grad_reduce_in_fp32
  off), fp32 main grads elsewhere.
- mixture-of-experts rows: the shape from the row (``ffn_hidden`` "expert N" is the expert width,
  ``moe_experts`` / ``moe_topk``), the rest of the architecture from the model's preset where the
  row lacks it (shared experts, dense layers, MLA; the sliding-window pattern, attention sinks and
  linear biases, gpt-oss's, since 2026-12-02); expert_imbalance 1.0 where the source forced
  balanced routing ("tokens force-balanced across experts"), else the documented default.
- step time: ``step_time_s``; where a row gives only ``tokens_per_sec_per_gpu`` (torchtitan on
  A100), the file's own convention gbs * seq_len / (tokens/s/GPU * n_gpus) (published_runs.md Sec. 4);
  where it gives only TFLOP/s per GPU, FLOPs per step / (TFLOP/s x GPUs) under the row's documented
  count (``_flops_per_step``): rows whose ``flop_counting`` names Megatron-LM's
  ``num_floating_point_operations`` or Megatron-Bridge's ``flop_utils`` use that count
  (cost/megatron_flops.py) of the row's mapped model, vocabulary padded to 128 x tp;
- model names: a "(tokendrop)" suffix is dropped for the preset look-up and such MoE runs (capacity
  factor, dropped tokens) take expert_imbalance 1.0 like force-balanced ones; MLA rows (``n_kv_heads``
  "MLA") and rows with a dense-layer note in ``ffn_hidden`` ("18432 (first 3 dense layers); expert
  2048") take the expert width after "expert" and the rest from the preset, as other MoE rows;
- pipeline layout: notes "first/last PP stage have one fewer layer" -> that split (Llama 3 405B:
  7 + 14 x 8 + 7); vp "interleaved (degree not stated)" -> the largest the split allows;
- ZeRO: "ZeRO-3" -> 3, "ZeRO-2" (FSDP SHARD_GRAD_OP, Llama 3's "ZeRO-2-like") -> 2, other FSDP
  -> 3; LoRA rows take ``frozen_base`` (frozen base weights: no weight-gradient GEMMs, gradients,
  optimizer state or gradient sync for them; the adapters neglected), SFT rows map as pre-training;
- precision: NVFP4 -> nvfp4, MXFP8 / "FP8-MX" -> mxfp8 (both mapped to fp8 before 2026-11-30,
  when paraplan had one FP8 format), blockwise -> fp8_blockwise, any other FP8 (FP8-CS, "FP8",
  "FP8 (recipe not named on page)") -> fp8, "fp16" -> fp16, else bf16.
- expert parallelism wider than dp*cp: Megatron's MoE parallel folding, etp = 1 where the world
  rule world % (etp*ep*pp) == 0 allows no other expert TP (cost/ep.py); ep*pp > n is skipped;
- hybrid rows published by name only: the preset of ``_HYBRID_PRESETS`` (Nemotron 3 Nano), whose
  total must be within 10% of the row's ``total_params_B``;
Rows whose hardware or architecture paraplan does not model yet (TPU, the H100 96GB HBM2e part,
hybrid Mamba models without published dimensions: Nemotron 3 Super, Nemotron 3.5 Lightning's
repeated MTP layer; MoE models without a preset), or that give no
step time, are skipped with the reason; ``benchmarks.fidelity`` counts each reason.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.cost.megatron_flops import FlopCounting, megatron_flops_per_step, padded_vocab_size
from paraplan.graph import ModelSpec, build_graph, preset
from paraplan.graph.presets import MOE_MLA_FIELDS, from_fields, to_fields

from benchmarks.calibration_set_tpu import is_tpu_row, tpu_row_case
from benchmarks.moe_state import moe_state

__all__ = ["Case", "Skipped", "load_cases", "megatron_counting", "row_kind", "CSV_PATH"]

CSV_PATH = Path(__file__).parent / "data" / "published_runs_calibration.csv"

_HARDWARE = (
    ("A100 40GB", "dgx-a100-40gb"),
    ("A100 80GB", "dgx-a100-80gb"),
    ("H100 80GB", "dgx-h100"),
    ("B200 (DGX-B200)", "dgx-b200"),
    ("B300 (DGX-B300)", "dgx-b300"),
    ("GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
)
_PRE_FLASH_SOURCES = {"narayanan2021_t1", "korthikanti2022_t5", "korthikanti2022_dp8", "bloom176b"}
_NO_OVERLAP_SOURCES = {
    "narayanan2021_t1",
    "narayanan2021_t2",
    "korthikanti2022_t5",
    "korthikanti2022_dp8",
    "bloom176b",
}
# MosaicML llm-foundry ran FlashAttention-1 when its tables were measured (2023): read in llm-foundry
# 0.2.0-0.4.0 (PyPI sdists): the ``gpu`` extra pins flash-attn 1.0.3.post0 / 1.0.9, attn_impl
# "flash" calls flash-attn 1's ``flash_attn_unpadded_func``, the MPT default attn_impl is "triton"
# (the Triton port of FlashAttention-1); FlashAttention-2 came only as the opt-in ``gpu-flash2``
# extra (flash-attn 2.3.2) in 0.4.0
_FLASH1_SOURCES = {"mosaic_llmfoundry"}
# NeMo containers before 24.09 ran FlashAttention-2 on Hopper: Transformer Engine's backend choice
# prefers FlashAttention (flash-attn, shipped in the NeMo containers) over its cuDNN FusedAttention
# unless told otherwise; the rule that gives FusedAttention preference on Hopper ("Disabling
# FlashAttention to give FusedAttention preference on Hopper+ for performance reasons") is in
# TE 1.9.0's pytorch/attention.py (read; TE 1.9 is the first release on PyPI, August 2024). That the
# TE of NeMo 24.03 / 24.07 (TE 1.4-1.8) lacked it is cited from memory.
_FLASH2_BEFORE_NEMO = (24, 9)


def _attention_kernel(row: dict[str, str]) -> str | None:
    """The row's ``job.attention_kernel`` where it is not the fused default (the rules above)."""
    if row["source_key"] in _FLASH1_SOURCES:
        return "flash1"
    m = re.match(r"NeMo (\d+)\.(\d+)", row["framework"])
    if m and (int(m.group(1)), int(m.group(2))) < _FLASH2_BEFORE_NEMO:
        return "flash2"
    return None


_DIST_OPTIMIZER_SOURCES = {
    "nemo_2407",
    "megatron_bridge_perf",
    "mbridge_skill_qwen3_30b_h100",  # a Megatron-Bridge recipe
    "mcore_modelzoo_qwen3",  # Megatron-MoE-ModelZoo scripts: --use-distributed-optimizer
    "mcore_dsv3_gb200_guide",  # the guide's reproduce scripts: --use-distributed-optimizer
}
_GPT3_VOCAB = 51200  # NeMo GPT-3 rows match V = 51200 (published_runs.md Sec. 3.4)
_MOE_PRESETS = {
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "DeepSeek-V3": "deepseek-v3",
    "Mixtral 8x7B": "mixtral-8x7b",
    "Mixtral 8x22B": "mixtral-8x22b",
    "gpt-oss-120b": "gpt-oss-120b",
    "Qwen3 MoE 30B": "qwen3-30b-a3b",
    "GPT-OSS 120B": "gpt-oss-120b",
}
_TOKENDROP = " (tokendrop)"
# "name only" hybrid rows (Megatron-Bridge perf summaries give no layer details): the architecture
# is the preset's, which must agree with the row's published total parameters within 10%
_HYBRID_PRESETS = {"Nemotron 3 Nano": "nemotron3-nano-30b-a3b"}
_SHAPE_COLUMNS = {
    "n_layers": "layers",
    "hidden": "hidden",
    "n_heads": "heads",
    "n_kv_heads": "kv_heads",
    "vocab_size": "vocab",
}  # calibration-file column -> scenario model field
_HYBRID_UNMODELLED = {
    # Megatron-Bridge 0.6.2 builds it from the HF config.json at run time
    # (recipes/nemotronh/h100/nemotron_3_super.py: AutoBridge.from_hf_pretrained), which no source
    # the project has gives (docs/data/models.json: status partial; expert count, top-k, widths,
    # heads and layer pattern unconfirmed); it also uses LatentMoE and 2 repeated MTP layers
    "Nemotron 3 Super": "hybrid model without published dimensions (Nemotron 3 Super: LatentMoE "
    "sizes and layer pattern not in any source the project has)",
    # Megatron-Bridge 0.6.2 perf_recipes/nemotronh/*/nemotronh.py: the Nano recipe plus 2 MTP
    # applications of one repeated "*E" (attention + MoE) layer; paraplan's MTP module is the
    # model's last block with its own weights per module
    "Nemotron 3.5 Lightning": "hybrid model with a repeated multi-token-prediction layer of its "
    "own pattern ('*E', mtp_use_repeated_layer) that paraplan's MTP does not express",
}
# MoE models without a paraplan preset, from their published configs: Kimi K2 = the "Model
# Summary" table of github.com/MoonshotAI/Kimi-K2 (README @c6157be), Megatron-Bridge's
# KimiK2Provider (@dc805f5) and MaxText's kimi-k2-1t.yml (@e591f30; vocab 163840): DeepSeek-V3's
# MLA layout with 64 heads, 384 routed experts of width 2048 plus one shared, top-8, the first
# layer dense (FFN 18432).
_MOE_CONFIGS: dict[str, dict[str, Any]] = {
    "Kimi K2": {
        "layers": 61,
        "hidden": 7168,
        "ffn_hidden": 18432,
        "heads": 64,
        "kv_heads": 64,
        "vocab": 163840,
        "experts": 384,
        "top_k": 8,
        "shared_experts": 1,
        "moe_ffn_hidden": 2048,
        "first_dense_layers": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "activation": "swiglu",
        "norm": "rmsnorm",
    },
}


@dataclass(frozen=True)
class Case:
    row_id: int
    source_key: str
    label: str
    scenario: dict[str, Any]
    published_step_s: float
    recompute_given: bool
    defaults: tuple[str, ...] = field(default=())
    source: str = ""  # the publication (the CSV's ``source`` column up to a comma/parenthesis)
    recompute_options: tuple[str, ...] = ("none", "selective", "full")  # when not given


@dataclass(frozen=True)
class Skipped:
    row_id: int
    label: str
    reason: str


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def _step_time_s(row: dict[str, str], spec: ModelSpec | None = None) -> float | None:
    """Published step time, else gbs * seq_len / (tokens/s/GPU * n) (published_runs.md Sec. 4),
    else model FLOPs per step / (TFLOP/s/GPU * n) where the row's FLOP convention is a documented
    formula (``_flops_per_step``; for Megatron's own counts, of the row's model ``spec``)."""
    if row["step_time_s"]:
        return float(row["step_time_s"])
    if row["tokens_per_sec_per_gpu"] and row["global_batch_seqs"]:
        return (
            int(row["global_batch_seqs"])
            * int(row["seq_len"])
            / (float(row["tokens_per_sec_per_gpu"]) * int(row["n_gpus"]))
        )
    flops = _flops_per_step(row, spec)
    if flops is not None and row["tflops_per_gpu"]:
        return flops / (float(row["tflops_per_gpu"]) * 1e12 * int(row["n_gpus"]))
    return None


def megatron_counting(row: dict[str, str]) -> FlopCounting | None:
    """Whose FLOP count a row's TFLOP/s are under, read from its ``flop_counting`` column:
    "Megatron-LM training.py num_floating_point_operations ..." (``mcore_modelzoo_qwen3``,
    ``mcore_dsv3_gb200_guide``) -> Megatron-LM's; "Megatron-Bridge ... flop_utils ..."
    (``megatron_bridge_perf``, ``mbridge_skill_qwen3_30b_h100``) -> Megatron-Bridge's
    (docs/published_runs.md Sec. 3.5; cost/megatron_flops.py); else None."""
    text = row["flop_counting"].lower()
    if "megatron-lm" in text and "num_floating_point_operations" in text:
        return FlopCounting.MEGATRON_LM
    if "megatron-bridge" in text and "flop_utils" in text:
        return FlopCounting.MEGATRON_BRIDGE
    return None


def _megatron_flops(row: dict[str, str], spec: ModelSpec, counting: FlopCounting) -> float:
    """Megatron's count of one step of the row's model (cost/megatron_flops.py), its logits over
    the vocabulary padded as Megatron pads it at the row's tp (128 x tp, the default)."""
    return megatron_flops_per_step(
        spec,
        seq_len=int(row["seq_len"]),
        global_batch=int(row["global_batch_seqs"]),
        padded_vocab=padded_vocab_size(spec.vocab, _int(row["tp"]) or 1),
        counting=counting,
    )


def _flops_per_step(row: dict[str, str], spec: ModelSpec | None = None) -> float | None:
    """Model FLOPs of one step under the row's convention (published_runs.md Sec. 3), or None:
    - Megatron-LM's ``num_floating_point_operations`` / Megatron-Bridge's ``flop_utils``
      (``megatron_counting``): cost/megatron_flops.py on the row's model ``spec`` (None without);
    - Megatron "model FLOPs" (Korthikanti 2022, Sec. 3.2): 72 B s l h^2 (1 + s/(6h) + V/(12 l h));
    - NeMo model TFLOP/s (``nemo_longseq``): no recompute, non-causal attention, as NeMo 24.07
      (Sec. 3.4): B s (6 N_matmul + 12 l h s), N_matmul = l (2 h^2 + 2 h kv_dim + 3 h f) + V h
      (SwiGLU, GQA). The source marks this convention "likely, not verified" for these
      containers; the rows' ``confidence`` column says so;
    - Llama 3 "BF16 MFU" (``llama3_t4``), PaLM-style (Sec. 3.3): B s (6 N + 6 l h s), N the row's
      total parameters; the paper gives no formula, and 6 N alone or with 12 l h s differ by 4%."""
    counting = megatron_counting(row)
    if counting is not None:
        return _megatron_flops(row, spec, counting) if spec is not None and row["global_batch_seqs"] else None
    convention = row["flop_counting"].lower()
    b, s_len = _int(row["global_batch_seqs"]), _int(row["seq_len"])
    h, layers, vocab = _int(row["hidden"]), _int(row["n_layers"]), _int(row["vocab_size"])
    if None in (b, s_len, h, layers, vocab):
        return None
    if row["source_key"].startswith("korthikanti2022") and convention.startswith("model flops"):
        return 72 * b * s_len * layers * h**2 * (1 + s_len / (6 * h) + vocab / (12 * layers * h))
    if row["source_key"] == "llama3_t4" and row["total_params_B"]:
        # Llama 3's "BF16 MFU" is PaLM-style (published_runs.md Sec. 3.3): 6 N + 6 l h s per token
        return b * s_len * (6 * float(row["total_params_B"]) * 1e9 + 6 * layers * h * s_len)
    if row["source_key"] == "nemo_longseq" and "swiglu" in row["model_type"].lower():
        f, heads, kv = _int(row["ffn_hidden"]), _int(row["n_heads"]), _int(row["n_kv_heads"])
        if None in (f, heads, kv):
            return None
        kv_dim = kv * h // heads
        n_matmul = layers * (2 * h * h + 2 * h * kv_dim + 3 * h * f) + vocab * h
        return b * s_len * (6 * n_matmul + 12 * layers * h * s_len)
    return None


def _precision(text: str) -> str:
    """Job precision of a row: NVFP4 -> nvfp4; MXFP8 / "FP8-MX" -> mxfp8; blockwise -> fp8_blockwise;
    any other FP8 (FP8-CS, "FP8", recipe not named, torchao float8) -> fp8; fp16 -> fp16; else bf16."""
    t = text.lower()
    if "nvfp4" in t:
        return "nvfp4"
    if "mxfp8" in t or "fp8-mx" in t:
        return "mxfp8"
    if "fp8" in t and "block" in t:
        return "fp8_blockwise"
    if "fp8" in t:
        return "fp8"
    return "fp16" if "fp16" in t else "bf16"


def _publication(source: str) -> str:
    """The publication of a row's ``source`` text: the part before the first comma or parenthesis
    ("Korthikanti et al. 2022, Reducing ..." and "Korthikanti et al. 2022" are one source)."""
    return re.split(r"[,(]", source, maxsplit=1)[0].strip()


def _activation(model_type: str) -> str:
    t = model_type.lower()
    if "swiglu" in t:
        return "swiglu"
    if "squared-relu" in t:
        return "relu2"
    if "relu" in t:
        return "relu"
    return "gelu"


def _moe_fields(row: dict[str, str]) -> dict[str, Any]:
    """Scenario model fields of a MoE row: experts, top_k and the expert width ("expert 768")
    from the row; head_dim, activation, norm, shared experts, dense layers, MLA, the sliding-window
    pattern, attention sinks and linear biases from the
    model's preset (the row's ``arch_source`` config), which must agree on the row's shape."""
    if not row["moe_experts"]:
        return {}
    width = re.search(r"expert\s+(\d+)", row["ffn_hidden"] or "")
    spec = _moe_spec(row["model"].removesuffix(_TOKENDROP))
    if not width or not row["moe_topk"] or spec is None:
        return {}
    if (spec.num_layers, spec.hidden, spec.num_experts) != (
        int(row["n_layers"]),
        int(row["hidden"]),
        _int(row["moe_experts"]),
    ):
        return {}
    out: dict[str, Any] = {
        "experts": spec.num_experts,
        "top_k": int(row["moe_topk"]),
        "moe_ffn_hidden": int(width.group(1)),
        "head_dim": spec.head_dim,
        "activation": spec.activation.value,
        "norm": spec.norm,
    }
    if spec.linear_bias:
        out["linear_bias"] = True
    if spec.sliding_window:
        out |= {"sliding_window": spec.sliding_window, "full_attention_every": spec.full_attention_every}
    if spec.attention_sinks:
        out["attention_sinks"] = True
    if spec.num_shared_experts:
        out |= {"shared_experts": spec.num_shared_experts, "shared_ffn_hidden": spec.shared_ffn_hidden}
    if spec.first_dense_layers:
        out |= {"first_dense_layers": spec.first_dense_layers, "ffn_hidden": spec.ffn_hidden}
    for key, field_name in MOE_MLA_FIELDS.items():
        value = getattr(spec, field_name)
        if key.startswith(("q_", "kv_", "qk_", "v_")) and value:
            out[key] = value
    return out


def _hybrid_fields(row: dict[str, str]) -> dict[str, Any]:
    """Scenario model fields of a "name only" hybrid row (no layer details published): the whole
    preset of ``_HYBRID_PRESETS``, when its total parameters are within 10% of the row's
    ``total_params_B`` (a rounded figure: Nemotron 3 Nano "30" for 31.6B); else {}."""
    name = _HYBRID_PRESETS.get(row["model"])
    if name is None or row["n_layers"]:
        return {}
    spec = preset(name)
    total_b = float(row["total_params_B"] or 0)
    if abs(build_graph(spec).num_params / 1e9 - total_b) > 0.1 * total_b:
        return {}
    return {k: v for k, v in to_fields(spec).items() if k != "name"}


def _moe_spec(model: str) -> ModelSpec | None:
    """The architecture of a MoE row's model: its preset, else its published config (_MOE_CONFIGS)."""
    if model in _MOE_PRESETS:
        return preset(_MOE_PRESETS[model])
    if model in _MOE_CONFIGS:
        return from_fields(model, _MOE_CONFIGS[model])
    return None


def _short_end_stages(row: dict[str, str], pp: int) -> list[int] | None:
    """Layers per pipeline stage where the notes say the first and last stages hold one layer
    fewer (Llama 3 405B, Llama Team 2024 Sec. 3.3.2: 126 layers on pp 16 = 7 + 14 x 8 + 7), else
    None (the even split)."""
    layers = _int(row["n_layers"])
    if layers is None or pp < 3 or "first/last pp stage have one fewer layer" not in row["notes"].lower():
        return None
    per = (layers + 2) // pp
    return [per - 1] + [per] * (pp - 2) + [per - 1] if per * pp - 2 == layers else None


def _zero(row: dict[str, str], defaults: list[str]) -> int:
    text = row["zero_fsdp"].lower()
    if "zero-2" in text:
        return 2  # FSDP SHARD_GRAD_OP "(ZeRO-2)"; Llama 3's FSDP without resharding ("ZeRO-2-like")
    if ("fsdp" in text and "fsdp=0" not in text) or text == "zero-3":
        return 3
    if "zero-1" in text:
        return 1
    if row["source_key"] in _DIST_OPTIMIZER_SOURCES:
        if not text:
            defaults.append("zero=1 (distributed optimizer)")
        return 1
    return 0


_MODEL_PARALLEL = re.compile(r"model-parallel size M=t\*p=(\d+)")
NODE_TP = 8  # Narayanan et al. 2021 Table 1: t = 8 (one DGX A100 node) for every model >= 18B


def _table2_split(row: dict[str, str]) -> tuple[int, int] | None:
    """Narayanan et al. 2021 Table 2 rows give only the model-parallel size M = t * p (notes);
    the paper's Table 1 runs every model from 18.4B up at t = 8, the GPUs of one node (its Sec.
    3.3: tensor parallelism inside a node, pipeline across nodes), so t = 8 and p = M / 8."""
    m = _MODEL_PARALLEL.search(row["notes"])
    if row["source_key"] != "narayanan2021_t2" or row["tp"] or m is None:
        return None
    size = int(m.group(1))
    return (NODE_TP, size // NODE_TP) if size % NODE_TP == 0 else None


def _gpt_mha_defaults(row: dict[str, str]) -> dict[str, str]:
    """GPT-3-family rows ("GPT ..." models typed "dense (GeLU, MHA)") that leave ffn_hidden and
    n_kv_heads empty take the GPT-3 block: ffn = 4h (Brown et al. 2020, arXiv:2005.14165 Sec.
    2.1, d_ff = 4 d_model) and one K/V head per head (MHA, as the row's model_type says)."""
    if not row["model"].startswith("GPT") or "mha" not in row["model_type"].lower():
        return row
    if row["ffn_hidden"] and row["n_kv_heads"]:
        return row
    return {
        **row,
        "ffn_hidden": row["ffn_hidden"] or str(4 * int(row["hidden"])),
        "n_kv_heads": row["n_kv_heads"] or row["n_heads"],
    }


def _recompute(text: str) -> str | None:
    t = text.lower()
    for mode in ("full", "selective", "none"):
        if t.startswith(mode) or (mode == "full" and "remat_policy=full" in t):
            return mode
    return None


# the words rows use for Megatron's --recompute-modules (cost/recompute_modules.py), longest first
_MODULE_WORDS = (
    ("mla up_proj", "mla_up_proj"),
    ("up_proj", "mla_up_proj"),
    ("shared_expert", "shared_experts"),
    ("moe_act", "moe_act"),
    ("layernorm", "layernorm"),
    ("norm", "layernorm"),
    ("act", "moe_act"),
    ("mlp", "mlp"),
    ("moe", "moe"),
)


def recompute_modules(row: dict[str, str]) -> list[str]:
    """Megatron ``--recompute-modules`` of a selective-recompute row: the list in its recompute
    column ("selective (layernorm, moe)", "selective (mlp + moe_act)", "selective (norm, act)"),
    or, where the column is empty, a note "recompute selective moe_act + layernorm"; [] when
    none is named (the default selective policy). "attention core" is Megatron's default."""
    text = row["recompute"].lower()
    found = re.search(r"selective \(([^)]*)\)", text)
    if not found and not text:
        found = re.search(r"recompute selective ([a-z_]+(?: \+ [a-z_]+)*)", row["notes"].lower())
    if not found:
        return []
    modules: list[str] = []
    for part in re.split(r",|\+", found.group(1)):
        word = part.strip()
        name = next((m for w, m in _MODULE_WORDS if w in word), None)
        if name is None:
            return []  # not Megatron's modules (torchtitan "op", "layer"): the default policy
        if name not in modules:
            modules.append(name)
    return modules


def offload_modules(row: dict[str, str]) -> list[str]:
    """Megatron ``--offload-modules`` of a row whose notes state fine-grained activation
    offloading ("fine-grained activation offloading of expert_fc1 + moe_act", row 2058, the
    ModelZoo's Qwen3 MXFP8 recipe; cost/offload.py); [] otherwise ("activation CPU offload=False"
    and other wordings name no module)."""
    found = re.search(
        r"fine-grained activation offloading of ([a-z_0-9]+(?: \+ [a-z_0-9]+)*)", row["notes"].lower()
    )
    return [m.strip() for m in found.group(1).split("+")] if found else []


def _row_case(row: dict[str, str]) -> Case | Skipped:
    rid, label = int(row["row_id"]), f"{row['source_key']}:{row['model']}"
    if is_tpu_row(row):  # MaxText on TPU slices: benchmarks/calibration_set_tpu.py
        return tpu_row_case(row, Case, Skipped, _publication(row["source"]))
    hardware = next((p for key, p in _HARDWARE if key in row["hardware"]), None)
    if "known" in row["notes"].lower() and "regression" in row["notes"].lower():
        # the source footnotes a known software regression in this very run (Megatron-Bridge
        # 26.06.01 gpt-oss-120b, rows 103-104: cudnn-frontend #256, a 10x slower grouped dGLU
        # kernel on GB200, "fixed in next container"): data to exclude, not physics to fit
        # (docs/moe_physics.md Sec. 3.4)
        return Skipped(rid, label, "the source footnotes a known software regression in this run")
    if "96GB HBM2e" in row["hardware"]:
        # torchtitan's Dec 2024 H100s (rows 384, 390-394): a 500 W, 96 GB HBM2e part. No source
        # the project cites gives its peak, clocks or HBM bandwidth (hardware.json lists the
        # 80 GB 700 W Grand Teton node only, S38-S39), so no catalog entry is invented for it
        return Skipped(rid, label, "hardware 'H100 96GB HBM2e 500 W' has no sourced figures")
    if hardware is None:
        return Skipped(rid, label, f"hardware {row['hardware']!r} not in the catalog")
    if hardware.endswith("-nvl72") and int(row["n_gpus"]) > 72:
        hardware += "-64"  # racks used as 64-GPU NVLink domains (16 of 18 trays), e.g. 256 GPUs
    step_s = _step_time_s(row)
    # TFLOP/s under Megatron's own count: the step time follows from the mapped model (below)
    by_megatron_count = step_s is None and bool(row["tflops_per_gpu"]) and megatron_counting(row) is not None
    if step_s is None and not by_megatron_count:
        return Skipped(
            rid, label, "no step time or tokens/s published (TFLOP/s under no documented FLOP convention)"
        )
    if not row["global_batch_seqs"]:
        return Skipped(rid, label, "global batch not published")
    if row["model"] in _HYBRID_UNMODELLED:
        return Skipped(rid, label, _HYBRID_UNMODELLED[row["model"]])
    hybrid = _hybrid_fields(row)
    if row["model"] in _HYBRID_PRESETS and not hybrid:
        return Skipped(rid, label, "hybrid preset disagrees with the row's published total parameters")
    if hybrid:  # the row's empty shape columns from the preset
        row = {**row, **{col: str(hybrid[key]) for col, key in _SHAPE_COLUMNS.items()}}
    moe = _moe_fields(row) or hybrid
    if row["moe_experts"] and not moe:
        return Skipped(rid, label, "MoE model without a matching preset")
    if moe and not row["ep"] and "deepep" in row["notes"].lower():
        # DeepEP is an expert-parallel all-to-all library: the run used ep > 1, degree unstated
        return Skipped(rid, label, "MoE run with expert parallelism of unpublished degree")
    row = _gpt_mha_defaults(row)
    if (not row["ffn_hidden"] and not moe) or not row["n_kv_heads"]:
        return Skipped(rid, label, "architecture incomplete")
    kv_heads = _int(row["n_kv_heads"]) or _moe_spec(row["model"].removesuffix(_TOKENDROP)).num_kv_heads
    # "MLA": the preset's
    defaults: list[str] = []
    tp, pp, cp = _int(row["tp"]) or 1, _int(row["pp"]) or 1, _int(row["cp"]) or 1
    n = int(row["n_gpus"])
    split = _table2_split(row)
    if split is not None:
        tp, pp = split
        defaults.append(f"tp={tp} x pp={pp} (model-parallel size M split as Table 1)")
    dp = _int(row["dp"]) or n // (tp * pp * cp)
    if row["dp"] and dp * tp * pp * cp != n and not row["step_time_s"]:
        # the published degrees contradict the GPU count (NeMo long-sequence B200 rows 71-72:
        # tp4 x cp4 x dp4 on "256" GPUs; dp = n/(tp*cp) would exceed row 72's global batch of 8):
        # the degrees are the configuration, and a per-GPU throughput is the same on any number
        # of its replicas, so the run maps to dp*tp*pp*cp GPUs, its step time from that count
        n = dp * tp * pp * cp
        step_s = None if by_megatron_count else _step_time_s({**row, "n_gpus": str(n)})
        defaults.append(f"gpus={n} (= dp*tp*pp*cp; the row's n_gpus={row['n_gpus']} contradicts its degrees)")
    layers_per_stage = _short_end_stages(row, pp)
    vp = _int(row["vp"])
    if vp is None and row["vp"].lower().startswith("interleaved") and layers_per_stage:
        vp = min(layers_per_stage)  # Llama 3 405B: 7, the stages of 7 and 8 layers allow no more
        defaults.append(f"vp={vp} (interleaved, degree not stated: the largest the stage split allows)")
    if vp is None:
        vp = 1
        if pp > 1:
            defaults.append("vp=1")
    mb = _int(row["micro_batch"])
    if mb is None:
        mb = 1
        defaults.append("micro_batch=1")
    sp_text = row["sequence_parallel"].lower()
    sp = sp_text.startswith("yes") if sp_text else tp > 1
    if not sp_text and tp > 1:
        defaults.append("sequence_parallel=on")
    vocab = _int(row["vocab_size"]) or _GPT3_VOCAB
    precision = _precision(row["precision"])
    rec = _recompute(row["recompute"])
    modules = recompute_modules(row)
    if modules and rec is None:
        rec = "selective"
    key = row["source_key"]
    moe_plan, moe_job, moe_defaults = moe_state(row) if moe else ({}, {}, [])
    defaults += moe_defaults
    scenario = {
        "model": {
            "name": row["model"],
            "layers": int(row["n_layers"]),
            "hidden": int(row["hidden"]),
            "heads": int(row["n_heads"]),
            "kv_heads": kv_heads,
            "vocab": vocab,
            "activation": _activation(row["model_type"]),
            "tied_embeddings": key
            in ("narayanan2021_t1", "korthikanti2022_t5", "bloom176b", "mosaic_llmfoundry"),
            "norm": "rmsnorm" if "swiglu" in row["model_type"].lower() else "layernorm",
            "dropout": key in _PRE_FLASH_SOURCES,
            **({"ffn_hidden": int(row["ffn_hidden"])} if not moe else moe),
        },
        "cluster": {"preset": hardware, "gpus": n},
        "job": {
            "seq_len": int(row["seq_len"]),
            "global_batch": int(row["global_batch_seqs"]),
            "precision": precision,
            "flash_attention": key not in _PRE_FLASH_SOURCES,
            **({"attention_kernel": kernel} if (kernel := _attention_kernel(row)) else {}),
            "overlap_dp_comm": key not in _NO_OVERLAP_SOURCES,
            **({"frozen_base": True} if row["task"] == "lora" else {}),
            "fp32_grads": key not in _DIST_OPTIMIZER_SOURCES,
            **(moe_job if moe else {}),
            **({"recompute_modules": modules} if modules else {}),
            **({"offload_modules": offload} if (offload := offload_modules(row)) else {}),
        },
        "plan": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "ep": _int(row["ep"]) or 1,
            "vp": vp,
            "micro_batch": mb,
            "zero": _zero(row, defaults),
            **({"layers_per_stage": layers_per_stage} if layers_per_stage else {}),
            "sequence_parallel": sp,
            "recompute": rec or "none",
            **(moe_plan if moe else {}),
        },
    }
    options = ("none", "selective", "full")
    if rec == "selective" and "(op)" in row["recompute"].lower():
        # torchtitan's per-op selective checkpointing saves the outputs of some matmuls and
        # recomputes the rest: less than Megatron's selective (attention core only) keeps,
        # more than full. paraplan has no mode in between: the faster of the two that fits.
        rec, options = None, ("selective", "full")
        defaults.append("recompute=selective if it fits, else full (torchtitan per-op SAC)")
    elif rec is None:
        defaults.append("recompute=fastest that fits")
    ep = _int(row["ep"]) or 1
    if ep > 1 and n % (ep * pp):
        # e.g. row 355 (DeepSeek-V3 on 256 GB200: pp 8, ep 64): the expert grid would need
        # ep*pp = 512 ranks; the published degrees contradict each other
        return Skipped(
            rid,
            label,
            f"degrees: ep={ep} x pp={pp} exceed the {n} GPUs (Megatron's "
            "expert grid etp*ep*pp must divide the world)",
        )
    if ep > 1 and (dp * cp) % ep and n % (tp * ep * pp) and n % (ep * pp) == 0:
        # Megatron's expert grid ETP x EP x expert-DP x PP covers the world (docs/frameworks.md
        # Sec. 2.3, rule 2: world % (ETP*EP*PP) == 0): with ep wider than dp*cp only etp = 1 fits,
        # and the EP group folds over the tp ranks (MoE parallel folding, cost/ep.py)
        scenario["plan"]["etp"] = 1
        defaults.append("etp=1 (EP folded over tp: world % (etp*ep*pp) == 0 forces it)")
    if dp * tp * pp * cp != n:
        return Skipped(rid, label, f"degrees {dp}x{tp}x{pp}x{cp} do not multiply to {n}")
    if by_megatron_count:  # FLOPs of the model as mapped, over the GPUs and tp the case runs
        spec = from_fields(row["model"], scenario["model"])
        step_s = _step_time_s({**row, "n_gpus": str(n), "tp": str(tp)}, spec)
        defaults.append(f"step time = {megatron_counting(row)} FLOP count / (TFLOP/s x GPUs)")
    if step_s is None:
        return Skipped(rid, label, "no step time: the row's TFLOP/s need a FLOP count it lacks inputs for")
    return Case(
        rid,
        key,
        label,
        scenario,
        step_s,
        rec is not None,
        tuple(defaults),
        _publication(row["source"]),
        options,
    )


def row_kind(row: dict[str, str]) -> str:
    """ "moe" for a mixture-of-experts row (an expert count, or "MoE" in its ``model_type``: the
    hybrid Nemotron 3 rows give only the latter), else "dense"."""
    return "moe" if row["moe_experts"] or "moe" in row["model_type"].lower() else "dense"


def load_cases(path: Path | str = CSV_PATH, kind: str | None = None) -> tuple[list[Case], list[Skipped]]:
    """Every row of a file with the calibration file's columns, mapped by the rules above (any
    path: runs published later score without code); ``kind`` "moe" / "dense" keeps those rows."""
    cases: list[Case] = []
    skipped: list[Skipped] = []
    with Path(path).open() as f:
        for row in csv.DictReader(f):
            if kind is not None and row_kind(row) != kind:
                continue
            c = _row_case(row)
            (cases if isinstance(c, Case) else skipped).append(c)
    return cases, skipped
