"""Goodput under failures and time-to-train: how long, and for how much, a training job of
``tokens`` runs on a cluster, with checkpoints and restarts in the wall time.

Terms (every default sourced; README "Capacity planning"):

- failures: a Poisson process of rate ``lambda = gpus x failure_rate_per_gpu_hour / 3600`` per
  second, the default rate 1.97e-5 per GPU-hour from Llama 3's 419 unexpected interruptions in a
  54-day snapshot on 16,384 H100 (Llama Team 2024, arXiv 2407.21783 Sec. 3.3.4, Table 5):
  419 / (54 x 24 x 16,384) = 1.973e-5. MTBF = 1 / lambda (3.1 h for that job).
- checkpoint: the model state, 2 B bf16 weights + 12 B fp32 master, momentum and variance per
  parameter (cost/dp.py WEIGHT_BYTES + OPTIMIZER_BYTES; ZeRO's K = 12), or 2 B for frozen base
  weights; a fully parallel save (Megatron-Core dist-checkpointing ``fully_parallel_save``;
  PyTorch DCP) spreads it evenly over every GPU, so it does not depend on the plan.
  Asynchronous save (default; Megatron ``--async-save``, PyTorch DCP ``async_save``): training
  stalls only for the device-to-host copy of each GPU's shard (bytes / gpus / host link,
  hardware/data/storage.yaml); the write to storage (bytes / aggregate write bandwidth) runs in the
  background, so checkpoints are at least the write time apart and the last persisted one lags by
  it. Synchronous save: the stall is the write.
- restore: bytes / aggregate read bandwidth; restart: ``restart_s`` (default 600 s, the 10-minute
  restart of issue 25; with it the model gives 97% effective training time on 9,600 GPUs, as
  ByteRobust reports (arXiv 2509.16293), and 94% on Llama 3's 16,384, where the report says "higher
  than 90%").
- interval: Young's first-order optimum ``tau = sqrt(2 x stall x MTBF)`` (J. W. Young, "A first
  order approximation to the optimum checkpoint interval", CACM 17(9), 1974; Daly, FGCS 22(3),
  2006), at least the background write, rounded to whole steps (a checkpoint is taken between
  optimizer steps), of the two neighbouring step counts the one that wastes less.
- effective training time ratio (goodput): of each period of ``k`` steps (``k x step_s`` of
  training) the stall is lost, and each failure loses the work since the last persisted
  checkpoint (half a period plus the write lag) plus restart and restore:
  ``ratio = k step / (k step + stall) x (1 - lambda x lost_per_failure)``, first order in lambda
  (Young 1974); no progress when ``lambda x lost_per_failure >= 1``.
- time to train: ``steps = ceil(tokens / tokens_per_step)``, wall = steps x step_s / ratio,
  expected interruptions = lambda x wall, cost = wall hours x GPUs paid (training + spare nodes)
  x price per GPU-hour.

Units: seconds, bytes, bytes/s, USD; names carry them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost.dp import OPTIMIZER_BYTES, WEIGHT_BYTES

__all__ = [
    "LLAMA3_FAILURE_RATE_PER_GPU_HOUR",
    "DEFAULT_RESTART_S",
    "Reliability",
    "Checkpointing",
    "Goodput",
    "TrainingTime",
    "checkpoint_bytes",
    "mtbf_s",
    "young_interval_s",
    "checkpointing",
    "goodput",
    "goodput_upper_bound",
    "time_to_train",
    "training_steps",
]

LLAMA3_FAILURE_RATE_PER_GPU_HOUR = 419 / (54 * 24 * 16_384)
"""1.973e-5: Llama 3's 419 unexpected interruptions in 54 days on 16,384 GPUs (arXiv 2407.21783
Sec. 3.3.4)."""
DEFAULT_RESTART_S = 600.0
"""Detect, replace (hot spare), relaunch: the 10-minute restart of issue 25 (module docstring)."""
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Reliability:
    """Failure and checkpoint parameters; None: derived (module docstring)."""

    failure_rate_per_gpu_hour: float = LLAMA3_FAILURE_RATE_PER_GPU_HOUR
    restart_s: float = DEFAULT_RESTART_S
    checkpoint_stall_s: float | None = None
    checkpoint_restore_s: float | None = None
    checkpoint_interval_s: float | None = None
    async_checkpoint: bool = True
    spare_nodes: int = 0


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """The plan-independent checkpoint terms of one cluster (seconds)."""

    bytes: float
    stall_s: float
    write_s: float
    restore_s: float


@dataclass(frozen=True, slots=True)
class Goodput:
    mtbf_s: float
    checkpoint_interval_s: float
    checkpoint_steps: int
    young_interval_s: float
    stall_s: float
    write_s: float
    restore_s: float
    restart_s: float
    lost_per_failure_s: float
    stall_fraction: float
    failure_fraction: float
    ratio: float


@dataclass(frozen=True, slots=True)
class TrainingTime:
    steps: int
    compute_s: float
    wall_s: float
    days: float
    expected_interruptions: float
    gpus_paid: int
    gpu_hours: float
    cost_usd: float


def checkpoint_bytes(num_params: float, frozen_base: bool = False) -> float:
    """Formula: params x (2 + 12) B (bf16 weights, fp32 master + Adam moments); frozen base
    weights: params x 2 B (no optimizer state)."""
    return num_params * (WEIGHT_BYTES if frozen_base else WEIGHT_BYTES + OPTIMIZER_BYTES)


def mtbf_s(gpus: int, failure_rate_per_gpu_hour: float) -> float:
    """Formula: 3600 / (gpus x rate); inf without failures."""
    rate = gpus * failure_rate_per_gpu_hour
    return SECONDS_PER_HOUR / rate if rate > 0 else math.inf


def young_interval_s(stall_s: float, mtbf: float) -> float:
    """Young (1974): tau = sqrt(2 x stall x MTBF)."""
    return math.sqrt(2.0 * stall_s * mtbf)


def checkpointing(
    ckpt_bytes: float,
    gpus: int,
    write_bytes_per_s: float,
    read_bytes_per_s: float,
    host_link_bytes_per_s: float | None,
    rel: Reliability,
) -> Checkpointing:
    """Stall, background write and restore of one checkpoint on ``gpus`` GPUs (module docstring);
    the scenario's ``checkpoint_stall_s`` / ``checkpoint_restore_s`` replace the derived ones."""
    write_s = ckpt_bytes / write_bytes_per_s
    restore_s = (
        ckpt_bytes / read_bytes_per_s if rel.checkpoint_restore_s is None else rel.checkpoint_restore_s
    )
    if rel.checkpoint_stall_s is not None:
        stall_s = rel.checkpoint_stall_s
    elif rel.async_checkpoint:
        assert host_link_bytes_per_s is not None
        stall_s = ckpt_bytes / gpus / host_link_bytes_per_s
    else:
        stall_s = write_s
    return Checkpointing(ckpt_bytes, stall_s, write_s if rel.async_checkpoint else 0.0, restore_s)


def _period_terms(
    k: int, step_s: float, ck: Checkpointing, lam: float, rel: Reliability
) -> tuple[float, float, float]:
    """(ratio, stall fraction, failure fraction) of checkpointing every ``k`` steps."""
    period = k * step_s
    lost = rel.restart_s + ck.restore_s + ck.write_s + (period + ck.stall_s) / 2.0
    failure_fraction = lam * lost
    stall_fraction = ck.stall_s / (period + ck.stall_s)
    return (1.0 - stall_fraction) * (1.0 - failure_fraction), stall_fraction, failure_fraction


def goodput(gpus: int, step_s: float, ck: Checkpointing, rel: Reliability) -> Goodput:
    """The effective training time ratio at the best whole-step checkpoint interval (module
    docstring); ``rel.checkpoint_interval_s`` fixes the interval instead. Non-increasing in
    ``step_s`` (a longer step only coarsens the choice of interval), so the fastest plan on a
    cluster is also its shortest time to train. ratio <= 0: no progress."""
    mtbf = mtbf_s(gpus, rel.failure_rate_per_gpu_hour)
    lam = 1.0 / mtbf if math.isfinite(mtbf) else 0.0
    young = young_interval_s(ck.stall_s, mtbf) if lam > 0 else math.inf
    if rel.checkpoint_interval_s is not None:
        target = max(rel.checkpoint_interval_s, ck.write_s)
        ks = [max(1, math.ceil(target / step_s - 1e-9))]
    elif not math.isfinite(young):
        ks = [max(1, math.ceil(ck.write_s / step_s - 1e-9))]
        lam = 0.0
    else:
        least = max(1, math.ceil(ck.write_s / step_s - 1e-9))  # the write must finish first
        k0 = max(least, math.floor(young / step_s))
        ks = [k0, k0 + 1]
    best: tuple[float, int, float, float] | None = None
    for k in ks:
        ratio, sf, ff = _period_terms(k, step_s, ck, lam, rel)
        if best is None or ratio > best[0]:
            best = (ratio, k, sf, ff)
    assert best is not None
    ratio, k, sf, ff = best
    period = k * step_s
    lost = rel.restart_s + ck.restore_s + ck.write_s + (period + ck.stall_s) / 2.0
    return Goodput(
        mtbf_s=mtbf,
        checkpoint_interval_s=period,
        checkpoint_steps=k,
        young_interval_s=young,
        stall_s=ck.stall_s,
        write_s=ck.write_s,
        restore_s=ck.restore_s,
        restart_s=rel.restart_s,
        lost_per_failure_s=lost,
        stall_fraction=sf,
        failure_fraction=ff,
        ratio=max(0.0, ratio) if ff < 1.0 else 0.0,
    )


def _continuous_ratio(period_s: float, ck: Checkpointing, lam: float, rel: Reliability) -> float:
    lost = rel.restart_s + ck.restore_s + ck.write_s + (period_s + ck.stall_s) / 2.0
    return period_s / (period_s + ck.stall_s) * (1.0 - lam * lost)


def goodput_upper_bound(gpus: int, ck: Checkpointing, rel: Reliability) -> float:
    """The most ``goodput(...).ratio`` can be for any step time on this cluster: the ratio at the
    best real-valued period at least the background write (and ``rel.checkpoint_interval_s``),
    where goodput's periods are whole steps. Golden-section search: the ratio is unimodal in the
    period (the stall share falls, the failure loss grows linearly). Used by the capacity bounds
    (solver/capacity.py): ``goodput`` is not monotone in the step time (whole-step rounding), but
    never above this."""
    mtbf = mtbf_s(gpus, rel.failure_rate_per_gpu_hour)
    lam = 1.0 / mtbf if math.isfinite(mtbf) else 0.0
    lo = max(ck.write_s, rel.checkpoint_interval_s or 0.0, 1e-9)
    if lam == 0.0:
        return 1.0  # no failures: an ever longer period, no stall share
    hi = max(2.0 * lo, 4.0 * young_interval_s(ck.stall_s, mtbf), 1e-6) + 2.0 * mtbf
    inv = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    for _ in range(200):
        c, d = b - inv * (b - a), a + inv * (b - a)
        if _continuous_ratio(c, ck, lam, rel) >= _continuous_ratio(d, ck, lam, rel):
            b = d
        else:
            a = c
    best = max(_continuous_ratio(x, ck, lam, rel) for x in (lo, a, b))
    return max(0.0, min(1.0, best * (1.0 + 1e-12)))


def training_steps(tokens: float, tokens_per_step: int) -> int:
    """Formula: ceil(tokens / (seq_len x global_batch))."""
    return max(1, math.ceil(tokens / tokens_per_step - 1e-9))


def time_to_train(
    tokens: float,
    tokens_per_step: int,
    step_s: float,
    good: Goodput,
    gpus_paid: int,
    usd_per_gpu_hour: float,
) -> TrainingTime:
    """Wall time, expected interruptions and cost of ``tokens`` (module docstring); wall is inf
    when the ratio is 0 (failures outpace progress)."""
    steps = training_steps(tokens, tokens_per_step)
    compute_s = steps * step_s
    wall_s = compute_s / good.ratio if good.ratio > 0 else math.inf
    lam = 1.0 / good.mtbf_s if math.isfinite(good.mtbf_s) else 0.0
    gpu_hours = wall_s * gpus_paid / SECONDS_PER_HOUR
    return TrainingTime(
        steps=steps,
        compute_s=compute_s,
        wall_s=wall_s,
        days=wall_s / SECONDS_PER_DAY,
        expected_interruptions=lam * wall_s,
        gpus_paid=gpus_paid,
        gpu_hours=gpu_hours,
        cost_usd=gpu_hours * usd_per_gpu_hour,
    )
