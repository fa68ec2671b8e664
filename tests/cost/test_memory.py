"""Memory: ZeRO's model-state splits and Korthikanti et al.'s activation formulas."""

from __future__ import annotations

import pytest
from paraplan.cost import Job, Layout, Plan, Recompute, state_bytes, stored_activation_bytes
from paraplan.cost.dp import moment_bytes
from paraplan.cost.plan import OptimizerMoments
from paraplan.cost.recompute import block_input_bytes
from paraplan.graph import Activation, ModelSpec, build_graph

# GPT-3-style block as Korthikanti et al. 2022 (arXiv:2205.05198) count it: GeLU, 4h MLP, MHA,
# dropout, no flash attention. Their Table 2 gives bytes per layer of s*b*h*(34 + 5 a s / h).
SPEC = ModelSpec(
    name="gpt",
    num_layers=1,
    hidden=12288,
    ffn_hidden=4 * 12288,
    num_heads=96,
    num_kv_heads=96,
    vocab=51200,
    activation=Activation.GELU,
    norm="layernorm",
    dropout=True,
)
S, B, H, A = 2048, 1, 12288, 96
JOB = Job(seq_len=S, global_batch=B, flash_attention=False)


def _block_bytes(tp: int, sp: bool, recompute: Recompute) -> float:
    plan = Plan(dp=1, tp=tp, pp=1, micro_batch=B, sequence_parallel=sp, layers_per_stage=(1,))
    layers = build_graph(SPEC).block_layers(0)
    return sum(stored_activation_bytes(ly, plan, JOB, recompute) for ly in layers)


def test_korthikanti_no_parallelism() -> None:
    assert _block_bytes(1, False, Recompute.NONE) == pytest.approx(S * B * H * (34 + 5 * A * S / H))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_parallel_without_sp(t: int) -> None:
    # s b h (10 + 24/t + 5 a s / (h t))
    expected = S * B * H * (10 + 24 / t + 5 * A * S / (H * t))
    assert _block_bytes(t, False, Recompute.NONE) == pytest.approx(expected)


@pytest.mark.parametrize("t", [2, 8])
def test_korthikanti_tensor_and_sequence_parallel(t: int) -> None:
    # s b h / t (34 + 5 a s / h)
    assert _block_bytes(t, True, Recompute.NONE) == pytest.approx(S * B * H / t * (34 + 5 * A * S / H))


def test_korthikanti_selective_recompute_drops_the_quadratic_term() -> None:
    # 34 s b h / t
    assert _block_bytes(8, True, Recompute.SELECTIVE) == pytest.approx(34 * S * B * H / 8)


def test_full_recompute_keeps_the_block_input() -> None:
    plan = Plan(dp=1, tp=8, pp=1, micro_batch=B, sequence_parallel=True, layers_per_stage=(1,))
    assert _block_bytes(8, True, Recompute.FULL) == 0.0
    assert block_input_bytes(H, plan, JOB) == pytest.approx(2 * S * B * H / 8)


def test_flash_attention_stores_no_scores() -> None:
    plan = Plan(dp=1, tp=1, pp=1, micro_batch=B, sequence_parallel=False, layers_per_stage=(1,))
    flash = Job(seq_len=S, global_batch=B, flash_attention=True)
    layers = build_graph(SPEC).block_layers(0)
    total = sum(stored_activation_bytes(ly, plan, flash, Recompute.NONE) for ly in layers)
    assert total == pytest.approx(34 * S * B * H)


# ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054) Figure 1: 7.5B parameters, 64 GPUs,
# K = 12 optimizer bytes, fp16 weights and gradients: 120 / 31.4 / 16.6 / 1.9 GB.
@pytest.mark.parametrize(("zero", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_one(zero: int, gb: float) -> None:
    total = state_bytes(7.5e9, zero, 64, grad_bytes_per_param=2).total
    assert total / 1e9 == pytest.approx(gb, abs=0.06)


def test_zero_three_shards_everything_over_dp() -> None:
    one = state_bytes(1e9, 3, 1)
    eight = state_bytes(1e9, 3, 8)
    assert eight.total == pytest.approx(one.total / 8)
    # fp32 gradients: the fp32 shard is the master weight (FSDP mixed precision): 4 + 4 + 8 B
    assert (one.weights, one.grads, one.optimizer) == pytest.approx((4e9, 4e9, 8e9))


def test_zero3_state_is_16_bytes_per_parameter_with_fp32_or_bf16_gradients() -> None:
    """FSDP (fp32 shard = master, fp32 grads, Adam moments) and DeepSpeed ZeRO-3 (bf16 weights and
    grads, K = 12) both hold 16 B/param; ZeRO-2 with fp32 grads still holds 2 + 4 + 12."""
    assert state_bytes(1e9, 3, 1).total == pytest.approx(16e9)
    assert state_bytes(1e9, 3, 1, grad_bytes_per_param=2).total == pytest.approx(16e9)
    assert state_bytes(1e9, 2, 1).total == pytest.approx(18e9)


def test_bf16_moments_save_four_bytes_per_parameter_of_optimizer_state() -> None:
    """job.optimizer_moments bf16 (Megatron's precision-aware optimizer): fp32 master (4 B) and
    two bf16 moments (2 + 2 B) in place of 12 B; under FSDP the moments alone (4 B in place of 8)."""
    assert moment_bytes(Job(seq_len=S, global_batch=B)) == 8
    bf16 = Job(seq_len=S, global_batch=B, optimizer_moments=OptimizerMoments.BF16)
    assert moment_bytes(bf16) == 4
    assert state_bytes(1e9, 1, 4, 2, moment_bytes(bf16)).optimizer == pytest.approx(8e9 / 4)
    assert state_bytes(1e9, 3, 4, 4, moment_bytes(bf16)).total == pytest.approx(12e9 / 4)
    assert state_bytes(1e9, 0, 1, 2, moment_bytes(bf16)).total == pytest.approx(12e9)


@pytest.mark.parametrize(
    ("pp", "vp", "mb", "zero"), [(4, 1, 1, 1), (8, 2, 2, 3), (16, 1, 1, 0), (3, 1, 4, 2), (12, 3, 1, 1)]
)
def test_layer_caps_of_all_stages_match_each_stage_model(pp: int, vp: int, mb: int, zero: int) -> None:
    """The solver's per-stage layer caps (one model for the middle stages) equal each stage's own
    memory model, for every recompute mode and a capacity near the boundary."""
    from paraplan.cost import stage_terms
    from paraplan.cost.memory import stage_memory_model
    from paraplan.cost.memory_layers import max_layers_per_stage
    from paraplan.graph import preset
    from paraplan.hardware import build_cluster

    graph = build_graph(preset("llama3-70b"))
    cluster = build_cluster("dgx-h100", nodes=pp)
    layout = Layout(dp=8, tp=1, pp=pp, vp=vp, micro_batch=mb, zero=zero)
    for variable in (False, True):  # variable_seq_len: the stranded blocks' share of activations
        job = Job(seq_len=4096, global_batch=8 * 64, variable_seq_len=variable)
        terms = stage_terms(graph, layout, job, cluster)
        for r in Recompute:
            for cap in (40e9, 80e9, 3e11):
                expected = [stage_memory_model(terms, s, r).max_layers(cap) for s in range(pp)]
                assert max_layers_per_stage(terms, r, cap) == expected


def test_runtime_reserve_counts_the_context_and_one_nccl_communicator_per_group() -> None:
    from paraplan.cost.memory_reserve import (
        CUDA_CONTEXT_BYTES,
        NCCL_BYTES_PER_COMMUNICATOR,
        num_communicators,
        runtime_reserve_bytes,
    )

    single = Plan(dp=1, tp=1, pp=1, layers_per_stage=(1,))
    three_d = Plan(dp=4, tp=8, pp=2, layers_per_stage=(1, 1))
    assert num_communicators(single) == 1  # the world communicator only
    assert num_communicators(three_d) == 4  # world + tp + dp + pp
    # CUDA context + NCCL buffers per communicator
    assert runtime_reserve_bytes(three_d) == pytest.approx(
        CUDA_CONTEXT_BYTES + 4 * NCCL_BYTES_PER_COMMUNICATOR
    )


def test_zero_gradient_reduce_is_exposed_whole_without_overlap() -> None:
    """ZeRO-2/3 per-micro-batch traffic of a block: the gradient reduce-scatter hides behind
    backward only when job.overlap_dp_comm (DeepSpeed overlap_comm); the prefetch always overlaps."""
    from paraplan.cost.block import zero_exposed_s

    gather, reduce, fwd, bwd = 0.3, 0.5, 0.2, 1.0
    # overlap: max(0, g - f) + max(0, g + r - b)
    assert zero_exposed_s(gather, reduce, fwd, bwd, True) == pytest.approx(0.1 + 0.0)
    # no overlap: max(0, g - f) + max(0, g - b) + r
    assert zero_exposed_s(gather, reduce, fwd, bwd, False) == pytest.approx(0.1 + 0.0 + 0.5)


@pytest.mark.parametrize(
    ("preset_name", "layout"),
    [
        ("deepseek-v3", Layout(dp=8, tp=2, pp=4, ep=8, vp=2, micro_batch=1, zero=1)),
        ("deepseek-v3", Layout(dp=16, tp=1, pp=8, ep=16, micro_batch=2, zero=3)),
        ("llama3-70b", Layout(dp=8, tp=2, pp=4, micro_batch=1, zero=3)),
        ("llama3-70b", Layout(dp=4, tp=4, pp=1, micro_batch=1, zero=2)),
    ],
)
def test_the_modes_of_one_memory_check_share_each_stages_mode_free_parts(
    preset_name: str, layout: Layout
) -> None:
    """cost/memory.py ``BaseMemo``: one stage's memory model asked in every recompute mode with
    the parts no mode changes kept once (solver/caps.py ``some_split_fits``, solver/tables.py)
    equals the model each mode builds alone, field by field, on every stage; a part kept in the
    memo that a mode changes fails here."""
    from paraplan.cost import stage_terms
    from paraplan.cost.memory import stage_memory_model
    from paraplan.cost.memory_layers import kind_bytes_per_stage
    from paraplan.graph import preset
    from paraplan.hardware import build_cluster

    graph = build_graph(preset(preset_name))
    cluster = build_cluster("dgx-h100", gpus=layout.dp * layout.tp * layout.pp)
    job = Job(seq_len=4096, global_batch=layout.dp * layout.micro_batch * 8)
    terms = stage_terms(graph, layout, job, cluster)
    memo: dict = {}
    for r in (Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE):
        assert kind_bytes_per_stage(terms, r, memo) == kind_bytes_per_stage(terms, r)
        for s in range(layout.pp):
            assert stage_memory_model(terms, s, r, memo) == stage_memory_model(terms, s, r)
    assert memo
