"""Records ``paraplan calibrate`` reads: measured steps, logs, and bad input naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paraplan.calibration.records import (
    StepRecord,
    load_records,
    parse_megatron_log,
    parse_torchtitan_log,
    steady_state,
)
from paraplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "job": {"seq_len": 8192, "global_batch": 64, "precision": "bf16"},
    "plan": {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
}

MEGATRON_LOG = """\
 iteration 1/ 100 | consumed samples: 64 | elapsed time per iteration (ms): 9876.5 | lr: 1.0E-06 |
 iteration 2/ 100 | consumed samples: 128 | elapsed time per iteration (ms): 4012.0 | lr: 2.0E-06 |
 iteration 3/ 100 | consumed samples: 192 | elapsed time per iteration (ms): 3990.0 | lr: 3.0E-06 |
 iteration 4/ 100 | consumed samples: 256 | elapsed time per iteration (ms): 4001.5 | lr: 4.0E-06 |
"""
TORCHTITAN_LOG = (
    "[rank0]:[titan] 2026-11-30 10:00:01,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.2"
    "  \x1b[33mmemory: 40.1GiB(50.7%)  \x1b[34mtps: 1,021  \x1b[36mtflops: 59.1  \x1b[35mmfu: 6.0%\x1b[39m\n"
    "[rank0]:[titan] 2026-11-30 10:00:11,000 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss: 9.8"
    "  \x1b[33mmemory: 50.2GiB(63.4%)  \x1b[34mtps: 7,500  \x1b[36mtflops: 434.2"
    "  \x1b[35mmfu: 43.9%\x1b[39m\n"
    "[rank0]:[titan] 2026-11-30 10:00:21,000 - root - INFO - step: 20  loss: 8.1  memory: 50.2GiB(63.4%)"
    "  tps: 7,700  tflops: 445.8  mfu: 45.1%\n"
)


def test_megatron_log_lines_give_seconds_per_iteration() -> None:
    assert parse_megatron_log(MEGATRON_LOG) == pytest.approx([9.8765, 4.012, 3.990, 4.0015])
    # the first logged interval is warm-up; the median of the rest
    assert steady_state(parse_megatron_log(MEGATRON_LOG)) == pytest.approx(4.0015)


def test_torchtitan_log_lines_give_tokens_per_second_per_gpu() -> None:
    assert parse_torchtitan_log(TORCHTITAN_LOG) == [1021.0, 7500.0, 7700.0]
    assert steady_state(parse_torchtitan_log(TORCHTITAN_LOG)) == pytest.approx(7600.0)


def test_records_with_logs_and_scenario_paths(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(MEGATRON_LOG)
    (tmp_path / "titan.log").write_text(TORCHTITAN_LOG)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(SCENARIO))
    records = tmp_path / "records.yaml"
    records.write_text(
        yaml.safe_dump(
            [
                {"name": "megatron run", "scenario": "job.yaml", "megatron_log": "run.log"},
                {**SCENARIO, "torchtitan_log": "titan.log"},
                {**SCENARIO, "measured": {"step_time_s": 4.2}},
            ]
        )
    )
    a, b, c = load_records(records)
    assert isinstance(a, StepRecord) and a.name == "megatron run"
    assert a.step_time_s == pytest.approx(4.0015)
    assert isinstance(b, StepRecord) and b.tokens_per_s_per_gpu == pytest.approx(7600.0)
    assert isinstance(c, StepRecord) and c.step_time_s == 4.2


def test_json_lines_records(tmp_path: Path) -> None:
    import json

    path = tmp_path / "records.jsonl"
    path.write_text(
        "\n".join(json.dumps({**SCENARIO, "measured": {"tokens_per_s_per_gpu": t}}) for t in (9000, 9100))
        + "\n"
    )
    assert [r.tokens_per_s_per_gpu for r in load_records(path)] == [9000, 9100]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (SCENARIO, "records[0]: give exactly one of measured"),
        ({**SCENARIO, "measured": {"step_time_s": -1.0}}, "records[0].measured.step_time_s=-1.0"),
        ({**SCENARIO, "measured": {"tokens_per_s_per_gpu": 0}}, "records[0].measured.tokens_per_s_per_gpu=0"),
        ({**SCENARIO, "measured": {"step_s": 3.0}}, "records[0].measured="),
        (
            {**SCENARIO, "measured": {"step_time_s": 3.0}, "megatron_log": "x.log"},
            "records[0]: give exactly one of",
        ),
        ({**SCENARIO, "plan": {**SCENARIO["plan"], "tp": 0}, "measured": {"step_time_s": 3.0}}, "plan.tp"),
        ({"kind": "gemm", "device": "cpu", "time_s": -2.0}, "records[0].time_s=-2.0"),
        ({"kind": "matmul", "device": "cpu", "time_s": 2.0}, "records[0].kind='matmul'"),
    ],
)
def test_bad_records_name_the_field(record: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        load_records([record])
    assert field in str(err.value)


def test_missing_log_and_empty_log_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="records\\[0\\].megatron_log: cannot read"):
        load_records([{**SCENARIO, "megatron_log": str(tmp_path / "none.log")}])
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(ConfigError, match="no 'tps: X' lines"):
        load_records([{**SCENARIO, "torchtitan_log": str(tmp_path / "empty.log")}])


def test_a_records_file_must_be_a_list(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    with pytest.raises(ConfigError, match="YAML list of records"):
        load_records(path)
