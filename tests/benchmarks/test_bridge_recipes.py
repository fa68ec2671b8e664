"""The Megatron-Bridge release rules of benchmarks/moe_state.py: which rows take a 0.6.2 recipe's
software state, that a stated state wins, which Bridge release each NeMo container is assumed to
ship, and which rows of the releases before 26.06 run without CUDA graphs."""

from __future__ import annotations

from benchmarks.moe_state import bridge_recipe, bridge_release, moe_state, release_graphs

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


QWEN3_B300 = {
    **QWEN3_GB300,
    "source_table": "26.02.01 NeMo container / Pre-Training Performance / DGX-B300",
    "hardware": "B300 (DGX-B300)",
    "pp": "8",
    "vp": "4",
    "ep": "8",
    "micro_batch": "1",
}


def test_each_container_names_its_assumed_bridge_release() -> None:
    """Issue 22 (sixth round): the container -> Megatron-Bridge release table, by the wheels' dates
    (docs/moe_physics.md Sec. 5.11); a point container takes the point release."""
    assert bridge_release({**QWEN3_B300, "source_table": "26.02 NeMo container / ..."}) == "0.3.0"
    assert bridge_release(QWEN3_B300) == "0.3.1"
    assert bridge_release({**QWEN3_B300, "source_table": "26.04.01 NeMo container / ..."}) == "0.4.1"
    assert bridge_release({**QWEN3_B300, "source_table": "25.11 NeMo container / ..."}) == "0.2.0"
    assert bridge_release(QWEN3_GB300) == "0.5.1"
    assert bridge_release({**QWEN3_B300, "source_key": "mcore_modelzoo_qwen3"}) is None
    assert bridge_release({**QWEN3_B300, "source_table": "Table 3"}) is None


def test_rows_of_a_read_release_whose_recipes_run_no_graphs_take_none() -> None:
    """Issue 22 (sixth round): Qwen3-235B-A22B on B300 of 26.02-26.04.01 runs without CUDA graphs
    (the release's base recipe and every non-full-iteration 0.6.0 perf recipe of that model and
    GPU), listed as a default; 25.11 (Bridge 0.2.0, not on the index), 26.06+ and models whose
    0.6.0 recipes capture TE graphs keep the defaults."""
    plan, _, defaults = moe_state(QWEN3_B300)
    assert plan["cuda_graphs"] == "none"
    assert any(d.startswith("cuda_graphs=none (Megatron-Bridge 0.3.1") for d in defaults)
    assert release_graphs({**QWEN3_B300, "source_table": "25.11 NeMo container / ..."}) is None
    assert release_graphs({**QWEN3_B300, "source_table": "26.06 NeMo container / ..."}) is None
    assert release_graphs({**QWEN3_B300, "model": "Qwen3-30B-A3B"}) is None
    assert release_graphs({**QWEN3_B300, "hardware": "GB300 (DGX-GB300 NVL72 rack)"}) is None
    stated, _, _ = moe_state({**QWEN3_B300, "notes": QWEN3_B300["notes"] + "; cuda graphs attn"})
    assert stated["cuda_graphs"] == "partial"
