"""Why this cluster: the choice, each node type's best cluster with the hardware and price that
decide it, the next cheaper and next faster clusters solved, and the failure terms."""

from __future__ import annotations

from typing import Any

from paraplan.capacity.out import CapacityOut, ClusterOption
from paraplan.hardware import node_type
from paraplan.scenario.schema import Scenario

__all__ = ["explain_choice", "option_line"]


def _money(usd: float | None) -> str:
    if usd is None:
        return "no price"
    return f"${usd / 1e6:,.2f}M" if usd >= 1e6 else f"${usd:,.0f}"


def _nodes(count: int) -> str:
    return f"{count:,} node" + ("" if count == 1 else "s")


def option_line(o: ClusterOption) -> str:
    return (
        f"{o.preset} x {o.gpus:,} GPUs ({_nodes(o.nodes)}): {o.time_to_train_days:,.1f} days, "
        f"{_money(o.cost_usd)}, goodput {o.effective_training_time_ratio:.1%}, "
        f"step {o.step_time_s:.2f} s ({o.plan})"
    )


def _hardware(sc: Scenario, preset: str, precision: str) -> str:
    from paraplan.capacity.terms import price_for

    nt = node_type(preset)
    a = nt.accelerator
    usd, _ = price_for(sc, preset, a.key, required=False)
    price = f", ${usd:,.2f}/GPU-h" if usd is not None else ", no price"
    peak = a.peak_flops_per_s.get(precision)
    peak_s = f"{peak / 1e12:,.0f} TFLOP/s {precision}" if peak else "no such precision"
    return (
        f"{peak_s}, {a.hbm_bytes / 2**30:,.0f} GiB HBM, {nt.scale_up.per_gpu_bytes_per_s / 1e9:,.0f} GB/s "
        f"scale-up ({nt.devices_per_node} per domain), {nt.scale_out.per_gpu_bytes_per_s / 1e9:,.0f} GB/s "
        "scale-out per GPU" + price
    )


def explain_choice(sc: Scenario, cap: CapacityOut, out: Any, unsolved: dict[str, str]) -> list[str]:
    best = cap.clusters[0]
    limits = []
    if sc.job.deadline_days is not None:
        limits.append(f"deadline {sc.job.deadline_days:g} days")
    if sc.job.budget_usd is not None:
        limits.append(f"budget {_money(sc.job.budget_usd)}")
    under = f" under {' and '.join(limits)}" if limits else ""
    proof = (
        "proven best under the model"
        if cap.status == "OPTIMAL"
        else f"best found, gap {cap.gap:.1%} to the proven bound"
    )
    lines = [
        f"chose {option_line(best)}; objective {cap.objective}{under}: {proof} over {cap.candidates:,} "
        f"clusters ({cap.solved} solved, {cap.pruned_by_bound:,} proven worse by bound, "
        f"{cap.pruned_by_limits:,} proven to miss the limits by bound, {cap.infeasible:,} without a plan)"
    ]
    per_type: dict[str, tuple[Any, ClusterOption]] = {}  # best by the objective's key
    from paraplan.capacity.solve import _option_out

    for ex in out.examined:
        o = _option_out(ex)
        key = ex.solved.key
        if o is None or key is None:
            continue
        seen = per_type.get(o.preset)
        if seen is None or key < seen[0]:
            per_type[o.preset] = (key, o)
    precision = sc.job.precision.value
    for preset in sc.cluster.choose.presets if sc.cluster.choose else []:
        hw = _hardware(sc, preset, precision)
        o = per_type[preset][1] if preset in per_type else None
        if o is None:
            reason = unsolved.get(preset, "no cluster of it has a plan within the limits")
            lines.append(f"{preset}: none solved: {reason} ({hw})")
        else:
            lines.append(f"{preset}: best solved {option_line(o)}; {hw}")
    if cap.next_cheaper is not None:
        lines.append(f"next cheaper: {option_line(cap.next_cheaper)}")
    if cap.next_faster is not None:
        lines.append(f"next faster: {option_line(cap.next_faster)}")
    return lines
