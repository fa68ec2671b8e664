"""Why the winner wins: what binds (memory on a stage, a link tier, the bubble) and what the
runner-up loses, in a few sentences built from cost/ breakdowns."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from paraplan.cost import Axis, Breakdown, Plan, group_span
from paraplan.cost.memory_reserve import stranded_share
from paraplan.cost.plan import Job
from paraplan.hardware import Cluster, memory_band
from paraplan.reports.text import gib
from paraplan.result import StepTimeBandOut

__all__ = ["explain", "summary"]

TIGHT_MEMORY = 0.9  # a stage above 90% of device memory is "memory-bound"


def summary(plan: Plan) -> str:
    """One line with every degree and mode (ep, etp and cp included, as in the text report)."""
    rec = sorted({r.value for r in plan.recompute})
    return (
        f"dp={plan.dp} tp={plan.tp} pp={plan.pp} cp={plan.cp} ep={plan.ep} "
        f"etp={plan.expert_tp} vp={plan.vp} mb={plan.micro_batch} zero={plan.zero} "
        f"recompute={'/'.join(rec)} order={'-'.join(plan.order)}"
        + (f" recompute_layers={list(plan.recompute_layers)}" if plan.recompute_layers else "")
        + (f" cp_comm={plan.cp_comm}" if plan.cp > 1 else "")
        + ("" if plan.sequence_parallel or plan.tp == 1 else " sp=off")
        + (f" stage_pools={list(plan.stage_pools)}" if plan.stage_pools else "")
    )


def _tiers(cluster: Cluster, plan: Plan) -> str:
    if cluster.pools and plan.stage_pools:  # tp/cp/dp groups lie inside a stage, so in one pool
        first = plan.stage_pools[0]
        local = replace(plan, pp=plan.stage_pools.count(first), stage_pools=(), recompute_layers=())
        text = _tiers(cluster.pools[first], local)
        if len(set(plan.stage_pools)) > 1:
            text += f", pp across pools over {cluster.pool_link.name if cluster.pool_link else '?'}"
        return text
    if cluster.torus is not None:
        return _torus_tiers(cluster, plan)
    parts = []
    for axis in (Axis.TP, Axis.CP, Axis.DP, Axis.PP):
        if plan.degree(axis) > 1:
            parts.append(f"{axis.value} over {group_span(cluster, plan, axis).outermost.name}")
    return ", ".join(parts) or "a single device"


def _torus_tiers(cluster: Cluster, plan: Plan) -> str:
    """TPU: the torus axes each group lies along (ring or line, members), DCN, and the shape."""
    assert cluster.torus is not None
    parts = []
    for axis in (Axis.TP, Axis.CP, Axis.DP, Axis.PP):
        if plan.degree(axis) > 1:
            group = group_span(cluster, plan, axis).torus
            assert group is not None
            along = [f"{'xyz'[a.axis]} ({a.members} {'ring' if a.ring else 'line'})" for a in group.axes] + (
                ["dcn"] if group.slices > 1 else []
            )
            parts.append(f"{axis.value} along {' + '.join(along)}")
    shape = plan.torus_shape or cluster.torus.shape
    return (", ".join(parts) or "a single device") + f" on {'x'.join(map(str, shape))} slices"


def _pools(cluster: Cluster, plan: Plan, b: Breakdown) -> str:
    """Which stages (and layers) each pool hosts, and which pools stay idle."""
    parts = []
    for p in dict.fromkeys(plan.stage_pools):
        stages = [s for s, q in enumerate(plan.stage_pools) if q == p]
        layers = [plan.layers_per_stage[s] for s in stages]
        parts.append(
            f"pool {p} ({cluster.pools[p].name}, {gib(b.stage_capacity_bytes[stages[0]])})"
            f" runs stages {stages[0]}-{stages[-1]} with layers {layers}"
        )
    idle = [i for i in range(len(cluster.pools)) if i not in plan.stage_pools]
    return "; ".join(parts) + (f"; pools {idle} idle" if idle else "")


def _runner_up_vs_band(runner_s: float, band: StepTimeBandOut) -> str:
    """Whether the runner-up's step lies inside the winner's p10-p90 band."""
    span = f"p10-p90 band {band.p10:.3f}-{band.p90:.3f} s"
    if band.p10 <= runner_s <= band.p90:
        return (
            f"indistinguishable under the model's uncertainty: inside this plan's {span}; "
            "measure both if the difference matters"
        )
    return f"outside this plan's {span}"


def _edge(peak_bytes: float, capacity_bytes: float, headroom_bytes: float) -> str:
    """How close the peak stage is to its device, against the memory band (hardware/data/
    uncertainty.yaml): the need 1 run in 10 exceeds is the prediction x the band's p90."""
    band = memory_band()
    device = capacity_bytes + headroom_bytes
    need = peak_bytes * band.p90_ratio
    free = device - peak_bytes
    text = (
        f"memory margin: {gib(free)} of the device's {gib(device)} free ({free / device:.1%}); "
        f"1 run in 10 needs over {band.p90_ratio - 1:.1%} more than predicted (memory band, "
        f"{band.rows} measured readings), {gib(need)} here"
    )
    if headroom_bytes > 0:
        share = headroom_bytes / device
        return text + f", kept inside the device by solver.memory_headroom {share:.1%} (0 turns it off)"
    verdict = "inside the device" if need <= device else "beyond the device: it may run out of memory"
    return text + f", {verdict}"


def _stranded(stranded_bytes: float) -> str:
    """The room job.variable_seq_len keeps under the default allocator (cost/memory.py)."""
    return (
        f"variable sequence lengths under the default allocator: the peak keeps {gib(stranded_bytes)} "
        "for blocks the caching allocator strands at earlier sizes (a bound: one more set of the "
        "stage's activations; Megatron-Bridge's Llama 3 70B SFT ran out of memory at 69% of the "
        "device in 30-60% of runs); job.allocator: expandable_segments frees it"
    )


def _runner_up_memory(b: Breakdown, ob: Breakdown) -> str:
    """The runner-up's peak against the winner's: what more memory headroom costs, or saves."""
    peak = max(m.total_bytes for m in b.stage_memory)
    other = max(m.total_bytes for m in ob.stage_memory)
    if other < peak:
        return f"its peak {gib(other)} leaves {gib(peak - other)} more headroom"
    return f"its peak {gib(other)}"


class RunnerProof(NamedTuple):
    """How far a ``top`` = 1 solve proved its runner-up (solver/solve.py ``Seen``): ``proven``,
    the next best (as a top-2 solve proves it); else it is the best other layout the search saw,
    and no plan of any layout but the best's is faster than ``others_bound_s``."""

    proven: bool
    others_bound_s: float


def _unproven(proof: RunnerProof | None, seen: bool) -> str:
    """What the runner-up line says of a runner-up the search did not prove the next best."""
    if proof is None or proof.proven or proof.others_bound_s == float("inf"):
        return ""
    what = "the best other layout this search saw, not proven the next best: " if seen else ""
    return f"{what}no other layout is below {proof.others_bound_s:.3f} s (--top 2 proves the next best)"


def explain(
    plan: Plan,
    b: Breakdown,
    cluster: Cluster,
    runner_up: tuple[Plan, Breakdown] | None,
    band: StepTimeBandOut | None = None,
    job: Job | None = None,
    proof: RunnerProof | None = None,
) -> list[str]:
    """The explanation's lines: what the step is made of, what binds, the placement, and what
    the runner-up loses; ``proof``: a ``top`` = 1 solve's (None: proven by a top-K search)."""
    lines = []
    step = b.step_time_s
    lines.append(
        f"step {step:.3f} s: compute {b.compute_s / step:.0%}, exposed communication "
        f"{b.exposed_comm_s / step:.0%}, pipeline bubble {b.bubble_s / step:.0%}, optimizer "
        f"{b.optimizer_s / step:.0%}"
    )
    caps = b.stage_capacity_bytes or (b.memory_capacity_bytes,) * len(b.stage_memory)
    s = max(range(len(caps)), key=lambda i: b.stage_memory[i].total_bytes / caps[i])
    mem = b.stage_memory[s]
    use = mem.total_bytes / caps[s]
    if use >= TIGHT_MEMORY:
        lines.append(f"memory binds on stage {s}: {gib(mem.total_bytes)} of {gib(caps[s])} ({use:.0%})")
    else:
        lines.append(
            f"memory does not bind: peak {gib(mem.total_bytes)} on stage {s} ({use:.0%} of {gib(caps[s])})"
        )
    lines.append(_edge(mem.total_bytes, caps[s], b.memory_headroom_bytes))
    strand = stranded_share(cluster.accelerator.is_tpu, job) if job is not None else 0.0
    if strand > 0:
        lines.append(_stranded(strand * mem.activations_bytes))
    if cluster.pools and plan.stage_pools:
        lines.append(f"pools: {_pools(cluster, plan, b)}")
    recomputed = [i for i, r in enumerate(plan.recompute) if r.value != "none"]
    if recomputed and plan.recompute_layers:  # partial: only the layers memory needs
        lines.append(
            f"recompute on stage(s) {recomputed}: full recompute of the first "
            f"{list(plan.recompute_layers)} layers of each chunk per stage, the rest stored "
            "(without it they would not fit)"
        )
    elif recomputed:
        lines.append(f"recompute on stage(s) {recomputed}: without it they would not fit")
    lines.append(f"placement: {_tiers(cluster, plan)} (rank order {'-'.join(plan.order)})")
    if len(set(plan.stage_pools)) > 1:
        lines.append(
            f"uneven stages {list(plan.layers_per_stage)} balance the pools' speed and "
            "memory, the embedding/LM head and the in-flight activations"
        )
    elif len(set(plan.layers_per_stage)) > 1:
        lines.append(
            f"uneven stages {list(plan.layers_per_stage)} balance the embedding/LM head "
            "and the in-flight activations"
        )
    if runner_up is not None:
        other, ob = runner_up
        delta = ob.step_time_s - step
        parts = []
        for name, a, o in (
            ("compute", b.compute_s, ob.compute_s),
            ("exposed comm", b.exposed_comm_s, ob.exposed_comm_s),
            ("bubble", b.bubble_s, ob.bubble_s),
            ("optimizer", b.optimizer_s, ob.optimizer_s),
        ):
            if abs(o - a) > 0.005 * step:
                parts.append(f"{name} {o - a:+.3f} s")
        lines.append(
            f"runner-up {summary(other)}: {ob.step_time_s:.3f} s "
            f"({delta / step:+.1%}; {', '.join(parts) or 'ties within 0.5%'})"
            + (f"; {_runner_up_vs_band(ob.step_time_s, band)}" if band else "")
            + f"; {_runner_up_memory(b, ob)}"
            + (f"; {unproven}" if (unproven := _unproven(proof, True)) else "")
        )
    elif unproven := _unproven(proof, False):
        lines.append(f"runner-up: none found by this search; {unproven}")
    return lines
