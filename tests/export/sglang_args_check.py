"""Run in SGLang 0.5.23's interpreter (tests/serving_engines.py): parse each case's argv with
SGLang's own ``ServerArgs``, print one JSON line of verdicts.

stdin: a JSON list of {"argv": [...]}; argv is ``python -m sglang.launch_server --model-path DIR
...`` or a ``python -m dynamo.sglang`` worker's args (``--model-path DIR ...``), DIR a local
directory with the model's config.json (nothing is downloaded). Each verdict: {"ok": true,
"values": {...}} or {"ok": false, "error": "..."}. The checks, all SGLang's code:

1. ``ServerArgs.add_cli_args(argparse.ArgumentParser(allow_abbrev=False))`` + ``parse_args``: an
   unknown flag is a SystemExit, a rejection. Abbreviations, which SGLang's own launcher accepts
   as argparse does, are refused so that an export spells every flag out.
2. ``ServerArgs.from_cli_args``, then ``resolve_once()``: the resolution pipeline a launch runs
   (parallel layout, attention DP, memory and disaggregation hooks; it reads the model's config).
3. ``check_server_args()``.

``--device cpu`` is added: the pipeline probes the accelerator and there is none here (the CPU
backend's kernel choices; the same parallel checks).
"""

import argparse
import contextlib
import io
import json
import sys
import traceback
import warnings

warnings.filterwarnings("ignore")

from sglang.srt.server_args import ServerArgs  # noqa: E402

LAUNCHER = ["python", "-m", "sglang.launch_server"]


def check(case):
    argv = list(case["argv"])
    if argv[:3] == LAUNCHER:
        argv = argv[3:]
    parser = argparse.ArgumentParser(allow_abbrev=False)  # stricter than the launcher: full names only
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args([*argv, "--device", "cpu"])
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    try:
        sa = ServerArgs.from_cli_args(ns)
        sa.resolve_once()
        sa.check_server_args()
    except BaseException as e:  # SGLang's hooks assert and raise ValueError / RuntimeError
        where = traceback.extract_tb(e.__traceback__)[-1]
        return {
            "ok": False,
            "error": f"{type(e).__name__}: {e} ({where.filename}:{where.lineno}: {where.line})",
        }
    names = (
        "model_path",
        "tp_size",
        "pp_size",
        "attn_dp_size",
        "dp_size",
        "ep_size",
        "max_running_requests",
        "chunked_prefill_size",
        "max_prefill_tokens",
        "mem_fraction_static",
        "kv_cache_dtype",
        "context_length",
        "disaggregation_mode",
        "disaggregation_transfer_backend",
    )
    return {"ok": True, "values": {n: getattr(ns, n) for n in names}}


def main():
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # SGLang prints notes to stdout
        verdicts = [check(c) for c in cases]
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
