"""The modelled step as a Chrome trace-event file (opens in Perfetto and chrome://tracing).

Lanes (threads of one process): one per pipeline stage, then one per communication link group:
tp/cp (and ZeRO-3 gathers), pp point-to-point, dp gradient sync, each labelled with the link tier
its group spans. Events are complete events (``ph: "X"``, microseconds) in categories
``compute``, ``comm``, ``bubble`` and ``optimizer``; communication that the step waits for is
named ``exposed ...`` and carries ``args.exposed = true``; overlapped traffic has
``args.exposed = false``.

Every stage lane follows the cost model's step (cost/evaluate.py):
    step = fill + m x t_max + drain + dp_exposed + optimizer,   fill + drain = bubble_s
Each micro-batch slot of t_max holds the stage's compute, its exposed per-micro-batch
communication and a stall while the slowest stage finishes; the slowest stage has no stall and is
the critical-path lane, whose durations add up to ``predicted.step_time_s``. Times come from
``result.predicted``; the split of a non-critical stage's time into compute and communication,
the p2p share and the overlapped gradient sync come from the cost model's stage terms, scaled to
the predicted stage times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from paraplan.cost import Axis, group_span, stage_terms
from paraplan.cost.recompute_layers import recomputed_counts, stage_cost
from paraplan.export import ExportContext, plan_summary
from paraplan.result import paraplan_version

__all__ = ["render", "build_trace", "StageSplit", "US_PER_S", "CRITICAL_PATH_KEY"]

US_PER_S = 1e6
PID = 1
LANE_COMM, LANE_P2P, LANE_DP = 100, 101, 102
MAX_LISTED_MICRO_BATCHES = 64  # more are shown as head, one aggregated steady state, tail
HEAD_TAIL_MICRO_BATCHES = 8
CRITICAL_PATH_KEY = "critical_path_tid"


@dataclass(frozen=True, slots=True)
class StageSplit:
    """One stage's micro-batch slot, seconds: compute, exposed comm (p2p and other), stall."""

    compute_s: float
    p2p_s: float
    other_comm_s: float
    stall_s: float


@dataclass
class _Lanes:
    events: list[dict[str, Any]]

    def add(self, tid: int, name: str, cat: str, start_s: float, dur_s: float, **args: Any) -> None:
        if dur_s <= 0:
            return
        self.events.append(
            {
                "name": name,
                "cat": cat,
                "ph": "X",
                "pid": PID,
                "tid": tid,
                "ts": start_s * US_PER_S,
                "dur": dur_s * US_PER_S,
                "args": args,
            }
        )

    def name(self, tid: int, name: str) -> None:
        self.events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
        self.events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}}
        )


# --------------------------------------------------------------------------- step parts


class _Terms(NamedTuple):
    compute_s: list[float]
    p2p_s: list[float]
    total_s: list[float]
    sync_s: list[float]


def _terms(ctx: ExportContext) -> _Terms | None:
    """Per stage and micro-batch: compute, p2p and total time, plus the gradient sync per step."""
    plan = ctx.plan
    try:
        terms = stage_terms(ctx.inst.graph, plan, ctx.inst.job, ctx.cluster)
        stages = list(enumerate(terms.stage_counts()))
        rec = recomputed_counts(terms)  # partial recompute: cost/recompute_layers.py
        costs = [stage_cost(terms, s, n, rec[s]) for s, n in stages]
        return _Terms(
            compute_s=[c.compute_s for c in costs],
            p2p_s=[terms.p2p_at(s) for s in range(plan.pp)],
            total_s=[c.time_s for c in costs],
            sync_s=[terms.dp_sync_s(s, n) for s, n in stages],
        )
    except (AttributeError, TypeError, ValueError):  # a different cost-model API: predicted only
        return None


def _stage_splits(ctx: ExportContext) -> tuple[list[StageSplit], list[float]]:
    """Each stage's slot split (critical stage exact from predicted) and gradient-sync times."""
    q = ctx.result.predicted
    m = q.num_micro_batches
    times = [s.time_per_micro_batch_s for s in q.stages]
    slowest = max(range(len(times)), key=times.__getitem__)
    t_max = times[slowest]
    critical_compute = q.compute_s / m
    terms = _terms(ctx)
    splits = []
    for s, t in enumerate(times):
        if terms is None:
            compute, p2p = t * critical_compute / t_max, 0.0
        else:
            scale = t / terms.total_s[s] if terms.total_s[s] > 0 else 1.0
            compute, p2p = terms.compute_s[s] * scale, terms.p2p_s[s] * scale
        if s == slowest:
            compute = critical_compute
        comm = max(0.0, t - compute)
        p2p = min(p2p, comm)
        splits.append(StageSplit(compute, p2p, comm - p2p, t_max - t if s != slowest else 0.0))
    return splits, terms.sync_s if terms else [0.0] * len(times)


def _slots(m: int) -> list[tuple[str, int]]:
    """(label, micro-batches) per listed slot: all of them, or head, steady state, tail."""
    if m <= MAX_LISTED_MICRO_BATCHES:
        return [(f"mb {i}", 1) for i in range(m)]
    k = HEAD_TAIL_MICRO_BATCHES
    head = [(f"mb {i}", 1) for i in range(k)]
    tail = [(f"mb {i}", 1) for i in range(m - k, m)]
    return head + [(f"mb {k}..{m - k - 1} (steady state)", m - 2 * k)] + tail


# --------------------------------------------------------------------------- lanes


def _tier(ctx: ExportContext, *axes: Axis) -> str:
    return group_span(ctx.cluster, ctx.plan, *axes).outermost.name


def _comm_lane_names(ctx: ExportContext) -> dict[int, str]:
    p = ctx.plan
    axes = [a for a in (Axis.TP, Axis.CP) if p.degree(a) > 1]
    names = [a.value for a in axes] + (["zero-3"] if p.zero == 3 and p.dp * p.cp > 1 else [])
    lanes = {}
    if names:
        tier = _tier(ctx, *(axes or [Axis.DP, Axis.CP]))
        lanes[LANE_COMM] = f"{'/'.join(names)} comm [{tier}]"
    if p.pp > 1:
        lanes[LANE_P2P] = f"pp p2p [{_tier(ctx, Axis.PP)}]"
    if p.dp * p.cp > 1 and p.zero < 3:
        lanes[LANE_DP] = f"dp grad sync [{_tier(ctx, Axis.DP, Axis.CP)}]"
    return lanes


def _stage_lane(
    lanes: _Lanes,
    tid: int,
    start: float,
    split: StageSplit,
    m: int,
    t_max: float,
    comm_tids: dict[int, str] | None,
) -> float:
    """Micro-batch slots of one stage from ``start``; returns the time after the last slot."""
    t = start
    for label, k in _slots(m):
        lanes.add(tid, f"{label} fwd+bwd", "compute", t, k * split.compute_s, micro_batches=k)
        comm_start = t + k * split.compute_s
        lanes.add(
            tid,
            f"exposed comm {label}",
            "comm",
            comm_start,
            k * (split.p2p_s + split.other_comm_s),
            exposed=True,
            micro_batches=k,
            p2p_s=k * split.p2p_s,
            other_s=k * split.other_comm_s,
        )
        if comm_tids is not None:
            if LANE_COMM in comm_tids:
                lanes.add(
                    LANE_COMM, f"exposed {label}", "comm", comm_start, k * split.other_comm_s, exposed=True
                )
            if LANE_P2P in comm_tids:
                lanes.add(
                    LANE_P2P,
                    f"exposed {label}",
                    "comm",
                    comm_start + k * split.other_comm_s,
                    k * split.p2p_s,
                    exposed=True,
                )
        lanes.add(
            tid,
            f"stall {label} (waits for the slowest stage)",
            "bubble",
            comm_start + k * (split.p2p_s + split.other_comm_s),
            k * split.stall_s,
        )
        t += k * t_max
    return t


def build_trace(ctx: ExportContext) -> dict[str, Any]:
    """The trace-event object: ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``."""
    q = ctx.result.predicted
    m, vp = q.num_micro_batches, ctx.plan.vp
    splits, syncs = _stage_splits(ctx)
    times = [s.time_per_micro_batch_s for s in q.stages]
    slowest = max(range(len(times)), key=times.__getitem__)
    t_max = times[slowest]
    pipeline_s = m * t_max + q.bubble_s
    dp_exposed = max(0.0, q.step_time_s - pipeline_s - q.optimizer_s)
    comm_tids = _comm_lane_names(ctx)
    lanes = _Lanes(
        [
            {
                "name": "process_name",
                "ph": "M",
                "pid": PID,
                "args": {"name": f"paraplan modelled step: {plan_summary(ctx.plan)}"},
            }
        ]
    )
    for s, split in enumerate(splits):
        tid = s + 1
        critical = s == slowest
        lanes.name(tid, f"pp stage {s}" + (" (critical path)" if critical else ""))
        fill = min(q.bubble_s, sum(times[:s]) / vp)
        lanes.add(tid, "bubble (pipeline fill)", "bubble", 0.0, fill)
        end = _stage_lane(lanes, tid, fill, split, m, t_max, comm_tids if critical else None)
        lanes.add(tid, "bubble (pipeline drain)", "bubble", end, q.bubble_s - fill)
        lanes.add(tid, "exposed dp grad sync", "comm", pipeline_s, dp_exposed, exposed=True)
        lanes.add(tid, "optimizer step", "optimizer", pipeline_s + dp_exposed, q.optimizer_s)
    for tid, name in comm_tids.items():
        lanes.name(tid, name)
    if LANE_DP in comm_tids:
        hidden = max(0.0, min(syncs[slowest] - dp_exposed, pipeline_s))
        lanes.add(
            LANE_DP,
            "grad sync (overlapped with backward)",
            "comm",
            pipeline_s - hidden,
            hidden,
            exposed=False,
        )
        lanes.add(LANE_DP, "exposed grad sync", "comm", pipeline_s, dp_exposed, exposed=True)
    return {
        "traceEvents": lanes.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": f"paraplan {paraplan_version()}",
            "plan": plan_summary(ctx.plan),
            "step_time_s": q.step_time_s,
            CRITICAL_PATH_KEY: slowest + 1,
            "time_unit": "microseconds",
        },
    }


def render(ctx: ExportContext) -> str:
    """``trace.json``: the trace-event object, one event per line."""
    return json.dumps(build_trace(ctx), indent=1) + "\n"
