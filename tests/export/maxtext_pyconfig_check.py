"""Load a paraplan MaxText export with MaxText's own pyconfig (run with MaxText's Python 3.12).

    python3.12 maxtext_pyconfig_check.py maxtext.yml NUM_DEVICES NUM_SLICES

Prints one JSON object: the mesh MaxText resolved (ici_* and dcn_* per mesh axis, after its
fill_unspecified_mesh_axes product checks), the global batch and the remat policy. Runs on CPU
with NUM_DEVICES fake devices (docs/frameworks.md Sec. 5, "Offline validation"); a TPU config's
``hardware`` is overridden to cpu for the load, a GPU config loads as written. Exit status 1
with MaxText's error.
Imports nothing of paraplan (it runs in another interpreter).
"""

from __future__ import annotations

import json
import os
import sys

AXES = ("data", "fsdp", "fsdp_transpose", "context", "tensor", "tensor_sequence", "expert", "pipeline")


def main() -> int:
    path, devices, slices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import yaml
    from maxtext.configs import pyconfig
    from maxtext.utils import max_utils

    written = yaml.safe_load(open(path))
    # a GPU config loads as written (its rules, e.g. ring context parallelism, are GPU rules); a
    # TPU config loads as cpu, the devices this runs on
    hardware = ["hardware=cpu"] if written.get("hardware") == "tpu" else []
    config = pyconfig.initialize(
        [
            "",
            path,
            *hardware,
            "skip_jax_distributed_system=true",
            "enable_checkpointing=false",
            "dataset_type=synthetic",
        ]
    )
    ici = [getattr(config, f"ici_{a}_parallelism") for a in AXES]
    dcn = [getattr(config, f"dcn_{a}_parallelism") for a in AXES]
    ici = max_utils.fill_unspecified_mesh_axes(ici, devices // slices, "ICI")
    dcn = max_utils.fill_unspecified_mesh_axes(dcn, slices, "DCN")
    print(
        json.dumps(
            {
                "hardware": written.get("hardware"),
                "ici": dict(zip(AXES, ici, strict=True)),
                "dcn": dict(zip(AXES, dcn, strict=True)),
                "global_batch": config.global_batch_size_to_train_on,
                "gradient_accumulation_steps": config.gradient_accumulation_steps,
                "num_pipeline_microbatches": config.num_pipeline_microbatches,
                "remat_policy": config.remat_policy,
                "max_target_length": config.max_target_length,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
