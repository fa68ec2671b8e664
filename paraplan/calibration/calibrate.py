"""``paraplan calibrate``: fit the efficiency parameters of each accelerator to measured steps.

Per accelerator generation of the records, on log-parameters theta_j = log p_j (p: the
parameters of hardware/data/efficiency.yaml), minimise

    S(theta) = sum_i (r_i / SIGMA_MEASURED)^2 + sum_j ((theta_j - theta0_j) / SIGMA_PRIOR[j])^2,
    r_i = log(predicted_i(theta) / measured_i)

where predicted_i is ``cost.evaluate`` of record i's fixed plan with those parameters and theta0
the catalog values (the prior). theta is bounded to ``PLAUSIBLE_RANGE`` (hardware/calibration.py),
so a profile from three runs cannot produce absurd efficiencies. The minimiser is damped
Gauss-Newton (Levenberg-Marquardt) with a finite-difference Jacobian J_ij = d r_i / d theta_j,
projected onto the bounds (numpy only).

A parameter is *determined* when the data shrink its uncertainty well below the prior's: at the
catalog values, the posterior variance C_jj, C = (J^T J / SIGMA_MEASURED^2 + diag(1 /
SIGMA_PRIOR^2))^-1 (Laplace approximation; correlated parameters such as GEMM and attention
efficiency share the data), is at most ``MAX_VARIANCE_RATIO`` times SIGMA_PRIOR[j]^2, and at
least ``MIN_RECORDS`` records are sensitive to it (|J_ij| >= MIN_SENSITIVITY). The others stay at
their catalog values and are listed in the profile's ``not_determined`` (a parameter moved by a
single row is not a fit).

Microbenchmark records (``paraplan profile``) are fitted directly, without the cost model:
GEMMs and attention by t = flops / (peak * eff) + overhead (the cost model's form,
cost/compute.py), HBM by copy bytes / time / catalog bandwidth (see ``fit_microbenchmarks``).
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from paraplan.calibration.microfit import fit_microbenchmarks
from paraplan.calibration.records import MicroRecord, StepRecord, load_records
from paraplan.cost import Plan
from paraplan.cost import evaluate as cost_evaluate
from paraplan.errors import ConfigError
from paraplan.hardware import CalibrationProfile, accelerator
from paraplan.hardware.calibration import PLAUSIBLE_RANGE, AcceleratorCalibration
from paraplan.hardware.efficiency import PARAMETER_NAMES, catalog_parameters, efficiency_from_parameters
from paraplan.instance import Instance, build_instance, fixed_plan
from paraplan.result import paraplan_version

__all__ = [
    "FitCase",
    "GenerationFit",
    "fit_cases",
    "fit_generation",
    "calibrate",
    "cases_from_records",
    "predict_s",
    "profile_entry",
    "SIGMA_MEASURED",
    "SIGMA_PRIOR",
]

SIGMA_MEASURED = 0.1  # log-error the model keeps on a measured step (calibration set: median
#                       |error| 6.2%, p90 14.1%, README)
SIGMA_PRIOR = {  # log-width of the prior around the catalog value
    "gemm_bf16": 0.3,
    "gemm_fp8": 0.3,
    "attention": 0.5,
    "hbm": 0.3,
    "kernel_overhead_us": 1.0,
    "moe_layer_overhead_us": 1.0,
    "gemm_fp8_blockwise": 0.3,
    "gemm_mxfp8": 0.3,
    "gemm_nvfp4": 0.3,
}
OVERHEAD_FLOOR_US = 0.1  # log-space floor of the *_us parameters (their range starts at 0)
MIN_RECORDS = 2
MAX_VARIANCE_RATIO = 0.25  # posterior sd at most half the prior's
MIN_SENSITIVITY = 0.02  # |d log step / d log p| below this: the record does not see p
FD_STEP = 0.01  # finite-difference step in log-parameter
MAX_ITERATIONS = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class FitCase:
    """A measured step ready to predict: the instance, its fixed plan and the measured time."""

    name: str
    instance: Instance
    plan: Plan
    measured_s: float

    @property
    def generation(self) -> str:
        return self.instance.cluster.accelerator.generation


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationFit:
    generation: str
    catalog: Mapping[str, float]
    parameters: Mapping[str, float]  # determined ones only, fitted
    not_determined: tuple[str, ...]
    loss_before: float
    loss_after: float
    errors_before: tuple[float, ...]  # predicted / measured - 1 per case
    errors_after: tuple[float, ...]
    predicted_before_s: tuple[float, ...]
    predicted_after_s: tuple[float, ...]


def predict_s(case: FitCase, params: Mapping[str, float]) -> float:
    """Modelled step time of ``case`` with efficiency ``params`` (efficiency.yaml names)."""
    cluster = replace(case.instance.cluster, efficiency_override=efficiency_from_parameters(params))
    inst = case.instance
    return cost_evaluate(inst.graph, cluster, inst.job, case.plan).step_time_s


def _bounds(name: str) -> tuple[float, float]:
    lo, hi = PLAUSIBLE_RANGE[name]
    return math.log(max(lo, OVERHEAD_FLOOR_US if name.endswith("_us") else lo)), math.log(hi)


def _theta0(catalog: Mapping[str, float], names: Sequence[str]) -> np.ndarray:
    return np.array(
        [min(max(math.log(max(catalog[n], OVERHEAD_FLOOR_US)), _bounds(n)[0]), _bounds(n)[1]) for n in names]
    )


def _params(catalog: Mapping[str, float], names: Sequence[str], theta: np.ndarray) -> dict:
    return {**catalog, **{n: float(math.exp(t)) for n, t in zip(names, theta, strict=True)}}


def _residuals(cases: Sequence[FitCase], params: Mapping[str, float]) -> np.ndarray:
    """r_i = log(predicted_i / measured_i)."""
    return np.array([math.log(predict_s(c, params) / c.measured_s) for c in cases])


def _jacobian(residual: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, r0: np.ndarray) -> np.ndarray:
    """Forward differences J_ij = (r_i(theta + h e_j) - r_i(theta)) / h, h = FD_STEP (a 1% step
    may cross a bound; the cost model is defined there)."""
    cols = []
    for j in range(len(theta)):
        t = theta.copy()
        t[j] += FD_STEP
        cols.append((residual(t) - r0) / FD_STEP)
    return np.stack(cols, axis=1) if cols else np.zeros((len(r0), 0))


def _objective(r: np.ndarray, theta: np.ndarray, theta0: np.ndarray, w_prior: np.ndarray) -> float:
    """S = sum (r / SIGMA_MEASURED)^2 + sum w_prior (theta - theta0)^2."""
    return float(np.sum((r / SIGMA_MEASURED) ** 2) + np.sum(w_prior * (theta - theta0) ** 2))


def _determined(jac: np.ndarray, names: Sequence[str]) -> list[str]:
    """Parameters the data determine (module docstring): posterior variance C_jj <=
    MAX_VARIANCE_RATIO * SIGMA_PRIOR_j^2 and >= MIN_RECORDS sensitive records."""
    prior_var = np.array([SIGMA_PRIOR[n] ** 2 for n in names])
    posterior = np.linalg.inv(jac.T @ jac / SIGMA_MEASURED**2 + np.diag(1.0 / prior_var))
    sensitive = np.sum(np.abs(jac) >= MIN_SENSITIVITY, axis=0)
    return [
        n
        for j, n in enumerate(names)
        if posterior[j, j] <= MAX_VARIANCE_RATIO * prior_var[j] and sensitive[j] >= MIN_RECORDS
    ]


def _minimise(
    residual: Callable[[np.ndarray], np.ndarray],
    theta0: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    w_prior: np.ndarray,
) -> np.ndarray:
    """Levenberg-Marquardt on S (module docstring), each step clipped to [lo, hi]."""
    theta, mu = theta0.copy(), 1e-3
    r = residual(theta)
    s = _objective(r, theta, theta0, w_prior)
    for _ in range(MAX_ITERATIONS):
        jac = _jacobian(residual, theta, r)
        a = jac.T @ jac / SIGMA_MEASURED**2 + np.diag(w_prior)
        g = jac.T @ r / SIGMA_MEASURED**2 + w_prior * (theta - theta0)
        while True:
            step = np.linalg.solve(a + mu * np.diag(np.diag(a)), -g)
            cand = np.clip(theta + step, lo, hi)
            r_c = residual(cand)
            s_c = _objective(r_c, cand, theta0, w_prior)
            if s_c < s:
                mu = max(mu / 10, 1e-7)
                break
            mu *= 10
            if mu > 1e6:
                return theta
        done = np.max(np.abs(cand - theta)) < 1e-4
        theta, r, s = cand, r_c, s_c
        if done:
            break
    return theta


def fit_generation(cases: Sequence[FitCase]) -> GenerationFit:
    """Fit the parameters of the one accelerator generation of ``cases`` (module docstring)."""
    gens = {c.generation for c in cases}
    if len(gens) != 1:
        raise ValueError(f"fit_generation needs one generation, got {sorted(gens)}")
    gen = gens.pop()
    catalog = catalog_parameters(gen)
    names = list(PARAMETER_NAMES)
    theta0_all = _theta0(catalog, names)
    base = _params(catalog, names, theta0_all)

    def residual_for(sel: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda t: _residuals(cases, _params(base, sel, t))

    r_before = _residuals(cases, catalog)
    jac = _jacobian(residual_for(names), theta0_all, _residuals(cases, base))
    active = _determined(jac, names)
    idx = [names.index(n) for n in active]
    theta0 = theta0_all[idx]
    w_prior = np.array([1.0 / SIGMA_PRIOR[n] ** 2 for n in active])
    lo = np.array([_bounds(n)[0] for n in active])
    hi = np.array([_bounds(n)[1] for n in active])
    theta = _minimise(residual_for(active), theta0, lo, hi, w_prior) if active else theta0
    fitted = _params(catalog, active, theta)
    r_after = _residuals(cases, fitted)
    w_all = np.array([1.0 / SIGMA_PRIOR[n] ** 2 for n in active])
    return GenerationFit(
        generation=gen,
        catalog=catalog,
        parameters={n: round(fitted[n], 4) for n in active},
        not_determined=tuple(n for n in names if n not in active),
        loss_before=_objective(r_before, theta0, theta0, w_all),
        loss_after=_objective(r_after, theta, theta0, w_all),
        errors_before=tuple(float(math.expm1(x)) for x in r_before),
        errors_after=tuple(float(math.expm1(x)) for x in r_after),
        predicted_before_s=tuple(c.measured_s * math.exp(x) for c, x in zip(cases, r_before, strict=True)),
        predicted_after_s=tuple(c.measured_s * math.exp(x) for c, x in zip(cases, r_after, strict=True)),
    )


def fit_cases(cases: Sequence[FitCase]) -> dict[str, GenerationFit]:
    """One fit per accelerator generation of ``cases``."""
    groups: dict[str, list[FitCase]] = defaultdict(list)
    for c in cases:
        groups[c.generation].append(c)
    return {g: fit_generation(cs) for g, cs in sorted(groups.items())}


def _case(rec: StepRecord) -> FitCase:
    inst = build_instance(rec.scenario.model_copy(update={"calibration": None}))
    if inst.cluster.pools:
        raise ConfigError(
            f"{rec.name}: calibrate fits one accelerator per record; a pooled "
            "(cluster.pools) run mixes several, record each pool's runs instead"
        )
    plan = fixed_plan(inst)
    if rec.step_time_s is not None:
        measured = rec.step_time_s
    else:
        assert rec.tokens_per_s_per_gpu is not None
        measured = inst.job.tokens_per_step / (rec.tokens_per_s_per_gpu * inst.cluster.num_devices)
    return FitCase(name=rec.name, instance=inst, plan=plan, measured_s=measured)


def cases_from_records(records: Sequence[StepRecord | MicroRecord]) -> list[FitCase]:
    """The measured-step records as FitCases (ConfigError naming the record when invalid)."""
    out = []
    for rec in records:
        if isinstance(rec, StepRecord):
            try:
                out.append(_case(rec))
            except ConfigError as e:
                raise ConfigError(f"{rec.name}: {e}") from None
    return out


def _median_abs(errors: Sequence[float]) -> float:
    return round(statistics.median(abs(e) for e in errors), 4) if errors else 0.0


def profile_entry(fit: GenerationFit, cases: Sequence[FitCase]) -> AcceleratorCalibration:
    records = tuple(
        {
            "name": c.name,
            "measured_step_time_s": round(c.measured_s, 6),
            "predicted_before_s": round(pb, 6),
            "predicted_after_s": round(pa, 6),
            "error_before": round(eb, 4),
            "error_after": round(ea, 4),
        }
        for c, pb, pa, eb, ea in zip(
            cases,
            fit.predicted_before_s,
            fit.predicted_after_s,
            fit.errors_before,
            fit.errors_after,
            strict=True,
        )
    )
    return AcceleratorCalibration(
        key=fit.generation,
        parameters=dict(fit.parameters),
        not_determined=fit.not_determined,
        catalog=dict(fit.catalog),
        fit={
            "num_records": len(cases),
            "loss_before": round(fit.loss_before, 4),
            "loss_after": round(fit.loss_after, 4),
            "median_abs_error_before": _median_abs(fit.errors_before),
            "median_abs_error_after": _median_abs(fit.errors_after),
        },
        records=records,
    )


def calibrate(records: str | Path | list, *, source: str = "") -> CalibrationProfile:
    """Calibration profile from a records file or list (module docstring; paraplan/calibration/records.py)."""
    loaded = load_records(records)
    cases = cases_from_records(loaded)
    entries: dict[str, AcceleratorCalibration] = {}
    for gen, fit in fit_cases(cases).items():
        entries[gen] = profile_entry(fit, [c for c in cases if c.generation == gen])
    micro = [r for r in loaded if isinstance(r, MicroRecord)]
    for key, entry in fit_microbenchmarks(micro).items():
        gen = None if entry.is_smoke_test else accelerator(key).generation
        if gen in entries:  # measured steps win; kernel rates are kept beside them
            assert gen is not None
            entries[gen] = replace(
                entries[gen],
                microbenchmarks={
                    **entry.microbenchmarks,
                    "accelerator": key,
                    "parameters": dict(entry.parameters),
                },
            )
        else:
            entries[key] = entry
    return CalibrationProfile(
        accelerators=entries,
        paraplan_version=paraplan_version(),
        created=datetime.date.today().isoformat(),
        source=source or (str(records) if not isinstance(records, list) else ""),
    )
