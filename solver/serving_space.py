"""The serving search space (issue 23): the knobs a serving scenario fixes (``ServingFixed``),
the search options, and the candidate layouts the solver's tables are built over.

A candidate *layout* is one engine replica (aggregated) or one worker of a pool
(disaggregated): tp, pp, ep, attention data parallelism; with a ``max_batch`` from
``MAX_BATCHES`` (powers of two, the engines' own defaults among them: vLLM 256, SGLang's
cuda-graph sizes). Degrees are powers of two up to the cluster (engines shard heads and experts
in powers of two; cost.serving.check_serving_plan refuses what the model cannot split, e.g. tp
that does not divide the KV heads without attention DP, or ep that does not divide the experts).
``ep`` is 1 or tp (the experts of a stage over its tp GPUs, as vLLM's
``--enable-expert-parallel`` and SGLang's ``--ep-size`` do; cost.serving checks that ep divides tp).
Attention data parallelism is searched for mixture-of-experts models only (SGLang's
``--enable-dp-attention`` and vLLM's data-parallel attention pair it with expert parallelism; on
a dense model it is plain replicas with a tensor-parallel MLP); a scenario may still fix it.
``max_num_tokens`` and ``chunked_prefill`` are not searched: the scenario's value or the
contract's default (8192 tokens, chunked).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal

from paraplan.cost.serving import ServingPlan, WorkerPlan, check_serving_plan
from paraplan.graph import ModelSpec
from paraplan.hardware import Cluster

__all__ = [
    "ServingObjective",
    "WorkerFixed",
    "ServingFixed",
    "ServingOptions",
    "searched_modes",
    "MAX_BATCHES",
    "powers_of_two",
    "worker_layouts",
    "aggregated_plans",
    "disaggregated_plans",
    "plan_gpus",
    "layout_key",
]

ServingObjective = Literal["goodput_per_gpu", "min_gpus", "min_ttft"]
MAX_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, slots=True)
class WorkerFixed:
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    dp_attention: bool | None = None
    workers: int | None = None


@dataclass(frozen=True, slots=True)
class ServingFixed:
    """The knobs a serving scenario's ``plan:`` fixes (None: searched)."""

    mode: Literal["aggregated", "disaggregated"] | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    dp_attention: bool | None = None
    replicas: int | None = None
    max_batch: int | None = None
    max_num_tokens: int | None = None
    chunked_prefill: bool | None = None
    prefill: WorkerFixed | None = None
    decode: WorkerFixed | None = None
    num_devices: int | None = None


@dataclass(frozen=True, slots=True)
class ServingOptions:
    objective: ServingObjective = "goodput_per_gpu"
    max_batches: tuple[int, ...] = MAX_BATCHES
    modes: tuple[Literal["aggregated", "disaggregated"], ...] = ("aggregated", "disaggregated")
    max_pp: int = 8


def searched_modes(
    fixed: ServingFixed, options: ServingOptions
) -> list[Literal["aggregated", "disaggregated"]]:
    """The modes the search covers: the plan's fixed mode, else the options' (both by default)."""
    return [fixed.mode] if fixed.mode is not None else list(options.modes)


def powers_of_two(limit: int) -> list[int]:
    out, d = [], 1
    while d <= limit:
        out.append(d)
        d *= 2
    return out


def _values(fixed: int | None, candidates: list[int]) -> list[int]:
    return [fixed] if fixed is not None else candidates


def worker_layouts(
    spec: ModelSpec, cluster: Cluster, fixed: WorkerFixed | ServingFixed, options: ServingOptions
) -> Iterator[WorkerPlan]:
    """Every worker layout (workers = 1) the fixed knobs allow and the model splits
    (cost.serving.check_serving_plan on a one-replica aggregated plan), in tie-break order:
    fewer GPUs, then smaller tp, pp, ep, attention DP off first."""
    n = cluster.num_devices
    out: list[WorkerPlan] = []
    for tp in _values(fixed.tp, powers_of_two(n)):
        for pp in _values(fixed.pp, [p for p in powers_of_two(min(n // tp, options.max_pp))]):
            if tp * pp > n:
                continue
            eps = [1, tp] if spec.is_moe and tp > 1 else [1]
            for ep in _values(fixed.ep, eps):
                dpas = [False, True] if tp > 1 and spec.is_moe else [False]
                for dpa in [fixed.dp_attention] if fixed.dp_attention is not None else dpas:
                    w = WorkerPlan(tp=tp, pp=pp, ep=ep, dp_attention=dpa, workers=1)
                    try:
                        check_serving_plan(spec, cluster, _as_plan(w))
                    except ValueError:
                        continue
                    out.append(w)
    out.sort(key=layout_key)
    yield from out


def layout_key(w: WorkerPlan) -> tuple[int, int, int, int, bool]:
    return (w.tp * w.pp, w.tp, w.pp, w.ep, w.dp_attention)


def _as_plan(w: WorkerPlan, max_batch: int = 1, replicas: int = 1) -> ServingPlan:
    return ServingPlan(
        mode="aggregated",
        tp=w.tp,
        pp=w.pp,
        ep=w.ep,
        dp_attention=w.dp_attention,
        replicas=replicas,
        max_batch=max_batch,
    )


def aggregated_plans(
    spec: ModelSpec, cluster: Cluster, fixed: ServingFixed, options: ServingOptions
) -> Iterator[tuple[ServingPlan, int]]:
    """Every aggregated plan of the space with its GPUs: each layout, batch cap and number of
    replicas that fits the cluster (plan.num_devices, when fixed, must be met exactly)."""
    defaults = ServingPlan()
    mnt = fixed.max_num_tokens or defaults.max_num_tokens
    chunked = defaults.chunked_prefill if fixed.chunked_prefill is None else fixed.chunked_prefill
    batches = [fixed.max_batch] if fixed.max_batch is not None else list(options.max_batches)
    n = cluster.num_devices
    for w in worker_layouts(spec, cluster, fixed, options):
        for mb in batches:
            base = replace(_as_plan(w, mb), max_num_tokens=mnt, chunked_prefill=chunked)
            for r in _values(fixed.replicas, list(range(1, n + 1))):
                plan = replace(base, replicas=r)
                gpus = plan_gpus(plan)
                if gpus > n:
                    break
                if fixed.num_devices is not None and gpus != fixed.num_devices:
                    continue
                yield plan, gpus


def plan_gpus(plan: ServingPlan) -> int:
    """GPUs a plan occupies: replicas x tp x pp (aggregated), the pools' workers x tp x pp
    (disaggregated). Attention DP runs over the tp ranks (SGLang --enable-dp-attention with
    --dp-size <= --tp-size), so it takes no GPUs of its own."""
    if plan.mode == "disaggregated":
        assert plan.prefill is not None and plan.decode is not None
        return sum(w.workers * w.tp * w.pp for w in (plan.prefill, plan.decode))
    return plan.replicas * plan.tp * plan.pp


def disaggregated_plans(
    spec: ModelSpec, cluster: Cluster, fixed: ServingFixed, options: ServingOptions
) -> Iterator[ServingPlan]:
    """Every disaggregated plan of the space: each prefill layout and worker count with each
    decode layout, max_batch and worker count, together within the cluster (at least one
    worker of each)."""
    n = cluster.num_devices
    defaults = ServingPlan()
    mnt = fixed.max_num_tokens or defaults.max_num_tokens
    chunked = defaults.chunked_prefill if fixed.chunked_prefill is None else fixed.chunked_prefill
    batches = [fixed.max_batch] if fixed.max_batch is not None else list(options.max_batches)
    pf, df = fixed.prefill or WorkerFixed(), fixed.decode or WorkerFixed()
    decodes = list(worker_layouts(spec, cluster, df, options))
    for p in worker_layouts(spec, cluster, pf, options):
        gp = p.tp * p.pp
        for d in decodes:
            gd = d.tp * d.pp
            for mb in batches:
                for np_ in _values(pf.workers, list(range(1, (n - gd) // gp + 1))):
                    for nd in _values(df.workers, list(range(1, (n - np_ * gp) // gd + 1))):
                        gpus = np_ * gp + nd * gd
                        if gpus > n or (fixed.num_devices is not None and gpus != fixed.num_devices):
                            continue
                        yield ServingPlan(
                            mode="disaggregated",
                            max_batch=mb,
                            max_num_tokens=mnt,
                            chunked_prefill=chunked,
                            prefill=replace(p, workers=np_),
                            decode=replace(d, workers=nd),
                        )
