"""Time to train, goodput and cost of a plan on its cluster, from the scenario's capacity keys:
the cost model's terms (cost/reliability.py) with the scenario's prices and storage tier
(hardware/capacity.py). Used by ``paraplan evaluate`` / ``plan`` whenever ``job.tokens`` is given,
and by the cluster search for every candidate."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from paraplan.capacity.out import ClusterOut, TrainingOut
from paraplan.capacity.sections import StorageSection
from paraplan.cost.reliability import (
    Checkpointing,
    Goodput,
    Reliability,
    TrainingTime,
    checkpoint_bytes,
    checkpointing,
    goodput,
    goodput_upper_bound,
    time_to_train,
)
from paraplan.errors import ConfigError, InfeasibleError
from paraplan.hardware import Cluster
from paraplan.hardware.capacity import (
    StorageTier,
    custom_storage,
    host_link_bytes_per_s,
    price_of,
    storage_tier,
)
from paraplan.instance import Instance
from paraplan.result import Result
from paraplan.scenario.schema import Scenario

__all__ = ["ClusterTerms", "cluster_terms", "reliability_of", "training_of", "price_for", "TrainingTerms"]


def reliability_of(sc: Scenario) -> Reliability:
    r = sc.reliability
    return Reliability(
        failure_rate_per_gpu_hour=r.failure_rate_per_gpu_hour,
        restart_s=r.restart_s,
        checkpoint_stall_s=r.checkpoint_stall_s,
        checkpoint_restore_s=r.checkpoint_restore_s,
        checkpoint_interval_s=r.checkpoint_interval_s,
        async_checkpoint=r.async_checkpoint,
        spare_nodes=r.spare_nodes,
    )


def _storage(sc: Scenario) -> StorageTier:
    s = sc.cluster.storage
    try:
        if isinstance(s, StorageSection):
            return custom_storage(s.write_GBps, s.read_GBps)
        return storage_tier(s)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def price_for(
    sc: Scenario, preset: str, accelerator_key: str, required: bool
) -> tuple[float | None, str | None]:
    """(USD per GPU-hour, its source): cluster.price_per_gpu_hour, else hardware/data/prices.yaml;
    ConfigError when ``required`` (objective cost, a budget) and neither has one."""
    given = sc.cluster.price_per_gpu_hour
    if isinstance(given, dict) and preset in given:
        return given[preset], "cluster.price_per_gpu_hour"
    if isinstance(given, float | int) and not isinstance(given, dict):
        return float(given), "cluster.price_per_gpu_hour"
    price = price_of(accelerator_key)
    if price is not None:
        return price.usd_per_gpu_hour, f"hardware/data/prices.yaml ({price.kind}): {price.source}"
    if required:
        raise ConfigError(
            f"no price per GPU-hour for {preset} ({accelerator_key}) in hardware/data/prices.yaml; "
            f"give cluster.price_per_gpu_hour (e.g. {{{preset}: 6.0}} under cluster.choose)"
        )
    return None, None


@dataclass(frozen=True, slots=True)
class ClusterTerms:
    """What a cluster contributes to the time to train, whatever the plan."""

    preset: str
    gpus: int
    nodes: int
    gpus_paid: int
    checkpoint: Checkpointing
    storage: str
    price: float | None
    price_source: str | None


def cluster_terms(
    sc: Scenario, preset: str, cluster: Cluster, num_params: float, required_price: bool
) -> ClusterTerms:
    """The checkpoint terms, GPUs paid and price of ``cluster`` (one node type)."""
    rel = reliability_of(sc)
    gpus = cluster.num_devices
    tier = _storage(sc)
    write, read = tier.for_gpus(gpus)
    key = cluster.accelerator.key
    try:
        link = (
            None
            if rel.checkpoint_stall_s is not None or not rel.async_checkpoint
            else host_link_bytes_per_s(key)
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None
    ck = checkpointing(checkpoint_bytes(num_params, sc.job.frozen_base), gpus, write, read, link, rel)
    price, source = price_for(sc, preset, key, required_price)
    paid = gpus + rel.spare_nodes * cluster.devices_per_node
    return ClusterTerms(preset, gpus, cluster.num_nodes, paid, ck, tier.name, price, source)


@dataclass(frozen=True, slots=True)
class TrainingTerms:
    good: Goodput
    time: TrainingTime
    cost_usd: float | None


def training_of(sc: Scenario, ct: ClusterTerms, step_s: float) -> TrainingTerms:
    """Goodput and time to train of a plan of ``step_s`` on the cluster of ``ct``."""
    assert sc.job.tokens is not None
    good = goodput(ct.gpus, step_s, ct.checkpoint, reliability_of(sc))
    t = time_to_train(
        sc.job.tokens, sc.job.seq_len * sc.job.global_batch, step_s, good, ct.gpus_paid, ct.price or 0.0
    )
    return TrainingTerms(good, t, t.cost_usd if ct.price is not None else None)


def training_bound_of(sc: Scenario, ct: ClusterTerms, step_lower_s: float) -> TrainingTerms:
    """A proven lower bound on the time to train and cost of any plan of at least
    ``step_lower_s`` on this cluster: the step bound over the goodput's upper bound
    (cost/reliability.py goodput_upper_bound; goodput itself is not monotone in the step)."""
    tt = training_of(sc, ct, step_lower_s)
    upper = goodput_upper_bound(ct.gpus, ct.checkpoint, reliability_of(sc))
    wall = tt.time.compute_s / upper if upper > 0 else math.inf
    hours = wall * ct.gpus_paid / 3600.0
    time = replace(
        tt.time, wall_s=wall, days=wall / 86_400.0, gpu_hours=hours, cost_usd=hours * (ct.price or 0.0)
    )
    return TrainingTerms(tt.good, time, time.cost_usd if ct.price is not None else None)


def training_out(sc: Scenario, ct: ClusterTerms, tt: TrainingTerms, band: tuple[float, float]) -> TrainingOut:
    """``band``: the step-time band's (p10, p90) ratios, carried to the time to train."""
    g, t = tt.good, tt.time
    assert sc.job.tokens is not None
    return TrainingOut(
        tokens=sc.job.tokens,
        steps=t.steps,
        compute_days=t.compute_s / 86_400.0,
        failure_rate_per_gpu_hour=sc.reliability.failure_rate_per_gpu_hour,
        mtbf_h=g.mtbf_s / 3600.0,
        checkpoint_bytes=ct.checkpoint.bytes,
        checkpoint_stall_s=g.stall_s,
        checkpoint_write_s=g.write_s,
        checkpoint_restore_s=g.restore_s,
        checkpoint_steps=g.checkpoint_steps,
        young_interval_s=g.young_interval_s,
        restart_s=g.restart_s,
        lost_per_failure_s=g.lost_per_failure_s,
        stall_fraction=g.stall_fraction,
        failure_fraction=g.failure_fraction,
        storage=ct.storage,
        gpus_paid=ct.gpus_paid,
        gpu_hours=t.gpu_hours,
        price_per_gpu_hour=ct.price,
        price_source=ct.price_source,
        time_to_train_band_days=[band[0] * t.days, band[1] * t.days],
    )


def cluster_out(ct: ClusterTerms) -> ClusterOut:
    return ClusterOut(preset=ct.preset, gpus=ct.gpus, nodes=ct.nodes)


def band_ratios(result: Result) -> tuple[float, float]:
    """(p10, p90) of the result's step-time band over its step time (1, 1 without a band)."""
    p = result.predicted
    if p.step_time_band_s is None or p.step_time_s <= 0:
        return 1.0, 1.0
    return p.step_time_band_s.p10 / p.step_time_s, p.step_time_band_s.p90 / p.step_time_s


def with_training(result: Result, inst: Instance) -> Result:
    """``result`` with the time to train, goodput and cost of its plan when the scenario gives
    ``job.tokens`` (predicted.time_to_train_days, cost_usd, effective_training_time_ratio,
    expected_interruptions, checkpoint_interval_s; ``cluster``; ``training``); else unchanged."""
    sc = inst.scenario
    if sc.job.tokens is None:
        return result
    if inst.cluster.pools or sc.cluster.preset is None:
        raise ConfigError(
            "job.tokens (time to train) needs one node type: give cluster.preset with nodes or gpus, "
            "not cluster.pools"
        )
    required = sc.objective == "cost" or sc.job.budget_usd is not None
    ct = cluster_terms(sc, sc.cluster.preset, inst.cluster, inst.graph.num_params, required)
    step = result.predicted.step_time_s
    tt = training_of(sc, ct, step)
    if tt.good.ratio <= 0:
        raise InfeasibleError(
            f"failures outpace training on {ct.gpus:,} GPUs: one every {tt.good.mtbf_s:,.0f} s "
            f"(reliability.failure_rate_per_gpu_hour={sc.reliability.failure_rate_per_gpu_hour:g}), "
            f"each losing {tt.good.lost_per_failure_s:,.0f} s (restart, restore, checkpoint lag); "
            "lower the rate or reliability.restart_s, or use fewer GPUs"
        )
    lo, hi = band_ratios(result)
    band = (
        training_of(sc, ct, lo * step).time.days / tt.time.days if tt.time.days > 0 else 1.0,
        training_of(sc, ct, hi * step).time.days / tt.time.days if tt.time.days > 0 else 1.0,
    )
    predicted = result.predicted.model_copy(
        update={
            "time_to_train_days": tt.time.days,
            "cost_usd": tt.cost_usd,
            "effective_training_time_ratio": tt.good.ratio,
            "expected_interruptions": tt.time.expected_interruptions,
            "checkpoint_interval_s": tt.good.checkpoint_interval_s,
        }
    )
    return result.model_copy(
        update={
            "predicted": predicted,
            "cluster": cluster_out(ct),
            "training": training_out(sc, ct, tt, band),
        }
    )
