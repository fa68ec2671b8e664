"""Fidelity on the calibration set: predicted vs published step time of every supported run.

The bar: the best single constant MFU reaches only ~15% median / ~40-50% p90 absolute error on
these runs; paraplan must reach <= 10% median and <= 25% p90, and predict none of the published
(real, running) configurations out of memory.
"""

from __future__ import annotations

import pytest

from benchmarks.fidelity import constant_mfu_errors, scored_rows, summary


@pytest.fixture(scope="module")
def scored():
    return scored_rows()


@pytest.fixture(scope="module")
def rows(scored):
    return scored[0]


def test_covers_the_supported_rows(scored) -> None:
    rows, skipped = scored
    assert len(rows) + len(skipped) == 351
    # 261 GPU + 19 TPU (2026-12-01: + rows 71, 72, 135, LoRA 64, 154, Llama 3 35); + 36 of the 39 MoE
    # rows 2000 and up (2026-12-01, issue 22: Megatron's own FLOP count scores the TFLOP/s-only ones)
    assert len(rows) >= 320
    sources = {r.case.source_key for r in rows}
    assert {
        "narayanan2021_t1",
        "korthikanti2022_t5",
        "nemo_2407",
        "megatron_bridge_perf",
        "mosaic_llmfoundry",
        "bloom176b",
    } <= sources
    assert all(s.reason for s in skipped)


def _is_moe(row) -> bool:
    return bool(row.case.scenario["model"].get("experts"))


def test_median_and_p90_error(rows) -> None:
    """Dense runs (GPU and TPU; the MoE runs below have their own bar since the 39 MoE rows of
    2026-12-01 joined). History of the all-runs figure: 6.4% / 19.4% on 286 runs with the Mamba-2
    SSD kernels' own backward (2026-12-01, fourth session); 6.4% / 22.2% with the six Nemotron 3
    Nano rows; 6.0% / 19.6% on 280 runs with partial recompute; 6.0% / 21.0% with blocks costed
    per kind; 5.8% / 21.0% on 277 with the attention kernel as a job field; 8.7% / 20.5% on 243
    under constant GEMM efficiency."""
    median, p90 = summary([r.error for r in rows if not _is_moe(r)])
    assert median <= 0.065, f"median |error| {median:.1%}"
    assert p90 <= 0.20, f"p90 |error| {p90:.1%}"  # issue 11's bound


def test_dense_gpu_runs_hold_their_fidelity(rows) -> None:
    """Issue 22: the MoE work leaves dense GPU runs no worse than 5.0% / 13.0% by more than half
    a point."""
    dense = [r.error for r in rows if not _is_moe(r) and r.case.source_key != "maxtext_tpu"]
    median, p90 = summary(dense)
    assert median <= 0.055 and p90 <= 0.135, f"dense GPU median {median:.1%}, p90 {p90:.1%}"


def test_moe_gpu_runs(rows) -> None:
    """Issue 22's bar is >= 75 MoE GPU runs at median <= 10%, p90 <= 25%; this holds the figures
    reached (2026-12-02: MOE_MEDIAN / MOE_P90 over 76 runs; 15.4% / 40.5% before the routed output
    became the software's, job.moe_probs_applied; 17.4% / 40.5% before the ModelZoo's 4K rows
    took forced balance, benchmarks/moe_state.py; 21.4% / 40.9% before the per-expert
    launches were split by precision, cost/host.py; 21.7% / 41.5% before DeepEP's combine
    in the NVL72 domain was costed at its measured rate, 21.7% / 48.3% over 78 before the
    recompute modules; 18.9% / 57.7% over the 42 runs before
    the software state was modelled) so that a change that loses ground fails."""
    moe = [r.error for r in rows if _is_moe(r)]
    median, p90 = summary(moe)
    assert len(moe) >= 75
    assert median <= MOE_MEDIAN and p90 <= MOE_P90, f"MoE median {median:.1%}, p90 {p90:.1%}"


def test_beats_the_constant_mfu_estimate(rows) -> None:
    _, base = constant_mfu_errors(rows)
    assert summary([r.error for r in rows])[0] < summary(base)[0]


# TPU rows (MaxText on v4, v5e, v5p; tests/test_fidelity_tpu.py) predicted out of memory: none
# since the XLA memory terms (cost/memory.py; rows 665-670, 625, 626, 628, 642, 643 were, issue 14)
KNOWN_TPU_OOM_ROWS: set[int] = set()
# The Megatron-MoE-ModelZoo Qwen3-235B-A22B rows at 16K-128K tokens (2049-2056) fit since their
# --recompute-modules layernorm moe is modelled (job.recompute_modules, cost/recompute_modules.py);
# 2058 since its activation offloading (job.offload_modules) and, with 2059, since megatron-core's
# probabilities in the experts' activation keep no routed output (job.moe_probs_applied,
# rules/moe_probs.py; docs/memory.md Sec. 7)
KNOWN_MOE_OOM_ROWS: set[int] = set()


def test_no_published_run_is_predicted_out_of_memory(rows) -> None:
    """With the modelled runtime reserve (CUDA context, NCCL buffers, fragmentation on GPUs; none
    on TPUs; cost/memory.py). Rows 407 (torchtitan per-op checkpointing: selective if it fits,
    else full) and 378 (FSDP2: the fp32 shard is the master weight, 16 B/param) were predicted out
    of memory before 2026-12-01; eleven MaxText TPU rows until the XLA terms (issue 14)."""
    known = KNOWN_TPU_OOM_ROWS | KNOWN_MOE_OOM_ROWS
    oom = sorted(r.case.row_id for r in rows if not r.fits and r.case.row_id not in known)
    assert not oom, oom


def test_documented_mapping_rules_score_the_rows_they_were_written_for(rows) -> None:
    by_id = _by_id(rows)
    # Narayanan et al. 2021 Table 2: M = t * p given, t = 8 as in Table 1
    assert {k: by_id[18].case.scenario["plan"][k] for k in ("tp", "pp")} == {"tp": 8, "pp": 12}
    assert {k: by_id[22].case.scenario["plan"][k] for k in ("tp", "pp")} == {"tp": 8, "pp": 35}
    # torchtitan per-op selective checkpointing: selective does not fit, so full
    assert by_id[407].recompute == "full" and by_id[407].fits
    # TFLOP/s-only rows under a documented FLOP convention
    assert {32, 33, 34, 79, 81, 82} <= set(by_id)
    # where the router's probabilities apply, by the row's framework: megatron-core's experts in
    # their activation; NeMo AutoModel's own MoE layers (not read) auto, i.e. combine
    assert by_id[2058].case.scenario["job"]["moe_probs_applied"] == "activation"
    assert "moe_probs_applied" not in by_id[378].case.scenario["job"]
    # degrees that contradict the GPU count: the degrees define the run (rows 71-72: tp4 cp4|8 dp4)
    assert [by_id[i].case.scenario["cluster"]["gpus"] for i in (71, 72)] == [64, 128]
    # a MoE model without a preset, from its published config (Kimi K2: 384 experts, MLA, 64 heads)
    kimi = by_id[135].case.scenario["model"]
    assert (kimi["experts"], kimi["kv_lora_rank"], kimi["heads"], kimi["first_dense_layers"]) == (
        384,
        512,
        64,
        1,
    )
    # MosaicML ran FlashAttention-1 (flash-attn 1.x / its Triton port), NeMo before 24.09
    # FlashAttention-2 (Transformer Engine's backend order), later NVIDIA stacks the fused default
    assert by_id[479].case.scenario["job"]["attention_kernel"] == "flash1"
    assert by_id[79].case.scenario["job"]["attention_kernel"] == "flash2"  # NeMo 24.03.01
    assert by_id[71].case.scenario["job"].get("attention_kernel") is None  # NeMo 25.04 (B200)
    assert by_id[2055].case.scenario["job"].get("attention_kernel") is None  # Megatron-Core
    # Llama 3 405B: PaLM-style MFU, 7 + 14 x 8 + 7 layers, interleaved at the largest vp, ZeRO-2-like
    plan = by_id[35].case.scenario["plan"]
    assert (plan["layers_per_stage"][0], plan["layers_per_stage"][1], plan["vp"], plan["zero"]) == (
        7,
        8,
        7,
        2,
    )
    assert by_id[35].fits
    # LoRA rows: frozen base weights (no wgrad GEMMs, gradients, optimizer state or gradient sync)
    assert all(by_id[i].case.scenario["job"]["frozen_base"] for i in (64, 154))


def _by_id(rows) -> dict:
    return {r.case.row_id: r for r in rows}


# test_moe_gpu_runs: the figures reached (9.7% / 34.7%), rounded up; 9.8% / 34.7% before MLA's query /
# key / value copies were costed (docs/moe_physics.md Sec. 5.9); 9.6% / 34.7% before the
# Megatron-Bridge rows of 26.06+ took their 0.6.2 recipe's state (docs/moe_physics.md Sec. 5.8: the
# median rose with the gpt-oss MXFP8 rows, -1..0% -> -9..-11%, while three rows left the tail);
# 12.8% / 38.4% before the expert
# path's copies were costed and the host parameters refitted (docs/moe_physics.md Sec. 5.6);
# 15.6% / 40.5% before the runs'
# attention kernels were mapped and Hopper's fused attention refitted (docs/moe_physics.md Sec. 5.5);
# 15.4% / 40.5% while the routed
# output was counted on Megatron rows too, which put 2058 / 2059 out of memory and had six rows
# (125, 135, 219, 263, 300, 339) run a heavier recompute than the one that fits without it
MOE_MEDIAN, MOE_P90 = 0.10, 0.35
MOE_ROWS = (323, 332, 340, 346)  # Megatron-Bridge 25.11 Qwen3-30B-A3B: 8 GB300, 8 GB200, 8 B200, 16 H100
GB300_ROWS = (316, 317, 318, 323)  # Megatron-Bridge 25.11 on GB300: Llama 3 8B (x2), 70B, Qwen3-30B-A3B
LONG_CONTEXT_ROWS = (570, 581, 592, 603, 614)  # MosaicML MPT at seq 32K on 8 A100 40GB
CONTEXT_PARALLEL_ROWS = (58, 59)  # NeMo 24.07 Llama 3 8B / 70B with cp = 2


def test_moe_rows_are_covered(rows) -> None:
    by_id = _by_id(rows)
    assert set(MOE_ROWS) <= set(by_id), sorted(set(MOE_ROWS) - set(by_id))
    assert all(by_id[i].case.scenario["model"].get("experts") == 128 for i in MOE_ROWS)


def test_moe_rows_on_blackwell_within_20_percent(rows) -> None:
    """Qwen3-30B-A3B (128 experts of width 768, top-8) on 8 B200 and 8 GB200, pp = 1: the B200 run
    at micro-batch 1 is host-bound (16 local experts' launches per pass, cost/host.py), +2%; the
    GB200 run at micro-batch 4 -18% (its passes sit at the launch bound too, which hides GB200's
    slower MXFP8 GEMMs; 15% held before the host term saw the software state, -4% / +11%)."""
    by_id = _by_id(rows)
    errors = {i: by_id[i].error for i in (332, 340)}
    assert all(abs(e) <= 0.20 for e in errors.values()), errors


def test_rows_take_the_router_and_permute_fusion_of_their_software(rows) -> None:
    """Issue 22: the DeepSeek-V3 GB200 ladder fuses the permute at step 2 and the router at step 3
    (job.moe_permute_fusion, job.moe_router_fusion; benchmarks/moe_state.py); the Megatron-Bridge
    skill page's NCCL runs state moe_permute_fusion=false, its final recipe permute fusion; other
    Megatron runs take Bridge 0.6.2's recipes (both on)."""
    job = {i: r.case.scenario["job"] for i, r in _by_id(rows).items()}

    def fusions(i: int) -> tuple[bool, bool]:
        return job[i]["moe_router_fusion"], job[i]["moe_permute_fusion"]

    assert [fusions(i) for i in (2061, 2062, 2063, 2073)] == [
        (False, False),
        (False, True),
        (True, True),
        (True, True),
    ]
    assert fusions(2078) == (True, False) and fusions(2077) == (True, True)
    assert fusions(2043) == (True, True)  # the ModelZoo


GPT_OSS_ROWS = (87, 88, 126, 127, 175, 221, 265, 302, 322, 339)  # Megatron-Bridge gpt-oss-120b


def test_gpt_oss_rows_take_the_preset_s_attention_pattern_and_biases(rows) -> None:
    """Issue 22: a MoE row takes the rest of its architecture from the model's preset (its
    ``arch_source``: the gpt-oss HF config): the 128-token sliding window on every other layer,
    the attention sinks and the linear biases (whose fc2 bias Megatron adds per expert in fp32,
    graph/decoder_layers.py EXPERT_BIAS_ELEMS). Without them the MXFP8 runs were -12..-16%; with
    them within 8%, and -9..-11% since they run their Megatron-Bridge 0.6.2 recipe's HybridEP, EP
    overlap and full-iteration graphs (benchmarks/moe_state.py; docs/moe_physics.md Sec. 5.8)."""
    by_id = _by_id(rows)
    for i in GPT_OSS_ROWS:
        model = by_id[i].case.scenario["model"]
        assert (model["sliding_window"], model["full_attention_every"]) == (128, 2)
        assert model["linear_bias"] and model["attention_sinks"]
    mxfp8 = [i for i in GPT_OSS_ROWS if by_id[i].case.scenario["job"]["precision"] == "mxfp8"]
    assert mxfp8 == [87, 88, 126, 127]
    errors = {i: round(by_id[i].error, 3) for i in mxfp8}
    assert all(abs(e) <= 0.12 for e in errors.values()), errors


# Megatron-Bridge Qwen3-235B-A22B on 256 GB300, tp 1 pp 4 vp 12 ep 32, mb 2, MXFP8: containers
# 26.06-26.08 and 26.04-26.04.01, one layout
BRIDGE_RECIPE_ROWS, BRIDGE_BEFORE_ROWS = (91, 107, 133), (184, 230)


def test_bridge_rows_from_26_06_take_the_0_6_2_recipe_s_software_state(rows) -> None:
    """Megatron-Bridge performance rows of the 26.06 and later containers take the dispatcher, EP
    overlap and CUDA graphs of Megatron-Bridge 0.6.2's recipe with their model, GPU and layout
    (benchmarks/moe_state.py ``_BRIDGE_RECIPES``), listed as defaults; earlier rows of the same
    layout keep the defaults. The GB300 Qwen3-235B rows were +29..+32% (one layout measured 1.27x
    faster in 26.06 than in 26.04); with the recipe's HybridEP, EP overlap and full-iteration
    graphs +11..+14%, the 26.04 rows unchanged (+1..+2%). Row 125 (DeepSeek-V3 on B300, 26.06)
    runs another layout than its 0.6.2 recipe and keeps the defaults."""
    by_id = _by_id(rows)
    for i in BRIDGE_RECIPE_ROWS:
        plan = by_id[i].case.scenario["plan"]
        assert (plan["moe_dispatcher"], plan["moe_overlap"], plan["cuda_graphs"]) == (
            "hybridep",
            True,
            "full",
        )
        assert any("Megatron-Bridge 0.6.2" in d for d in by_id[i].case.defaults)
    for i in (*BRIDGE_BEFORE_ROWS, 125):
        plan = by_id[i].case.scenario["plan"]
        assert (plan["moe_dispatcher"], plan["moe_overlap"], plan["cuda_graphs"]) == (
            "alltoall",
            False,
            "partial",
        )
    errors = {i: round(by_id[i].error, 3) for i in BRIDGE_RECIPE_ROWS + BRIDGE_BEFORE_ROWS}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


# Megatron-Bridge Qwen3-235B-A22B on 256 B300, pp 8 vp 4 ep 8, mb 1, MXFP8: 26.02.01, 26.02
BRIDGE_B300_QWEN3_ROWS = (276, 313)


def test_bridge_b300_qwen3_rows_of_26_02_run_without_cuda_graphs(rows) -> None:
    """Issue 22 (sixth round): the 26.02 containers ship Megatron-Bridge 0.3.0 / 0.3.1 (assumed from
    the wheels' dates), whose Qwen3-235B-A22B base recipe sets ``cuda_graph_impl: none``, as does
    every 0.6.0 perf recipe of that model on B300 but the full-iteration MXFP8 one
    (benchmarks/moe_state.py ``_NO_GRAPHS``). With the Blackwell default (partial graphs) the two
    rows were -33 / -32%; their passes are launch-bound at micro-batch 1, and without graphs they
    are -12 / -11% (docs/moe_physics.md Sec. 5.11)."""
    by_id = _by_id(rows)
    for i in BRIDGE_B300_QWEN3_ROWS:
        assert by_id[i].case.scenario["plan"]["cuda_graphs"] == "none"
        assert any(d.startswith("cuda_graphs=none (Megatron-Bridge 0.3.") for d in by_id[i].case.defaults)
    errors = {i: round(by_id[i].error, 3) for i in BRIDGE_B300_QWEN3_ROWS}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


MODELZOO_4K_ROWS = (2043, 2044, 2045, 2047)  # Megatron-MoE-ModelZoo Qwen3-235B-A22B, 256 H100, 4K tokens


def test_modelzoo_rows_without_stated_routing_take_the_repository_s_forced_balance(rows) -> None:
    """The ModelZoo's 4K rows do not state their routing; every other Qwen3 table of that
    repository states forced balance (rows 2049-2060), so they take it, listed as a default
    (benchmarks/moe_state.py). Under the dropless 1.6x busiest rank they were +4..+40%
    (2026-12-02); forced, within 12%."""
    by_id = _by_id(rows)
    for i in MODELZOO_4K_ROWS:
        assert by_id[i].case.scenario["job"]["moe_routing"] == "force_balanced"
        assert any(d.startswith("moe_routing=force_balanced") for d in by_id[i].case.defaults)
    assert by_id[2049].case.scenario["job"]["moe_routing"] == "force_balanced"  # stated
    assert by_id[2050].case.scenario["job"]["moe_routing"] == "dropless"  # stated
    errors = {i: round(by_id[i].error, 3) for i in MODELZOO_4K_ROWS}
    assert all(abs(e) <= 0.12 for e in errors.values()), errors


BF16_LAUNCH_BOUND_ROWS = (2047, 2057)  # ModelZoo Qwen3-235B-A22B BF16, 16 local experts, mb 1: H100, GB200


def test_bf16_launch_bound_moe_rows_within_10_percent(rows) -> None:
    """Two BF16 runs whose MoE passes are host-bound in the model (16 local experts per rank at
    micro-batch 1, no or partial CUDA graphs): with the FP8 recipes' per-expert launch cost they
    were +29% / +23%; BF16 experts launch no quantisation kernels (cost/host.py
    EXPERT_LAUNCH_BF16_S), and both are within 5% (2026-12-02)."""
    by_id = _by_id(rows)
    assert all(by_id[i].case.scenario["job"]["precision"] == "bf16" for i in BF16_LAUNCH_BOUND_ROWS)
    errors = {i: round(by_id[i].error, 3) for i in BF16_LAUNCH_BOUND_ROWS}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors


def test_gb300_rows_predicted_from_blackwell_within_25_percent(rows) -> None:
    """GB300 (blackwell_ultra) is fitted since 2026-11-30 to its 13 scored B300/GB300 runs
    (hardware/data/efficiency.yaml); these four stay within the calibration set's p90 bar."""
    by_id = _by_id(rows)
    assert set(GB300_ROWS) <= set(by_id), sorted(set(GB300_ROWS) - set(by_id))
    assert all(by_id[i].case.scenario["cluster"]["preset"] == "gb300-nvl72" for i in GB300_ROWS)
    errors = {i: round(by_id[i].error, 3) for i in GB300_ROWS}
    assert all(abs(e) <= 0.25 for e in errors.values()), errors


def test_gpt_oss_bf16_miss_is_per_iteration_not_per_micro_batch(rows) -> None:
    """The gpt-oss-120b BF16 rows are predicted too fast by about the same seconds per step
    whatever their micro-batch count (docs/moe_physics.md Sec. 5.10): row 265 (GB200, seq 4K,
    mb 4: 5 micro-batches) and row 322 (GB300, seq 8K, mb 2: 10 micro-batches of the same 16,384
    tokens, the same experts per GPU and M per expert, the same BF16 peak) both miss by 1.8-1.9
    s. A per-token term (a BF16 GEMM, grouped-GEMM or attention-kernel rate) that closed row 265
    would add twice as much to row 322 and overshoot it by ~20%; this fails if one is fitted to
    these rows, so that the note is revisited. Bound: the two gaps within 0.5 s."""
    by_id = _by_id(rows)
    gap_s = {i: by_id[i].case.published_step_s - by_id[i].predicted_s for i in (265, 322)}
    assert all(by_id[i].case.scenario["job"]["precision"] == "bf16" for i in gap_s)
    assert abs(gap_s[322] - gap_s[265]) <= 0.5, f"gaps {gap_s}: update Sec. 5.10 and this bound"


def test_moe_h100_pipeline_row_stays_a_known_under_prediction(rows) -> None:
    """Row 346 (16 H100, pp=2 x vp=24, one MoE layer per virtual stage) is predicted about
    twice as fast as published; its cause is not modelled (benchmarks/fidelity.py notes). This
    bound fails if a model change moves it, so the note is revisited rather than forgotten."""
    error = _by_id(rows)[346].error
    assert -0.6 <= error <= -0.3, f"row 346 error {error:+.1%}: update the note and this bound"


def test_long_context_and_context_parallel_rows_within_15_percent(rows) -> None:
    by_id = _by_id(rows)
    ids = LONG_CONTEXT_ROWS + CONTEXT_PARALLEL_ROWS
    assert set(ids) <= set(by_id), sorted(set(ids) - set(by_id))
    assert all(by_id[i].case.scenario["job"]["seq_len"] >= 32768 for i in LONG_CONTEXT_ROWS)
    assert all(by_id[i].case.scenario["plan"]["cp"] == 2 for i in CONTEXT_PARALLEL_ROWS)
    errors = {i: round(by_id[i].error, 3) for i in ids}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


FOLDED_EP_ROWS = (188, 233, 277, 315, 374)  # Megatron-Bridge Qwen3-235B-A22B, 256 H100, tp2 ep32 dp16


def test_expert_parallel_wider_than_dp_is_folded_over_tp(scored) -> None:
    """Megatron's MoE parallel folding (benchmarks/data/README.md): ep 32 > dp 16 maps with etp = 1,
    the EP group over tp x dp; a row whose ep x pp exceeds its GPUs is skipped with the reason."""
    rows, skipped = scored
    by_id = _by_id(rows)
    assert set(FOLDED_EP_ROWS) <= set(by_id), sorted(set(FOLDED_EP_ROWS) - set(by_id))
    for i in FOLDED_EP_ROWS:
        plan = by_id[i].case.scenario["plan"]
        assert (plan["tp"], plan["dp"], plan["ep"], plan["etp"]) == (2, 16, 32, 1)
        assert by_id[i].fits
    # with the recipe's EP overlap (benchmarks/moe_state.py) the all-to-all over four nodes is
    # mostly hidden: -2% to +4% for the four force-balanced rows, -26% for the token-drop row 374
    # (capacity factor 1: no straggler); +10% to +70% when it was fully exposed
    assert all(abs(by_id[i].error) <= 0.3 for i in FOLDED_EP_ROWS), {
        i: by_id[i].error for i in FOLDED_EP_ROWS
    }
    reasons = {s.row_id: s.reason for s in skipped}
    assert "ep=64 x pp=8 exceed the 256 GPUs" in reasons[355]
    assert all("no sourced figures" in reasons[i] for i in (384, 390, 391, 392, 393, 394))


def _flop_counts(case) -> tuple[float, float, int]:
    """(Megatron-LM's count of one step, causal core attention halved; the same with the core
    attention in full; GPUs) of a MoE row's mapped model and job."""
    from paraplan.cost.megatron_flops import megatron_flops_per_step, padded_vocab_size

    import paraplan
    from paraplan.instance import build_instance

    inst = build_instance(paraplan.load_scenario(case.scenario))
    job, spec, plan = case.scenario["job"], inst.graph.spec, case.scenario["plan"]
    seq, batch = job["seq_len"], job["global_batch"]
    halved = megatron_flops_per_step(
        spec, seq_len=seq, global_batch=batch, padded_vocab=padded_vocab_size(spec.vocab, plan.get("tp", 1))
    )
    core = batch * seq * seq * 6 * spec.head_dim * spec.num_heads * spec.num_layers  # the halved core again
    return halved, halved + core, inst.cluster.num_devices


# rows publishing a step time (or tokens/s) beside their TFLOP/s per GPU: (row, TFLOP/s, the
# count-free figure, what it is); Megatron-MoE-ModelZoo Qwen3 readme at e8650517 (rows
# 2043-2047, 256 H100, 4K tokens), the Megatron-Core MoE report via the row's notes (2059)
COUNT_FREE = (
    (2043, 245.0, 19.7, "step_s"),
    (2044, 276.0, 17.6, "step_s"),
    (2045, 276.0, 17.6, "step_s"),
    (2047, 167.0, 29.0, "step_s"),
    (2059, 1150.0, 1556.0, "tokens_per_s_per_gpu"),
)


@pytest.mark.parametrize(("row_id", "tflops", "figure", "what"), COUNT_FREE)
def test_moe_tflops_rows_use_megatron_causal_halved_count(row_id, tflops, figure, what) -> None:
    """The Megatron-MoE-ModelZoo and Megatron-Core MoE report rows scored from their TFLOP/s per
    GPU (benchmarks/calibration_set.py: step = Megatron-LM's count / (TFLOP/s x GPUs)) count
    causal core attention halved, as Megatron-LM's ``num_floating_point_operations`` does: where
    a row also publishes a figure no FLOP count enters (its step time; row 2059's tokens/s), the
    TFLOP/s times GPUs times that step is the halved count within 1%, and 11-12% (4K tokens) or
    45% (131K) off the count with the core attention in full. So the ModelZoo's long-context rows
    (+13..+42%, docs/moe_physics.md Sec. 5) are not read under the wrong convention: it is the
    attention's speed."""
    from benchmarks.calibration_set import load_cases

    case = next(c for c in load_cases(kind="moe")[0] if c.row_id == row_id)
    halved, full, gpus = _flop_counts(case)
    job = case.scenario["job"]
    step_s = figure if what == "step_s" else job["global_batch"] * job["seq_len"] / (figure * gpus)
    implied = tflops * 1e12 * gpus * step_s
    assert implied / halved == pytest.approx(1.0, abs=0.01)
    assert implied / full < 0.9
    assert case.published_step_s == pytest.approx(step_s, rel=0.01)
