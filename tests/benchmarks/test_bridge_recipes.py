"""The Megatron-Bridge 0.6.2 recipe rule of benchmarks/moe_state.py: which rows take a recipe's
software state, and that a stated state wins."""

from __future__ import annotations

from benchmarks.moe_state import bridge_recipe, moe_state

QWEN3_GB300 = {
    "source_key": "megatron_bridge_perf",
    "source_table": "26.06.01 NeMo container / Pre-Training Performance / DGX-GB300",
    "model": "Qwen3-235B-A22B",
    "hardware": "GB300 (DGX-GB300 NVL72 rack)",
    "tp": "1",
    "pp": "4",
    "vp": "12",
    "ep": "32",
    "micro_batch": "2",
    "global_batch_seqs": "8192",
    "notes": "MoE: tokens force-balanced across experts, dropless (page footnote)",
    "framework": "Megatron-Bridge / NeMo 26.06.01",
}


def test_a_26_06_row_with_its_recipe_s_layout_takes_the_recipe_s_state() -> None:
    plan, job, defaults = moe_state(QWEN3_GB300)
    assert (plan["moe_dispatcher"], plan["moe_overlap"], plan["cuda_graphs"]) == ("hybridep", True, "full")
    assert job["moe_routing"] == "force_balanced"
    assert any("Megatron-Bridge 0.6.2" in d for d in defaults)


def test_earlier_containers_other_layouts_and_other_sources_keep_the_defaults() -> None:
    assert bridge_recipe({**QWEN3_GB300, "source_table": "26.04.01 NeMo container / ..."}) is None
    assert bridge_recipe({**QWEN3_GB300, "source_table": "25.11 NeMo container / ..."}) is None
    assert bridge_recipe({**QWEN3_GB300, "micro_batch": "1"}) is None
    assert bridge_recipe({**QWEN3_GB300, "hardware": "GB200 (DGX-GB200 NVL72 rack)"}) is None
    assert bridge_recipe({**QWEN3_GB300, "source_key": "mcore_modelzoo_qwen3"}) is None
    assert bridge_recipe({**QWEN3_GB300, "source_table": ""}) is None
    plan, _, _ = moe_state({**QWEN3_GB300, "source_table": "26.04 NeMo container / ..."})
    assert (plan["moe_dispatcher"], plan["moe_overlap"], plan["cuda_graphs"]) == (
        "alltoall",
        False,
        "partial",
    )


def test_a_stated_state_wins_over_the_recipe() -> None:
    plan, _, _ = moe_state({**QWEN3_GB300, "notes": QWEN3_GB300["notes"] + "; dispatcher DeepEP"})
    assert plan["moe_dispatcher"] == "deepep" and plan["moe_overlap"] is False
