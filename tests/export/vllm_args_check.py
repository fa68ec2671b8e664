"""Run in vLLM 0.33.0's interpreter (tests/serving_engines.py): parse each case's argv with vLLM's
own parser and configs, print one JSON line of verdicts.

stdin: a JSON list of {"argv": [...], "max_model_len": int | null}; argv is ``vllm serve MODEL
...`` or a ``python -m dynamo.vllm`` worker's args (``--model MODEL ...``; the Dynamo-only role
flags are stripped first, as AIConfigurator's validator does). Each verdict: {"ok": true,
"values": {...}} or {"ok": false, "error": "..."}. The checks, all vLLM's code:
``EngineArgs.add_cli_args(FlexibleArgumentParser(allow_abbrev=False))`` + ``parse_known_args`` (a
leftover token is a rejection, a SystemExit too; abbreviations are refused so that an export spells
every flag out), ``EngineArgs.from_cli_args``, then the configs a launch builds
without loading the model: ``CacheConfig`` (memory fraction, KV dtype), ``SchedulerConfig``
(``verify_max_model_len``: batched tokens against the model length and the sequences) at the
case's max_model_len (else --max-model-len, else --max-num-batched-tokens) and ``ParallelConfig``
(its world sizes). The platform is vLLM's CPU one (VLLM_TARGET_DEVICE=cpu): there is no GPU.
"""

import contextlib
import io
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

DYNAMO_ONLY = {"--disaggregation-mode": 1, "--is-prefill-worker": 0, "--is-decode-worker": 0}


def engine_argv(argv):
    if argv[:2] == ["vllm", "serve"]:
        argv = ["--model", argv[2], *argv[3:]]
    out, i = [], 0
    while i < len(argv):
        if argv[i] in DYNAMO_ONLY:
            i += 1 + DYNAMO_ONLY[argv[i]]
            continue
        out.append(argv[i])
        i += 1
    return out


def check(case):
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(allow_abbrev=False))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, unknown = parser.parse_known_args(engine_argv(case["argv"]))
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    if unknown:
        return {"ok": False, "error": f"unrecognized arguments: {' '.join(unknown)}"}
    try:
        ea = EngineArgs.from_cli_args(ns)
        CacheConfig(gpu_memory_utilization=ea.gpu_memory_utilization, cache_dtype=ea.kv_cache_dtype)
        model_len = case.get("max_model_len") or ea.max_model_len or ea.max_num_batched_tokens or 8192
        given = {
            "max_num_seqs": ea.max_num_seqs,
            "max_num_batched_tokens": ea.max_num_batched_tokens,
            "enable_chunked_prefill": ea.enable_chunked_prefill,
        }  # None: the engine picks (SchedulerConfig's default here)
        SchedulerConfig(
            **{k: v for k, v in given.items() if v is not None},
            max_model_len=model_len,
            is_encoder_decoder=False,
        )
        pc = ParallelConfig(
            tensor_parallel_size=ea.tensor_parallel_size,
            pipeline_parallel_size=ea.pipeline_parallel_size,
            data_parallel_size=ea.data_parallel_size,
            enable_expert_parallel=ea.enable_expert_parallel,
        )
    except Exception as e:  # vLLM's validators raise ValueError / pydantic ValidationError
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    kv = ea.kv_transfer_config
    return {
        "ok": True,
        "values": {
            "model": ea.model,
            "tensor_parallel_size": ea.tensor_parallel_size,
            "pipeline_parallel_size": ea.pipeline_parallel_size,
            "data_parallel_size": ea.data_parallel_size,
            "enable_expert_parallel": ea.enable_expert_parallel,
            "world_size_across_dp": pc.world_size_across_dp,
            "max_num_seqs": ea.max_num_seqs,
            "max_num_batched_tokens": ea.max_num_batched_tokens,
            "enable_chunked_prefill": ea.enable_chunked_prefill,
            "gpu_memory_utilization": ea.gpu_memory_utilization,
            "kv_cache_dtype": ea.kv_cache_dtype,
            "max_model_len": ea.max_model_len,
            "kv_connector": kv.kv_connector if kv is not None else None,
            "kv_role": kv.kv_role if kv is not None else None,
        },
    }


def main():
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs to stdout
        verdicts = [check(c) for c in cases]
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
