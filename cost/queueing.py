"""Queueing for serving latency: TTFT is a waiting time plus a service time, not a kernel sum.

Open loop (Poisson arrivals at ``rate`` requests/s to a server that completes ``capacity``
requests/s at most): the engine is one server whose utilisation is rho = rate / capacity; a
request waits for the work ahead of it. M/D/1 (Pollaczek-Khinchine with deterministic service,
Kleinrock, Queueing Systems Vol. 1, 1975, Sec. 5.5): mean wait W = rho / (2 mu (1 - rho)), mu =
capacity. DistServe models its prefill instances this way (Zhong et al., OSDI'24, Sec. 3.1).
Its tail: P(W > t) ~ rho exp(-t / theta), theta = W / rho (the exponential approximation of the
M/G/1 wait, Kingman 1961), so the q-quantile is theta ln(rho / (1 - q)) where rho > 1 - q.

Closed loop (``concurrency`` requests always in flight, a new one sent when one returns):
Little's law C = X R (X completions/s, R the mean end-to-end latency; Little 1961), so requests
beyond what the engine runs at once wait R_queue = (C - B) / X for a slot.
"""

from __future__ import annotations

from math import log

__all__ = ["md1_wait_s", "wait_quantile_s", "closed_loop_wait_s", "OVERLOAD_RHO"]

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
