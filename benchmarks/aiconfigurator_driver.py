"""Runs inside AIConfigurator's own venv (``aiconfigurator==0.12.0``, Python 3.11-3.13): one
estimate per case, cases as JSON on stdin, results as JSON on the last line of stdout.

    /path/to/aic-venv/bin/python benchmarks/aiconfigurator_driver.py < cases.json

It imports nothing of paraplan (paraplan never imports AIConfigurator): the mapping from a
calibration row to a case is ``benchmarks/aiconfigurator_side.py``'s, in paraplan's venv; this
script only puts each case to AIConfigurator's public single-point API,
``aiconfigurator.cli.api.cli_estimate`` (the ``aiconfigurator cli estimate`` command's function,
``aiconfigurator/cli/api.py``), and reads ``EstimateResult.ttft`` / ``.tpot`` (ms) and
``.raw["tokens/s/gpu"]`` / ``.raw["seq/s"]``.

A case (keys beyond these are ignored)::

    {"id": "srv-0001", "kind": "agg_max" | "agg_rate" | "agg_fixed" | "disagg_fixed",
     "model": "meta-llama/Meta-Llama-3.1-70B" | {"config_json": "<AIC model_configs file>"},
     "system": "h200_sxm", "backend": "trtllm", "engine_version": "1.0",
     "isl": 128, "osl": 128, "num_gpus": 8,
     "estimate": {cli_estimate keyword arguments: tp_size, pp_size, attention_dp_size,
                  moe_tp_size, moe_ep_size, *_quant_mode, batch_size, ctx_tokens,
                  free_gpu_memory_fraction, prefill_* / decode_* ...},
     "rate_qps": 4.0 | "inf"}          # agg_rate only

Kinds (AIC's own conventions; benchmarks/data/README_aiconfigurator.md says which rows get which):

- ``agg_fixed`` / ``disagg_fixed``: one ``cli_estimate`` call with the case's arguments.
- ``agg_max``: the fixed layout at saturation, AIC's own aggregated sweep with no TTFT/TPOT limit:
  batch over ``aiconfigurator.sdk.sweep._DEFAULT_AGG_BATCH_SCHEDULE`` (1..1024), ctx_tokens over
  ``sweep._agg_ctx_tokens_list(isl, 512, chunked=False)``, with ``sweep._sweep_one_parallel_agg``'s
  balance guards, its de-duplication of equivalent generation slices, and its break on OOM or KV
  overflow; the point with the most tokens/s/GPU is the prediction.
- ``agg_rate``: an offered request rate. AIC has no arrival model, so the rate becomes a batch by
  Little's law on AIC's own ``seq/s(batch)`` curve (ctx_tokens = isl, ``cli estimate``'s default):
  the two batch points whose seq/s bracket the rate are interpolated linearly in seq/s; below the
  batch-1 rate the batch-1 latencies with throughput scaled to the rate; a rate AIC cannot sustain
  (or ``inf``) gets the ``agg_max`` point.

Engine version: AIC answers only its "queryable slots" (``systems/query_versions.yaml``: current,
previous, derived next); the case's ``engine_version`` is matched to the nearest slot by version
number (a tag with no number, e.g. ``nightly-dev``, takes ``current``). The result records it.

The perf database re-parses its YAML metadata on every call (~2 s each on a 2-core machine) and
``cli_estimate`` builds a new database view (with an empty interpolation cache) on every call; the
driver memoises ``yaml.safe_load`` and ``yaml.load(..., SafeLoader)`` of unchanged files inside
``aiconfigurator_core.sdk.perf_database`` (a deep copy per call, so no caller sees another's
mutations) and ``get_database_view`` per configuration, as ``docs/serving.md``'s harness
did: ~60x faster, and every prediction stays bit for bit the same (``--no-cache`` turns both off
to check that).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
import types
import warnings
from typing import Any

#: The version this driver was written against and checked on.
AIC_VERSION = "0.12.0"


def _install_caches() -> None:
    import yaml
    from aiconfigurator_core.sdk import perf_database

    cache: dict[tuple[str, int], Any] = {}

    def cached(stream: Any, parse: Any) -> Any:
        name = getattr(stream, "name", None)
        if not isinstance(name, str) or not os.path.isfile(name):
            return parse(stream)
        key = (name, os.stat(name).st_mtime_ns)
        if key not in cache:
            cache[key] = parse(stream)
        return copy.deepcopy(cache[key])

    def load(stream: Any, Loader: Any = None) -> Any:  # noqa: N803 (yaml's own keyword)
        if Loader is not yaml.SafeLoader:
            return yaml.load(stream, Loader=Loader)
        return cached(stream, yaml.safe_load)

    shim = types.SimpleNamespace(**{k: getattr(yaml, k) for k in dir(yaml) if not k.startswith("__")})
    shim.safe_load = lambda stream: cached(stream, yaml.safe_load)
    shim.load = load
    perf_database.yaml = shim  # type: ignore[attr-defined]

    # one query view per configuration: cli_estimate asks get_database_view anew on every call
    # (twice), and a fresh view also drops its interpolation cache
    views: dict[Any, Any] = {}
    get_view = perf_database.get_database_view

    def get_database_view(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in views:
            views[key] = get_view(*args, **kwargs)
        return views[key]

    perf_database.get_database_view = get_database_view  # type: ignore[attr-defined]


def _version_key(text: str) -> tuple[int, ...] | None:
    """(major, minor, patch, pre) from '1.3.0rc20' / '0.5.8.post1'; None without a number."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(rc|dev|a|b)?", text or "")
    if m is None:
        return None
    pre = 0 if m.group(4) is None else -1
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), pre)


def nearest_slot(system: str, backend: str, engine_version: str) -> tuple[str, str]:
    """The queryable database version nearest ``engine_version`` and a note saying why."""
    from aiconfigurator_core.sdk.perf_database import get_version_slots

    slots = get_version_slots(system, backend) or {}
    if not slots:
        raise LookupError(f"AIC {AIC_VERSION} has no {backend} database for {system}")
    wanted = _version_key(engine_version)
    if wanted is None:
        return slots["current"], f"'{engine_version}' has no version number: current slot"
    best = min(
        slots.items(),
        key=lambda kv: (
            sum(
                abs(a - b) * w
                for a, b, w in zip(
                    _version_key(kv[1]) or (0, 0, 0, 0), wanted, (1e6, 1e3, 1, 0.1), strict=True
                )
            ),
            kv[0] != "current",
        ),
    )
    return best[1], f"{engine_version} -> {best[0]} slot {best[1]} (slots {slots})"


def _model_path(model: Any, tmp: str) -> str:
    """An HF id AIC has cached, or a local directory holding a copy of one of its bundled configs
    (a model whose config ships but is not on AIC's offline list, e.g. Mixtral)."""
    if isinstance(model, str):
        return model
    from aiconfigurator_core.sdk.utils import _get_model_config_path

    src = _get_model_config_path() / model["config_json"]
    path = os.path.join(tmp, model["config_json"].removesuffix("_config.json"))
    os.makedirs(path, exist_ok=True)
    shutil.copy(str(src), os.path.join(path, "config.json"))
    return path


def _point(res: Any) -> dict[str, float]:
    return {
        "ttft_ms": float(res.ttft),
        "tpot_ms": float(res.tpot),
        "output_tok_s_per_gpu": float(res.raw.get("tokens/s/gpu", 0.0)),
        "seq_s": float(res.raw.get("seq/s", 0.0)),
    }


def _schedules(isl: int) -> tuple[list[int], list[int]]:
    from aiconfigurator.sdk import sweep

    return list(sweep._DEFAULT_AGG_BATCH_SCHEDULE), sweep._agg_ctx_tokens_list(isl, 512, False)


def _agg_max(
    estimate: Any, case: dict[str, Any], kw: dict[str, Any]
) -> tuple[dict[str, float], dict[str, Any]]:
    """The sweep of ``sweep._sweep_one_parallel_agg`` (no TTFT/TPOT limit) on one layout."""
    isl, osl = int(case["isl"]), int(case["osl"])
    batches, ctx_list = _schedules(isl)
    best: dict[str, float] | None = None
    best_at: dict[str, Any] = {}
    capped: list[float] = []
    points = 0
    last_error = ""
    for b in batches:
        for ctx in ctx_list:
            if b - math.ceil(ctx / isl) < 0 or (b > 1 and b - math.ceil(ctx / isl) < 1):
                break
            score = isl * b / ctx / osl
            if score > 1:
                gen_tokens = b // score
                if gen_tokens > 1 and gen_tokens in capped:
                    continue
                capped.append(gen_tokens)
            try:
                res = estimate(**{**kw, "batch_size": b, "ctx_tokens": ctx})
            except RuntimeError as exc:  # OOM: weights (and so every larger ctx) do not fit
                last_error = str(exc).split("\n")[0]
                break
            points += 1
            if res.kv_cache_warning:
                break
            p = _point(res)
            if best is None or p["output_tok_s_per_gpu"] > best["output_tok_s_per_gpu"]:
                best, best_at = p, {"batch_size": b, "ctx_tokens": ctx}
    if best is None:
        raise RuntimeError(f"no feasible batch ({last_error or 'KV cache overflow at batch 1'})")
    return best, {**best_at, "points": points}


def _agg_rate(
    estimate: Any, case: dict[str, Any], kw: dict[str, Any]
) -> tuple[dict[str, float], dict[str, Any]]:
    rate = float(case["rate_qps"])
    curve: list[tuple[int, dict[str, float]]] = []
    if math.isfinite(rate):
        batches, _ = _schedules(int(case["isl"]))
        for b in batches:
            try:
                res = estimate(**{**kw, "batch_size": b, "ctx_tokens": int(case["isl"])})
            except RuntimeError:
                break
            if res.kv_cache_warning:
                break
            curve.append((b, _point(res)))
            if curve[-1][1]["seq_s"] >= rate:
                break
    if curve and curve[-1][1]["seq_s"] >= rate:
        if rate <= curve[0][1]["seq_s"]:
            p = dict(curve[0][1])
            p["output_tok_s_per_gpu"] *= rate / p["seq_s"]
            return p, {"batch_size": 1.0 * rate / p["seq_s"], "regime": "below batch 1"}
        (b0, p0), (b1, p1) = curve[-2], curve[-1]
        f = (rate - p0["seq_s"]) / (p1["seq_s"] - p0["seq_s"])
        p = {k: p0[k] + f * (p1[k] - p0[k]) for k in p0}
        return p, {"batch_size": b0 + f * (b1 - b0), "regime": "sustained"}
    p, at = _agg_max(estimate, case, kw)
    return p, {**at, "regime": "saturated (rate above AIC's max seq/s)"}


def sweep_agg_top(case: dict[str, Any], kw: dict[str, Any]) -> float:
    """The top tokens/s/GPU of AIC's own ``sweep.sweep_agg`` on the case's one layout, no TTFT/TPOT
    limit, batch up to 1024 (the check that ``agg_max`` is AIC's sweep); the model config is built
    as ``cli.api._run_agg_estimate`` builds it."""
    from aiconfigurator.cli.api import _resolve_moe_parallelism
    from aiconfigurator.sdk import sweep
    from aiconfigurator.sdk.config import RuntimeConfig
    from aiconfigurator.sdk.config_builders import build_model_config
    from aiconfigurator.sdk.models import (
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )
    from aiconfigurator.sdk.perf_database import get_database_view

    system, backend, model = kw["system_name"], kw["backend_name"], kw["model_path"]
    tp, pp, dp = kw.get("tp_size", 1), kw.get("pp_size", 1), kw.get("attention_dp_size", 1)
    moe_tp, moe_ep = _resolve_moe_parallelism(
        tp, dp, kw.get("moe_tp_size"), kw.get("moe_ep_size"), model_path=model
    )
    quant = [kw.get(f"{q}_quant_mode") for q in ("gemm", "kvcache", "fmha", "moe", "comm")]
    model_config = build_model_config(tp, pp, dp, moe_tp, moe_ep, *quant)
    db = get_database_view(
        system,
        backend,
        kw["backend_version"],
        allow_missing_data=False,
        database_mode="SILICON",
        transfer_policy=None,
    )
    resolve_context_fmha_by_data(model_config, model, db, backend, is_context_role=True)
    resolve_dsv4_moe_arch(model_config, model, system_name=system, backend_name=backend)
    resolve_nvfp4_for_system(model_config, system, model, backend_name=backend)
    df = sweep.sweep_agg(
        model_path=model,
        runtime_config=RuntimeConfig(
            isl=int(case["isl"]), osl=int(case["osl"]), ttft=math.inf, tpot=math.inf
        ),
        database=db,
        backend_name=backend,
        model_config=model_config,
        parallel_config_list=[[tp, pp, dp, moe_tp, moe_ep, 1]],
        max_batch_size=1024,  # top_k left at AIC's 10: its per-layout cut ranks seq/s rounded to 3 decimals
        free_gpu_memory_fraction=kw.get("free_gpu_memory_fraction"),
    )
    return float(df.iloc[0]["tokens/s/gpu"])


def run_case(case: dict[str, Any], tmp: str) -> dict[str, Any]:
    from aiconfigurator.cli.api import cli_estimate

    out: dict[str, Any] = {"id": case["id"], "kind": case["kind"]}
    try:
        version, note = nearest_slot(case["system"], case["backend"], str(case.get("engine_version", "")))
        out.update(aic_db_version=version, aic_version_note=note)
        kw: dict[str, Any] = dict(case.get("estimate", {}))
        kw.update(
            model_path=_model_path(case["model"], tmp),
            system_name=case["system"],
            backend_name=case["backend"],
            backend_version=version,
            isl=int(case["isl"]),
            osl=int(case["osl"]),
        )
        kind = case["kind"]
        if kind in ("agg_fixed", "disagg_fixed"):
            if kind == "disagg_fixed":
                kw["mode"] = "disagg"
            res = cli_estimate(**kw)
            pred, at = _point(res), {"kv_cache_warning": res.kv_cache_warning}
        elif kind == "agg_max":
            pred, at = _agg_max(cli_estimate, case, kw)
            if case.get("check_sweep"):
                at["sweep_agg_tok_s_per_gpu"] = sweep_agg_top(case, kw)
        elif kind == "agg_rate":
            pred, at = _agg_rate(cli_estimate, case, kw)
        else:
            raise ValueError(f"unknown kind {kind!r}")
        out.update(ok=True, predicted=pred, at=at)
    except Exception as exc:  # a case AIC cannot run is recorded with AIC's own message
        out.update(ok=False, reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return out


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import aiconfigurator

    version = getattr(aiconfigurator, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("aiconfigurator")
    if "--no-cache" not in argv:
        _install_caches()
    cases = json.load(sys.stdin)
    results = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            t = time.time()
            results.append(run_case(case, tmp))
            results[-1]["wall_s"] = round(time.time() - t, 3)
            print(
                f"[{i + 1}/{len(cases)}] {case['id']} {case['kind']} {results[-1]['wall_s']} s",
                file=sys.stderr,
            )
    print(json.dumps({"aiconfigurator": version, "wall_s": round(time.time() - t0, 1), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
