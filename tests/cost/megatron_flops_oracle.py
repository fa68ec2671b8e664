"""Megatron-LM's own FLOP count of paraplan's Megatron exports (run under Python 3.12).

megatron-core 0.19.2 ships Megatron-LM's ``megatron/training``: for each exported argument
vector this script runs ``parse_and_validate_args`` (as tests/export/megatron_lm_oracle.py does,
in a world of the plan's size), pads the vocabulary as the tokenizer set-up does
(``calculate_padded_vocab_size``) and returns ``num_floating_point_operations(args,
args.global_batch_size)`` from ``megatron/training/training.py``. It imports nothing of paraplan,
so its venv needs only torch and megatron-core.

Input (stdin): a JSON list of ``{"name", "argv", "env", "num_devices"}``. Output (stdout, last line):
a JSON object name -> ``{"ok": true, "flops", "padded_vocab"}`` or ``{"ok": false, "error"}``.
Used by tests/cost/test_megatron_flops.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from megatron.training import arguments as megatron_arguments  # noqa: E402
from megatron.training import global_vars  # noqa: E402
from megatron.training.arguments import parse_and_validate_args  # noqa: E402
from megatron.training.training import num_floating_point_operations  # noqa: E402
from megatron.training.vocab_utils import calculate_padded_vocab_size  # noqa: E402


def count(case: dict) -> dict:
    """Parse and validate one export, then Megatron-LM's FLOPs of one global batch; never raises."""
    os.environ.update(WORLD_SIZE=str(case["num_devices"]), RANK="0", LOCAL_RANK="0")
    for key, value in case.get("env", {}).items():  # the export's environment (megatron_env)
        os.environ.pop(key, None) if value is None else os.environ.update({key: value})
    megatron_arguments.get_device_arch_version = lambda: 9  # a Hopper GPU, as validate_args asks
    torch.cuda.get_device_capability = lambda *_, **__: (9, 0)
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    global_vars.unset_global_variables()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = parse_and_validate_args()
            args.padded_vocab_size = calculate_padded_vocab_size(
                args.vocab_size,
                args.make_vocab_size_divisible_by,
                args.tensor_model_parallel_size,
                logging_enabled=False,
            )
            flops = num_floating_point_operations(args, args.global_batch_size)
    except BaseException as e:  # SystemExit from argparse, AssertionError from validate_args
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    return {"ok": True, "flops": float(flops), "padded_vocab": int(args.padded_vocab_size)}


def main() -> None:
    cases = json.load(sys.stdin)
    print(json.dumps({case["name"]: count(case) for case in cases}))


if __name__ == "__main__":
    main()
