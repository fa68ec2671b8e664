"""The TPU rows of the calibration set (MaxText's Dec-2023 tables on v4, v5e, v5p) as scenarios.

``calibration_set._row_case`` hands every row whose hardware names a TPU to ``tpu_row_case``.
Mapping (docs/published_runs.md §3.9 and §4; the CSV's own columns):
- cluster: the slice preset of the ``interconnect`` text ("2 x v5p-128 slice(s)" -> preset
  v5p-128) and the row's chips (``gpus``: 128 = 2 slices of 64); ICI inside a slice, DCN between;
- model: the row's explicit dimensions; MaxText's default decoder at that commit: head_dim 256
  ("head_dim 256" in ``model_type``), a ReLU MLP (not gated), untied embeddings, no dropout;
- plan: tp = the row's tensor parallelism, dp = chips / tp, ZeRO-3 (MaxText shards parameters,
  gradients and optimizer state over its fsdp axis). Approximation: MaxText keeps the fsdp axis
  inside a slice and runs plain data parallelism over DCN (hybrid sharding); paraplan shards over
  all dp ranks. The DCN part of the per-layer gathers is then 1/(ICI members) of the data (a few
  ms a layer against ~0.5 s of compute) and the state is sharded wider than MaxText's, so the
  fit is insensitive to it; it is listed in ``Case.defaults``;
- batch: MaxText's per_device_batch_size counts sequences per chip, so a data-parallel replica
  (tp chips) takes micro_batch = per_device_batch_size x tp = global batch / dp, one micro-batch
  per step (no gradient accumulation in these configs);
- recompute: remat_policy=full -> full; minimal (saves the matmul outputs, recomputes the rest)
  -> selective, which on a TPU stores exactly minimal's set (cost/recompute.py) and recomputes
  the attention core (MaxText also re-runs norms and activation functions; listed in
  ``Case.defaults``);
- memory: XLA's accounting (cost/memory.py: no CUDA/NCCL reserve, no fragmentation, logits and
  the re-materialised block not live together); the checks behind this mapping (dimensions,
  batch, memory) are in benchmarks/data/README.md, "TPU rows";
- step time: the rows give per-device model TFLOP/s, not step times. The published step is
  model FLOPs per step / (chips x TFLOP/s), with paraplan's own FLOP count (cost.flops, causal
  attention). MaxText's counting convention at that commit is unconfirmed (published_runs.md);
  at seq 2048 and hidden >= 6144 causal vs full attention changes the count by under 3%.
"""

from __future__ import annotations

import re
from typing import Any

from paraplan.cost.flops import model_flops_per_token

from paraplan.instance import build_instance
from paraplan.scenario.schema import load_scenario

__all__ = ["is_tpu_row", "tpu_row_case"]

_SLICES = re.compile(r"(\d+)\s*x\s*(v4|v5p|v5e|v6e)-(\d+)\s+slice")
_REMAT = {"full": "full", "minimal": "selective"}


def is_tpu_row(row: dict[str, str]) -> bool:
    return row["hardware"].strip().upper().startswith("TPU")


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def tpu_row_case(row: dict[str, str], case_type: Any, skipped_type: Any, publication: str) -> Any:
    """A TPU row as a ``case_type`` (calibration_set.Case), or a ``skipped_type`` with the reason."""
    rid, label = int(row["row_id"]), f"{row['source_key']}:{row['model']}"
    m = _SLICES.search(row["interconnect"])
    if m is None:
        return skipped_type(rid, label, "TPU row without a slice name in its interconnect text")
    slices, preset = int(m.group(1)), f"{m.group(2)}-{m.group(3)}"
    if not row["tflops_per_gpu"]:
        return skipped_type(rid, label, "no per-device TFLOP/s published")
    remat = re.search(r"remat_policy=(\w+)", row["recompute"])
    if remat is None or remat.group(1) not in _REMAT:
        return skipped_type(rid, label, f"remat policy {row['recompute']!r} not mapped")
    n = int(row["n_gpus"])
    tp = _int(row["tp"]) or 1
    dp = n // tp
    gbs = int(row["global_batch_seqs"])
    defaults = ["zero=3 over every dp rank (MaxText: fsdp in the slice, data parallel over DCN)"]
    if remat.group(1) == "minimal":
        defaults.append("remat minimal -> selective")
    head_dim = re.search(r"head_dim\s+(\d+)", row["model_type"])
    scenario: dict[str, Any] = {
        "model": {
            "name": row["model"],
            "layers": int(row["n_layers"]),
            "hidden": int(row["hidden"]),
            "ffn_hidden": int(row["ffn_hidden"]),
            "heads": int(row["n_heads"]),
            "kv_heads": _int(row["n_kv_heads"]) or int(row["n_heads"]),
            "vocab": int(row["vocab_size"]),
            "activation": "relu",
            "tied_embeddings": False,
            "dropout": False,
            **({"head_dim": int(head_dim.group(1))} if head_dim else {}),
        },
        "cluster": {"preset": preset, "gpus": n},  # n chips = slices x chips per slice
        "job": {"seq_len": int(row["seq_len"]), "global_batch": gbs, "precision": "bf16"},
        "plan": {
            "dp": dp,
            "tp": tp,
            "pp": 1,
            "micro_batch": gbs // dp,
            "zero": 3,
            "sequence_parallel": tp > 1,
            "recompute": _REMAT[remat.group(1)],
        },
    }
    inst = build_instance(load_scenario(scenario))
    if inst.cluster.num_devices != n or gbs % dp:
        return skipped_type(rid, label, f"{slices} x {preset} is not the row's {n} chips")
    flops = model_flops_per_token(inst.spec, inst.job.seq_len) * inst.job.tokens_per_step
    step_s = flops / (n * float(row["tflops_per_gpu"]) * 1e12)
    return case_type(rid, row["source_key"], label, scenario, step_s, True, tuple(defaults), publication)
