"""The memory terms of issue 24: allocated / reserved / fit, the allocator, the loss kernel,
ZeRO-3 under pipeline parallelism, torchtitan's op-level SAC (cost/memory.py, cost/recompute.py)."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from paraplan.cost.memory import unsharded_under_pp
from paraplan.cost.memory_loss import CHUNK_GRAD_BYTES, LOSS_PARALLEL_EXTRA_BYTES, chunked_loss_bytes
from paraplan.cost.memory_reserve import (
    ALLOCATOR_FIT_OVERHEAD,
    ALLOCATOR_OVERHEAD,
    STRANDED_ACTIVATION_SHARE,
    runtime_reserve_bytes,
)
from paraplan.cost.plan import Allocator, Job, Layout, SelectivePolicy
from paraplan.cost.recompute import torchtitan_op_sac_stored_bytes
from paraplan.graph import build_graph, preset

import paraplan
from paraplan.instance import build_instance, fixed_plan


def _scenario(job: dict[str, Any] | None = None, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"preset": "dgx-h100", "gpus": 8},
        "job": {"seq_len": 8192, "global_batch": 16, **(job or {})},
        "plan": {
            "dp": 8,
            "tp": 1,
            "pp": 1,
            "micro_batch": 1,
            "zero": 3,
            "sequence_parallel": False,
            "recompute": "full",
            **(plan or {}),
        },
    }


def _predicted(scenario: dict[str, Any]) -> Any:
    inst = build_instance(paraplan.load_scenario(scenario))
    return paraplan.api.evaluate_plan(inst, fixed_plan(inst)).predicted, inst


def test_allocated_reserved_and_peak_are_separate() -> None:
    p, inst = _predicted(_scenario())
    s = p.stages[0]
    # reserved may pass what must fit: near capacity the allocator frees its cache (cost/memory.py)
    assert s.allocated_bytes < s.reserved_bytes and s.allocated_bytes < s.total_bytes
    assert s.reserved_bytes == pytest.approx(s.allocated_bytes * (1 + ALLOCATOR_OVERHEAD[Allocator.DEFAULT]))
    context = runtime_reserve_bytes(fixed_plan(inst))
    fit = ALLOCATOR_FIT_OVERHEAD[Allocator.DEFAULT]
    assert s.total_bytes == pytest.approx(s.allocated_bytes * (1 + fit) + context)
    assert p.peak_memory_bytes == s.total_bytes
    assert (p.peak_allocated_bytes, p.peak_reserved_bytes) == (s.allocated_bytes, s.reserved_bytes)


def test_expandable_segments_lower_reserved_not_allocated() -> None:
    default, _ = _predicted(_scenario())
    expandable, _ = _predicted(_scenario({"allocator": "expandable_segments"}))
    assert expandable.peak_allocated_bytes == default.peak_allocated_bytes
    assert expandable.peak_reserved_bytes < default.peak_reserved_bytes


def test_variable_lengths_under_the_default_allocator_keep_room_for_stranded_blocks() -> None:
    """job.variable_seq_len with the default allocator: what must fit adds one more set of the
    stage's activations (STRANDED_ACTIVATION_SHARE); allocated and reserved as measured stay;
    expandable_segments maps pages and needs none."""
    fixed, _ = _predicted(_scenario())
    varying, _ = _predicted(_scenario({"variable_seq_len": True}))
    expandable, _ = _predicted(_scenario({"variable_seq_len": True, "allocator": "expandable_segments"}))
    plain_expandable, _ = _predicted(_scenario({"allocator": "expandable_segments"}))
    s, v = fixed.stages[0], varying.stages[0]
    assert v.allocated_bytes == pytest.approx(s.allocated_bytes)
    assert v.reserved_bytes == pytest.approx(s.reserved_bytes)
    assert v.total_bytes - s.total_bytes == pytest.approx(STRANDED_ACTIVATION_SHARE * s.activations_bytes)
    assert expandable.peak_memory_bytes == plain_expandable.peak_memory_bytes


def test_allocator_field_names_its_values() -> None:
    with pytest.raises(paraplan.ConfigError, match="allocator"):
        paraplan.load_scenario(_scenario({"allocator": "cudaMallocAsync"}))


def test_upcast_loss_doubles_the_logit_bytes() -> None:
    """12 B per logit against the fused kernel's 6 B; the 8B model's logits (128,256 x 8,192
    tokens) are the loss's peak, above a full-recompute block's backward."""
    fused, inst = _predicted(_scenario())
    upcast, _ = _predicted(_scenario({"cross_entropy": "upcast"}))
    logits = 8192 * inst.graph.spec.vocab
    delta = upcast.stages[0].activations_bytes - fused.stages[0].activations_bytes
    assert delta == pytest.approx(logits * 6)


def test_compiled_loss_keeps_the_bf16_logits_and_their_gradient() -> None:
    """cross_entropy compiled: 4 B per logit, 8 fewer than the eager upcast."""
    upcast, inst = _predicted(_scenario({"cross_entropy": "upcast"}))
    compiled, _ = _predicted(_scenario({"cross_entropy": "compiled"}))
    logits = 8192 * inst.graph.spec.vocab
    delta = upcast.stages[0].activations_bytes - compiled.stages[0].activations_bytes
    assert delta == pytest.approx(logits * 8)


def test_chunked_loss_holds_one_chunk_of_logits_and_an_fp32_hidden_gradient() -> None:
    """job.loss_chunks 2 (torchtitan's ChunkedLossWrapper): the upcast loss's 12 B per logit over
    half the tokens, plus the GradAccumulator's fp32 n x h; still the stage's peak here."""
    whole, inst = _predicted(_scenario({"cross_entropy": "upcast"}))
    halves, _ = _predicted(_scenario({"cross_entropy": "upcast", "loss_chunks": 2}))
    logits, hidden = 8192 * inst.graph.spec.vocab, 8192 * inst.graph.spec.hidden
    delta = whole.stages[0].activations_bytes - halves.stages[0].activations_bytes
    assert delta == pytest.approx(logits * 12 / 2 - CHUNK_GRAD_BYTES * hidden)
    assert halves.peak_allocated_bytes < whole.peak_allocated_bytes


def test_chunked_loss_bytes_by_formula() -> None:
    """Hidden states replicated over tp before chunking: the SP-sharded block input x tp."""
    layout = Layout(dp=1, tp=4, pp=1, zero=1, sequence_parallel=True)
    job = Job(seq_len=4096, global_batch=8, loss_chunks=8)
    block_input = 4096 * 1024 * 2 / 4  # n x h x 2 B / tp
    assert chunked_loss_bytes(8e9, block_input, layout, job) == pytest.approx(1e9 + 4 * 4096 * 1024)
    assert chunked_loss_bytes(8e9, block_input, layout, Job(seq_len=4096, global_batch=8)) == 8e9


@pytest.mark.parametrize(
    ("job", "rule"),
    [
        ({"loss_chunks": 0}, "greater than or equal to 1"),
        ({"loss_chunks": 4097}, "at most 4,096"),
        ({"loss_chunks": 2048, "seq_len": 1024}, "exceeds job.seq_len"),
    ],
)
def test_loss_chunks_field_names_its_rule(job: dict[str, int], rule: str) -> None:
    with pytest.raises(paraplan.ConfigError, match=rf"loss_chunks[\s\S]*{rule}"):
        paraplan.load_scenario(_scenario(job))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU backend needs a C++ compiler")
def test_inductor_compiles_the_upcast_loss_to_one_bf16_logit_buffer() -> None:
    """The oracle of LOGIT_BYTES[compiled]: torchtitan's loss (cross_entropy of the logits cast to
    fp32) compiled by inductor on CPU; the buffers its kernels allocate (the generated code's
    empty_strided calls) hold no n x vocab tensor in forward and one bf16 one (the logits'
    gradient) in backward, so the peak is the bf16 logits + their bf16 gradient, 4 B per logit."""
    torch = pytest.importorskip("torch")
    from torch._inductor.utils import run_and_get_code

    n, vocab = 128, 1000

    def loss_fn(pred: Any, labels: Any) -> Any:
        return torch.nn.functional.cross_entropy(
            pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum"
        )

    compiled = torch.compile(loss_fn)
    pred = torch.randn(2, n // 2, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (2, n // 2))

    def step() -> None:
        compiled(pred, labels).backward()

    _, codes = run_and_get_code(step)
    pattern = re.compile(r"empty_strided_\w+\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)")
    big = [[dtype for shape, dtype in pattern.findall(code) if f"{n}, {vocab}" in shape] for code in codes]
    assert big == [[], ["bfloat16"]]
    assert pred.grad is not None and pred.grad.dtype == torch.bfloat16


def test_zero3_under_pp_holds_unsharded_weights_and_gradients() -> None:
    """torchtitan's FSDP + PP: weights unsharded between micro-batches, gradients accumulated
    unsharded (cost/memory.py unsharded_under_pp)."""
    plan = {"dp": 4, "pp": 2}
    layout = Layout(dp=4, tp=1, pp=2, zero=3, sequence_parallel=False)
    assert unsharded_under_pp(layout, 4) and not unsharded_under_pp(layout, 1)
    assert not unsharded_under_pp(Layout(dp=4, tp=1, pp=2, zero=1, sequence_parallel=False), 4)
    p, inst = _predicted(_scenario(plan=plan))
    stage = p.stages[1]
    params = stage.optimizer_bytes / 8 * 4  # ZeRO-3 with fp32 grads: 8 B of moments / d per param
    assert stage.weights_bytes == pytest.approx(params * 4 / 4 + 2 * params)
    assert stage.grads_bytes == pytest.approx(params * 4 / 4 + 4 * params)


def test_torchtitan_op_sac_keeps_every_other_matmul() -> None:
    """Per token of a Llama 3.1 8B block: the block input h, wq's and SDPA's outputs (q each),
    wv's (kv), the logsumexp (2 heads, fp32), w1's (f) and w2's (h): 2 B each."""
    spec = preset("llama3.1-8b")
    attn, mlp = build_graph(spec).block_layers(0)
    plan = Layout(dp=8, tp=1, pp=1, micro_batch=1, zero=3, sequence_parallel=False)
    job = Job(seq_len=8192, global_batch=8, selective_policy=SelectivePolicy.TORCHTITAN_OP)
    h, f, kv = 4096, 14336, 1024
    assert torchtitan_op_sac_stored_bytes(attn, plan, job) == pytest.approx(8192 * (h + 2 * h + kv + 64) * 2)
    assert torchtitan_op_sac_stored_bytes(mlp, plan, job) == pytest.approx(8192 * (f + h) * 2)


def test_op_sac_keeps_less_than_megatron_selective_with_torchtitan_policy() -> None:
    megatron, _ = _predicted(_scenario(plan={"recompute": "selective"}))
    titan, _ = _predicted(_scenario({"selective_policy": "torchtitan_op"}, {"recompute": "selective"}))
    full, _ = _predicted(_scenario())
    assert full.peak_allocated_bytes < titan.peak_allocated_bytes < megatron.peak_allocated_bytes


def _loss_peak_bytes_per_logit(tp: int, parallel: bool) -> float:
    """MemTracker's peak over torchtitan's eager loss (cross_entropy of the logits cast to fp32) and
    its backward, per local logit, the bf16 leaf and its gradient included; with ``parallel`` the
    logits are a DTensor sharded over the vocabulary of a fake tp group, under loss_parallel."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != tp:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    n, local_vocab = 1024, 4096
    torch.manual_seed(0)
    leaf = torch.randn(n, local_vocab, dtype=torch.bfloat16, requires_grad=True)
    tracker = MemTracker()
    tracker.track_external(leaf)
    with tracker:
        logits: Any = leaf * 1.0
        if parallel:
            mesh = init_device_mesh("cpu", (tp,))
            logits = DTensor.from_local(logits, mesh, [Shard(1)], run_check=False)
            labels = torch.randint(0, local_vocab * tp, (n,))
            with loss_parallel():
                loss = torch.nn.functional.cross_entropy(logits.float(), labels)
                del logits
                loss.backward()
        else:
            labels = torch.randint(0, local_vocab, (n,))
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
            del logits
            loss.backward()
    peak = tracker.get_tracker_snapshot("peak")
    return sum(peak[device]["Total"] for device in peak) / (n * local_vocab)


@pytest.mark.torch
@pytest.mark.parametrize("tp", [2, 8])
def test_loss_parallel_keeps_four_more_bytes_per_logit_than_the_plain_upcast(tp: int) -> None:
    """The oracle of LOSS_PARALLEL_EXTRA_BYTES: torch's loss_parallel (torchtitan's eager loss
    over tp-sharded logits) against the same loss on a plain tensor, measured on CPU."""
    pytest.importorskip("torch")
    extra = _loss_peak_bytes_per_logit(tp, parallel=True) - _loss_peak_bytes_per_logit(tp, parallel=False)
    assert extra == pytest.approx(LOSS_PARALLEL_EXTRA_BYTES, abs=0.05)


def test_the_upcast_over_tp_sharded_logits_adds_the_loss_parallel_bytes() -> None:
    """Llama 3.1 8B at tp 2 and sp: the loss's peak grows by 4 B per local logit."""
    plan = {"dp": 4, "tp": 2, "sequence_parallel": True}
    fused, inst = _predicted(_scenario({"cross_entropy": "fused"}, plan))
    upcast, _ = _predicted(_scenario({"cross_entropy": "upcast"}, plan))
    local_logits = 8192 * inst.graph.spec.vocab / 2
    delta = upcast.stages[0].activations_bytes - fused.stages[0].activations_bytes
    assert delta == pytest.approx(local_logits * (12 - 6 + LOSS_PARALLEL_EXTRA_BYTES))
