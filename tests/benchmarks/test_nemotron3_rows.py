"""The Nemotron 3 rows of the calibration file (Megatron-Bridge perf summaries, name only):
Nano maps to its preset with the recipe's degrees; Super and Lightning are skipped, saying why."""

from __future__ import annotations

from paraplan.graph import preset, to_fields

from benchmarks.calibration_set import load_cases

NANO_ROWS = {190, 192, 234, 236, 278, 280}
SUPER_ROWS = {96, 97, 98, 112, 113, 114, 141, 142, 143, 197, 199, 201, 243, 244, 245}


def test_nano_rows_take_the_preset_and_the_published_degrees() -> None:
    cases, _ = load_cases()
    nano = {c.row_id: c for c in cases if c.row_id in NANO_ROWS}
    assert set(nano) == NANO_ROWS
    fields = {k: v for k, v in to_fields(preset("nemotron3-nano-30b-a3b")).items() if k != "name"}
    for case in nano.values():
        model = case.scenario["model"]
        assert {k: model[k] for k in fields} == fields
        plan = case.scenario["plan"]
        # Megatron-Bridge 0.6.2 nemotron_3_nano_pretrain_8gpu_{b300,gb300}_fp8mx_config
        assert (plan["tp"], plan["pp"], plan["ep"], plan["dp"], plan["micro_batch"]) == (1, 1, 8, 8, 4)
        assert case.scenario["job"]["precision"] == "mxfp8"
        assert case.scenario["job"]["moe_routing"] == "force_balanced"  # force-balanced on the page


def test_super_and_lightning_rows_are_skipped_with_the_reason() -> None:
    _, skipped = load_cases()
    reasons = {s.row_id: s.reason for s in skipped}
    assert SUPER_ROWS <= set(reasons)
    assert all("Nemotron 3 Super" in reasons[r] for r in SUPER_ROWS)
    assert "multi-token-prediction" in reasons[94]  # Nemotron 3.5 Lightning
