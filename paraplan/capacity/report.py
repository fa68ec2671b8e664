"""The text of a result's capacity parts: time to train with its terms, and the cluster search."""

from __future__ import annotations

from paraplan.capacity.explain import option_line
from paraplan.result import Result

__all__ = ["render_capacity"]


def render_capacity(result: Result) -> str:
    """Lines for ``paraplan plan`` / ``evaluate`` (empty without job.tokens)."""
    p, t = result.predicted, result.training
    if t is None or p.time_to_train_days is None or result.cluster is None:
        return ""
    c = result.cluster
    cost = f"${p.cost_usd:,.0f}" if p.cost_usd is not None else "no price"
    lo, hi = t.time_to_train_band_days
    lines = [
        "",
        f"time to train {t.tokens:.3g} tokens on {c.preset} x {c.gpus:,} GPUs "
        f"({c.nodes:,} node{'' if c.nodes == 1 else 's'}): "
        f"{p.time_to_train_days:,.1f} days (band {lo:,.1f}-{hi:,.1f}), {cost}, {t.gpu_hours:,.0f} GPU-hours",
        f"  goodput (effective training time ratio) {p.effective_training_time_ratio:.1%}: "
        f"{t.steps:,} steps = {t.compute_days:,.1f} days of training",
        f"  failures: MTBF {t.mtbf_h:,.2f} h ({t.failure_rate_per_gpu_hour:.3g} per GPU-hour), "
        f"{p.expected_interruptions:,.0f} expected interruptions, each losing {t.lost_per_failure_s:,.0f} s "
        f"(restart {t.restart_s:,.0f} s, restore {t.checkpoint_restore_s:,.1f} s, write lag "
        f"{t.checkpoint_write_s:,.1f} s, half an interval)",
        f"  checkpoint: {t.checkpoint_bytes / 1e12:,.2f} TB every {t.checkpoint_steps} steps "
        f"({p.checkpoint_interval_s:,.0f} s; Young/Daly {t.young_interval_s:,.0f} s), stall "
        f"{t.checkpoint_stall_s:.3g} s, storage {t.storage}",
    ]
    cap = result.capacity
    if cap is not None:
        lines += ["", "cluster search:"] + [f"  {line}" for line in cap.explanation]
        if len(cap.clusters) > 1:
            lines.append("  best clusters:")
            lines += [f"    {i + 1}. {option_line(o)}" for i, o in enumerate(cap.clusters)]
    return "\n".join(lines)
