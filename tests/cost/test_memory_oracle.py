"""The allocated-memory formulas (cost/memory.py) against torch's FSDPMemTracker on CPU.

The oracle (docs/memory.md Sec. 4): a small Llama-shaped decoder (RMSNorm, GQA attention
through SDPA, SwiGLU MLP or top-k routed experts, untied head, fp32 cross entropy as torchtitan's
loss) wrapped as torchtitan wraps it (FSDP2 ``fully_shard`` per block, the embedding, and the final
norm with the head; bf16 parameters, fp32 reduce), over a fake process group of world size d, run
on CPU tensors for two training steps without zeroing gradients, so they stay allocated as the
persistent gradient shards paraplan counts. ``FSDPMemTracker`` gives the tensor peak of the second
step; the optimizer state is added by formula (Adam's two fp32 moments per local parameter, 8 B:
the tracker over-counts foreach Adam, memory.md), and the sum is compared with paraplan's
``peak_allocated_bytes`` of the same model and plan (zero 3, dp = d, job.cross_entropy upcast).

The model's kernels keep what fused GPU kernels keep, the accounting paraplan's layer graph uses:
RMSNorm keeps its input and an fp32 reciprocal RMS (Apex / Transformer Engine), SwiGLU its input
(Megatron's fused bias-SwiGLU), the output projection reads SDPA's output without a layout copy
(flash kernels write it (b, t, heads, d)). An eager torch module keeps more (the fp32 norm
intermediates and the transposed copy), which is a property of that module, not of the formulas.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import paraplan  # noqa: E402
from paraplan.instance import build_instance, fixed_plan  # noqa: E402

pytestmark = pytest.mark.torch

nn = torch.nn
F = torch.nn.functional


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any, w: Any) -> Any:
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, rstd)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        x, w, rstd = ctx.saved_tensors
        xh = x.float() * rstd
        gw = (g.float() * xh).sum(dim=tuple(range(g.dim() - 1))).to(w.dtype)
        gx = g.float() * w.float()
        gx = rstd * (gx - xh * (gx * xh).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        a, b = x.chunk(2, -1)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        a, b = x.chunk(2, -1)
        s = torch.sigmoid(a)
        return torch.cat([g * b * s * (1 + a * (1 - s)), g * a * s], -1)


class _OutProj(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, o: Any, w: Any) -> Any:
        ctx.save_for_backward(o, w)
        b, n, t, d = o.shape
        return o.transpose(1, 2).reshape(b, t, n * d) @ w.t()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        o, w = ctx.saved_tensors
        b, n, t, d = o.shape
        flat = o.transpose(1, 2).reshape(b * t, n * d)
        return (g @ w).reshape(b, t, n, d).transpose(1, 2), g.reshape(b * t, -1).t() @ flat


class RMSNorm(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: Any) -> Any:
        return _RMSNorm.apply(x, self.weight)


class Experts(nn.Module):
    """Top-k routed SwiGLU experts (dropless): router, permute, per-expert GEMMs, weighted sum."""

    def __init__(self, h: int, f: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(h, experts, bias=False)
        self.experts = experts
        # experts stacked along the rows (FSDP2 shards dim 0: E rows would pad when E < d)
        self.fc1 = nn.Parameter(torch.randn(experts * 2 * f, h) * 0.02)
        self.fc2 = nn.Parameter(torch.randn(experts * h, f) * 0.02)

    def forward(self, y: Any) -> Any:
        b, t, h = y.shape
        flat = y.reshape(b * t, h)
        experts = self.experts
        probs = torch.softmax(self.router(flat).float(), -1)
        # balanced routing (Megatron's --moe-router-force-load-balancing): token i's j-th choice
        # is expert (i + j) mod E, so every expert takes n k / E copies (static shapes)
        chosen = (torch.arange(b * t).unsqueeze(1) + torch.arange(self.top_k)) % experts
        weight = probs.gather(1, chosen)
        order = chosen.flatten().argsort()
        tokens = order // self.top_k
        counts = [b * t * self.top_k // experts] * experts
        x = flat.index_select(0, tokens)
        parts = x.split(counts)
        fc1, fc2 = self.fc1.chunk(experts), self.fc2.chunk(experts)
        up = torch.cat([p @ fc1[e].t() for e, p in enumerate(parts)])
        act = _SwiGLU.apply(up).split(counts)
        down = torch.cat([a @ fc2[e].t() for e, a in enumerate(act)])
        scaled = down * weight.flatten()[order].unsqueeze(-1).to(down.dtype)
        return torch.zeros_like(flat).index_add(0, tokens, scaled).view(b, t, h)


class Block(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, f: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.qkv = nn.Linear(h, (heads + 2 * kv) * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, h, bias=False)
        self.mlp: nn.Module | None = Experts(h, f, experts, top_k) if experts else None
        if not experts:
            self.fc1 = nn.Linear(h, 2 * f, bias=False)
            self.fc2 = nn.Linear(f, h, bias=False)

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        qkv = self.qkv(self.n1(x)).view(b, t, self.heads + 2 * self.kv, self.hd)
        q, k, v = qkv.split([self.heads, self.kv, self.kv], 2)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        x = x + _OutProj.apply(o, self.wo.weight)
        y = self.n2(x)
        if self.mlp is not None:
            return x + self.mlp(y)
        return x + self.fc2(_SwiGLU.apply(self.fc1(y)))


class Model(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.full = c["full"]
        h = c["h"]
        self.emb = nn.Embedding(c["V"], h)
        self.layers = nn.ModuleList(
            Block(h, c["heads"], c["kv"], c["f"], c["experts"], c["top_k"]) for _ in range(c["L"])
        )
        self.norm = RMSNorm(h)
        self.out = nn.Linear(h, c["V"], bias=False)

    def forward(self, tokens: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        x = self.emb(tokens)
        for block in self.layers:
            x = checkpoint(block, x, use_reentrant=False) if self.full else block(x)
        return self.out(self.norm(x))


def _tracked_bytes(c: dict[str, Any]) -> float:
    """FSDPMemTracker's peak of the second step plus Adam's moments by formula."""
    import torch.distributed as dist
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    d = c["d"]
    if dist.is_initialized() and dist.get_world_size() != d:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=d)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mesh = init_device_mesh("cpu", (d,))
    torch.manual_seed(0)
    fake = FakeTensorMode() if c["fake"] else None
    if fake is not None:
        fake.__enter__()
    model = Model(c)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model.emb, mesh=mesh, mp_policy=mp)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard([model.norm, model.out], mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    tokens = torch.randint(0, c["V"], (c["b"], c["t"]))
    labels = torch.randint(0, c["V"], (c["b"], c["t"]))
    tracker = FSDPMemTracker(model)
    with tracker:
        for step in range(2):
            if step == 1:
                tracker.reset_mod_stats()
            pred = model(tokens)
            loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
            del pred
            loss.backward()
    snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
    peak = snap["Total"]
    local = sum(p.to_local().numel() for p in model.parameters())
    if fake is not None:
        fake.__exit__(None, None, None)
    return float(peak) + 8.0 * local


def _predicted_bytes(c: dict[str, Any]) -> float:
    model: dict[str, Any] = {
        "name": "oracle",
        "layers": c["L"],
        "hidden": c["h"],
        "ffn_hidden": c["f"],
        "heads": c["heads"],
        "kv_heads": c["kv"],
        "vocab": c["V"],
        "activation": "swiglu",
        "norm": "rmsnorm",
    }
    if c["experts"]:
        model |= {"experts": c["experts"], "top_k": c["top_k"], "moe_ffn_hidden": c["f"]}
        job_routing = {"moe_routing": "force_balanced"}
    else:
        job_routing = {}
    scenario = {
        "model": model,
        "cluster": {"preset": "dgx-h100", "gpus": c["d"]},
        "job": {
            "seq_len": c["t"],
            "global_batch": c["b"] * c["d"],
            "cross_entropy": "upcast",
            **job_routing,
        },
        "plan": {
            "dp": c["d"],
            "tp": 1,
            "pp": 1,
            "micro_batch": c["b"],
            "zero": 3,
            "sequence_parallel": False,
            "recompute": "full" if c["full"] else "none",
        },
    }
    inst = build_instance(paraplan.load_scenario(scenario))
    return paraplan.api.evaluate_plan(inst, fixed_plan(inst)).predicted.peak_allocated_bytes


BASE: dict[str, Any] = {
    "L": 4,
    "h": 512,
    "heads": 8,
    "kv": 2,
    "f": 1536,
    "V": 2048,
    "b": 2,
    "t": 512,
    "d": 4,
    "full": False,
    "experts": 0,
    "top_k": 0,
    "fake": True,  # FakeTensorMode: the real CPU run's peak (docs/memory.md Sec. 4), 10x faster
}
CONFIGS = {
    "gqa": {},
    "gqa-full": {"full": True},
    "fsdp2": {"d": 2},
    "fsdp8": {"d": 8},
    "fsdp8-full": {"d": 8, "full": True},
    "fsdp2-full": {"d": 2, "full": True},
    "mha": {"kv": 8},
    "vocab8k": {"V": 8192},
    "vocab8k-full": {"V": 8192, "full": True},
    "long-seq": {"t": 1024, "b": 1},
    "deeper": {"L": 8},
    "deeper-full": {"L": 8, "full": True},
}
MOE_CONFIGS = {
    "moe": {"experts": 4, "top_k": 2, "f": 768},
    "moe-full": {"experts": 4, "top_k": 2, "f": 768, "full": True},
    "moe-fsdp8": {"experts": 4, "top_k": 2, "f": 768, "d": 8},
}


def test_fake_tensors_give_the_real_peak() -> None:
    """The oracle's shortcut: FakeTensorMode's peak is the real CPU run's (docs/memory.md Sec. 4)."""
    c = {**BASE, "L": 2, "V": 1024, "t": 256}
    assert _tracked_bytes(c) == _tracked_bytes({**c, "fake": False})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_allocated_peak_matches_the_fsdp_mem_tracker(name: str) -> None:
    c = {**BASE, **CONFIGS[name]}
    tracked, predicted = _tracked_bytes(c), _predicted_bytes(c)
    assert predicted == pytest.approx(tracked, rel=0.02), f"{name}: {predicted / tracked - 1:+.2%}"


@pytest.mark.parametrize("name", list(MOE_CONFIGS))
def test_moe_allocated_peak_bounds_the_fsdp_mem_tracker(name: str) -> None:
    """Routed experts: paraplan stays above the tracker, within 10%. The block-backward peak is
    taken with the whole working block and every gradient buffer of the block at once; with
    expert weights dominating the block, the tracker's peak falls while the experts' gradients
    are reduced, when part of the recomputed block is already freed (2026-12-01: +4.0% without
    recompute, +5.1% at FSDP 8, +8.7% with full recompute)."""
    c = {**BASE, **MOE_CONFIGS[name]}
    tracked, predicted = _tracked_bytes(c), _predicted_bytes(c)
    assert tracked <= predicted <= 1.10 * tracked, f"{name}: {predicted / tracked - 1:+.2%}"


class TitanBlock(nn.Module):
    """torchtitan's Llama block: separate wq, wk, wv, wo, w1, w3, w2 (the order op-level SAC counts)."""

    def __init__(self, h: int, heads: int, kv: int, f: int) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.wq = nn.Linear(h, heads * self.hd, bias=False)
        self.wk = nn.Linear(h, kv * self.hd, bias=False)
        self.wv = nn.Linear(h, kv * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, h, bias=False)
        self.w1 = nn.Linear(h, f, bias=False)
        self.w3 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.wk(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.wv(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


def _op_sac_context() -> Any:
    """torchtitan's op-level SAC policy (torchtitan/distributed/activation_checkpoint.py): save
    the attention outputs and every other aten.mm of the block's forward, recompute the rest."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {
        aten.mm.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
    }
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


@pytest.mark.parametrize(("heads", "kv"), [(8, 2), (8, 8), (4, 1)])
def test_torchtitan_op_sac_formula_matches_torch(heads: int, kv: int) -> None:
    """What a checkpointed block keeps under the op-level policy (MemTracker: the bytes the
    forward leaves allocated, its output aside, plus the block input it keeps alive) equals
    cost/recompute.py's torchtitan_op_sac_stored_bytes for the block's two layers."""
    from paraplan.cost.plan import Job, Layout, SelectivePolicy
    from paraplan.cost.recompute import torchtitan_op_sac_stored_bytes
    from paraplan.graph import build_graph
    from paraplan.graph.presets import from_fields
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.checkpoint import checkpoint

    h, f, b, t = 512, 1536, 2, 512
    torch.manual_seed(0)
    block = TitanBlock(h, heads, kv, f).bfloat16()
    x = torch.randn(b, t, h, dtype=torch.bfloat16, requires_grad=True)
    tracker = MemTracker()
    tracker.track_external(block, x)

    def total(snap: dict[Any, Any]) -> float:
        return float(sum(v["Total"] for v in snap.values()))

    with tracker:
        before = total(tracker.get_tracker_snapshot("current"))
        y = checkpoint(block, x, use_reentrant=False, context_fn=_op_sac_context)
        kept = total(tracker.get_tracker_snapshot("current")) - before - y.numel() * 2 + x.numel() * 2
    fields = {"layers": 1, "hidden": h, "ffn_hidden": f, "heads": heads, "kv_heads": kv, "vocab": 256}
    layers = build_graph(from_fields("titan", {**fields, "activation": "swiglu", "norm": "rmsnorm"}))
    plan = Layout(dp=1, tp=1, pp=1, micro_batch=b, zero=0, sequence_parallel=False)
    job = Job(seq_len=t, global_batch=b, selective_policy=SelectivePolicy.TORCHTITAN_OP)
    formula = sum(torchtitan_op_sac_stored_bytes(ly, plan, job) or 0.0 for ly in layers.block_layers(0))
    assert kept == pytest.approx(formula, rel=0.005)
