"""Queueing for serving latency: TTFT is a waiting time plus a service time, not a kernel sum.

Open loop (Poisson arrivals at ``rate`` requests/s to a server that completes ``capacity``
requests/s at most): the engine is one server whose utilisation is rho = rate / capacity; a
request waits for the work ahead of it. M/D/1 (Pollaczek-Khinchine with deterministic service,
Kleinrock, Queueing Systems Vol. 1, 1975, Sec. 5.5): mean wait W = rho / (2 mu (1 - rho)), mu =
capacity. DistServe models its prefill instances this way (Zhong et al., OSDI'24, Sec. 3.1).
Its tail: P(W > t) ~ rho exp(-t / theta), theta = W / rho (the exponential approximation of the
M/G/1 wait, Kingman 1961), so the q-quantile is theta ln(rho / (1 - q)) where rho > 1 - q.

A finite run of n requests (a benchmark) past capacity never reaches a steady state: the queue
grows as a fluid, backlog b(t) = max(0, (lambda - mu) t - slots) over the arrival span T = n /
lambda (slots = requests the engine admits at once), and the mean wait is (1/T) int b / mu dt =
(lambda - mu) (T - t0)^2 / (2 T mu), t0 = slots / (lambda - mu); all n at once (lambda = inf):
(n - slots)^2 / (2 n mu). Near capacity the steady M/D/1 wait is capped by the run's random-walk
backlog, of order sqrt(n) requests (the diffusion limit of a critically loaded queue, Kingman
1961): sqrt(n) / (2 mu).

Closed loop (``concurrency`` requests always in flight, a new one sent when one returns):
Little's law C = X R (X completions/s, R the mean end-to-end latency; Little 1961), so requests
beyond what the engine runs at once wait R_queue = (C - B) / X for a slot.
"""

from __future__ import annotations

from math import log

__all__ = ["md1_wait_s", "wait_quantile_s", "closed_loop_wait_s", "finite_run_wait_s", "OVERLOAD_RHO"]

OVERLOAD_RHO = 0.999
"""Utilisation at which the open-loop wait is evaluated when the offered rate reaches capacity
(a finite benchmark never sees the infinite wait; the caller reports the overload)."""


def md1_wait_s(rate: float, capacity: float) -> float:
    """Mean M/D/1 wait: rho / (2 mu (1 - rho)), rho = rate / capacity, mu = capacity. Units: s."""
    if rate <= 0.0:
        return 0.0
    rho = min(rate / capacity, OVERLOAD_RHO)
    return rho / (2.0 * capacity * (1.0 - rho))


def wait_quantile_s(mean_wait_s: float, rho: float, q: float) -> float:
    """q-quantile of the wait under the exponential tail P(W > t) = rho exp(-rho t / W):
    (W / rho) ln(rho / (1 - q)), 0 when rho <= 1 - q. Units: s."""
    rho = min(rho, OVERLOAD_RHO)
    if rho <= 1.0 - q or mean_wait_s <= 0.0:
        return 0.0
    return mean_wait_s / rho * log(rho / (1.0 - q))


def closed_loop_wait_s(concurrency: float, running: float, completions_per_s: float) -> float:
    """Wait for a slot when ``concurrency`` exceeds the ``running`` sequences: (C - B) / X
    (Little's law on the queue). Units: s."""
    if concurrency <= running or completions_per_s <= 0.0:
        return 0.0
    return (concurrency - running) / completions_per_s


def finite_run_wait_s(rate: float, capacity: float, n: int, slots: float) -> float:
    """Mean wait of a run of ``n`` requests offered at ``rate`` (inf: all at once) to a server
    of ``capacity`` requests/s that admits ``slots`` at once (module docstring): the fluid
    backlog past capacity, else the steady M/D/1 wait capped at sqrt(n) / (2 mu). Units: s."""
    if capacity <= 0.0:
        return float("inf")
    if rate == float("inf"):
        over = max(0.0, n - slots)
        return over * over / (2.0 * n * capacity)
    if rate > capacity:
        span = n / rate
        t0 = slots / (rate - capacity)
        if t0 >= span:
            return 0.0
        return (rate - capacity) * (span - t0) ** 2 / (2.0 * span * capacity)
    return min(md1_wait_s(rate, capacity), n**0.5 / (2.0 * capacity))
