"""MaxText export of TPU plans: ici_* inside a TPU slice and dcn_* across slices, hardware tpu/gpu,
the maxtext.yml name MaxText requires, the FP8 + accumulation rule and the multislice launch."""

from __future__ import annotations

import pytest
import yaml

import paraplan
from paraplan.errors import ExportError
from paraplan.export import EXPORTERS, context, export_text
from paraplan.export.maxtext import maxtext_config
from paraplan.result import Result


def tpu_result(
    preset: str = "v5e-256",
    slices: int = 2,
    precision: str = "bf16",
    model: str = "llama3-8b",
    **plan: object,
) -> Result:
    scenario = {
        "model": {"preset": model},
        "cluster": {"preset": preset, "nodes": slices},
        "job": {"seq_len": 2048, "global_batch": 512, "precision": precision},
        "plan": {"pp": 1, "micro_batch": 1, "zero": 3, "recompute": "full", **plan},
    }
    return paraplan.evaluate(scenario)


def test_the_file_is_named_yml_because_maxtext_reads_only_yml() -> None:
    assert EXPORTERS["maxtext"].filename == "maxtext.yml"


def test_tpu_slices_are_the_ici_domain_and_dcn_joins_them() -> None:
    # 512 chips = 2 x v5e-256; order tp-cp-dp-pp: tp 4 and 64 of dp fill a slice, dp 2 crosses DCN
    res = tpu_result(dp=128, tp=4)
    cfg = maxtext_config(context(res))
    assert cfg["hardware"] == "tpu"
    assert (cfg["ici_tensor_parallelism"], cfg["dcn_tensor_parallelism"]) == (4, 1)
    assert (cfg["ici_fsdp_parallelism"], cfg["dcn_fsdp_parallelism"]) == (64, 2)
    assert cfg["num_slices"] == 2
    # global batch = per-device batch x chips x accumulation = 0.25 x 512 x 4
    assert (cfg["per_device_batch_size"], cfg["gradient_accumulation_steps"]) == (0.25, 4)


def test_gpu_plans_say_hardware_gpu() -> None:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "job": {"seq_len": 2048, "global_batch": 64},
        "plan": {"dp": 16, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 3, "recompute": "full"},
    }
    assert maxtext_config(context(paraplan.evaluate(scenario)))["hardware"] == "gpu"


def test_multislice_launch_line_names_the_slices() -> None:
    text = export_text(tpu_result(dp=512, tp=1), "maxtext")
    assert "--tpu-type=v5litepod-256 --num-slices=2" in text
    assert "maxtext.trainers.pre_train.train maxtext.yml" in text
    assert yaml.safe_load(text)["dcn_fsdp_parallelism"] == 2


def test_a_chosen_slice_shape_is_the_slice_topology() -> None:
    res = tpu_result("v5p-256", 1, dp=128, tp=1, torus_shape=[8, 4, 4])
    assert res.plan.torus_shape == [8, 4, 4]
    assert "--type=v5p --topology=8x4x4" in export_text(res, "maxtext")


def test_fp8_with_gradient_accumulation_is_refused_with_the_reason() -> None:
    res = tpu_result("v5p-256", 1, precision="fp8", dp=128, tp=1)  # 512 / 128 = 4 micro-batches
    with pytest.raises(ExportError, match="not compatible with gradient accumulation") as err:
        export_text(res, "maxtext")
    assert "micro_batch -> 4" in str(err.value)
    ok = tpu_result("v5p-256", 1, precision="fp8", dp=128, tp=1, micro_batch=4)
    assert maxtext_config(context(ok))["quantization"] == "fp8"
