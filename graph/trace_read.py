"""Read a transformer's shape off a traced ``torch.nn.Module``: the layer stack, and per block
the attention (heads, kv heads, head dim) and the MLP (dense or mixture of experts).

Weight shapes give the widths; the recorded calls (graph/trace_run.py) give what shapes cannot:
heads and head dim (the attention core's q and k), which projections run before and after the
core, the activation function and the routed experts per token (``topk``). Everything a block
holds must be read as one of these parts; whatever is left is named in a ValueError, never
ignored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from paraplan.graph.spec import Activation
from paraplan.graph.trace_run import Call, Run, import_torch

__all__ = ["Attention", "Mlp", "Block", "read_block", "Parts", "norm_modules", "mixers"]

_WINDOW_ATTRS = ("sliding_window", "window_size", "attention_window", "local_window", "attention_chunk_size")
"""Attributes through which attention modules declare a local window (Hugging Face Mistral, Qwen2,
Gemma, gpt-oss use ``sliding_window``; Llama 4 ``attention_chunk_size``)."""


@dataclass(frozen=True, slots=True)
class Attention:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dropout: bool


@dataclass(frozen=True, slots=True)
class Mlp:
    """A dense MLP (``num_experts`` 0) or a MoE layer: ``ffn_hidden`` the (expert) width,
    ``shared_ffn_hidden`` the shared experts' width (0: none)."""

    ffn_hidden: int
    gated: bool
    activation: Activation
    num_experts: int = 0
    top_k: int = 0
    shared_ffn_hidden: int = 0


@dataclass(frozen=True, slots=True)
class Block:
    attention: Attention
    mlp: Mlp


@dataclass(slots=True)
class Parts:
    """Parameter names read so far, by role; biases separately (paraplan models none)."""

    read: set[str] = field(default_factory=set)
    biases: list[str] = field(default_factory=list)
    windows: bool = False  # local windows allowed: a config states them (trace_hf_config)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def norm_modules(module: Any, hidden: int) -> list[tuple[str, Any]]:
    """Sub-modules (not Linear/Embedding) whose own parameters are a weight (and bias) of
    ``hidden`` elements: RMSNorm / LayerNorm."""
    torch = import_torch()
    found = []
    for name, mod in module.named_modules():
        own = list(mod.parameters(recurse=False))
        if (
            own
            and not isinstance(mod, (torch.nn.Linear, torch.nn.Embedding))
            and all(p.dim() == 1 and p.numel() == hidden for p in own)
            and len(own) <= 2
        ):
            found.append((name, mod))
    return found


def mixers(block: Any) -> list[tuple[str, Any]]:
    """The block's direct sub-modules that hold a matrix (attention, MLP)."""
    return [(n, m) for n, m in block.named_children() if any(p.dim() >= 2 for p in m.parameters())]


def _linears(module: Any, prefix: str) -> dict[str, Any]:
    """Linear sub-modules by the path of their weight."""
    torch = import_torch()
    return {
        _path(prefix, _path(n, "weight")): m
        for n, m in module.named_modules()
        if isinstance(m, torch.nn.Linear)
    }


def _claim(parts: Parts, prefix: str, name: str, mod: Any) -> None:
    """Mark a Linear's weight (and bias) as read."""
    parts.read.add(_path(prefix, _path(name, "weight")))
    if getattr(mod, "bias", None) is not None:
        parts.read.add(_path(prefix, _path(name, "bias")))
        parts.biases.append(_path(prefix, _path(name, "bias")))


def _weighted(module: Any) -> str:
    """Sub-modules holding matrices, with their class and shapes (for an error message)."""
    return ", ".join(
        f"{n or 'itself'} ({type(m).__name__} "
        f"{[list(p.shape) for p in m.parameters(recurse=False) if p.dim() >= 2]})"
        for n, m in module.named_modules()
        if any(p.dim() >= 2 for p in m.parameters(recurse=False))
    )


def _check_window(module: Any, where: str) -> None:
    for name, mod in module.named_modules():
        for attr in _WINDOW_ATTRS:
            value = getattr(mod, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                raise ValueError(
                    f"{_path(where, name)}.{attr}={value}: a local (sliding-window or chunked) "
                    "attention, which paraplan's formulas do not model yet (they cost full causal "
                    "attention); refused rather than planned as a different model"
                )


def _core(calls: list[Call], where: str, run: Run) -> tuple[int, Call]:
    """Index and call of the attention core: scaled_dot_product_attention, or a product of two
    activations whose result is seq x seq (q @ k^T)."""
    s = run.seq_len
    for i, c in enumerate(calls):
        if c.kind == "attention" or c.kind == "matmul" and c.shapes[1][-2:] == (s, s):
            return i, c
    raise ValueError(
        f"{where}: no attention core found (scaled_dot_product_attention or "
        "q @ k^T) although it is one of the block's two weighted parts"
    )


def _heads(core: Call, run: Run, where: str) -> tuple[int, int]:
    """Query heads and head dim from the core's q: [batch, heads, seq, dim] or
    [batch * heads, seq, dim]."""
    q = core.shapes[0]
    if len(q) == 4 and q[0] == run.batch:
        return q[1], q[3]
    if len(q) == 3 and q[0] % run.batch == 0:
        return q[0] // run.batch, q[2]
    raise ValueError(
        f"{where}: the attention core's query has shape {list(q)}; paraplan reads "
        "[batch, heads, seq, head_dim] or [batch * heads, seq, head_dim]"
    )


def read_attention(mod: Any, where: str, run: Run, hidden: int, parts: Parts) -> Attention:
    """Heads, kv heads and head dim of an attention module: projections called before the core
    give q + 2 kv widths (q, k, v or fused qkv), exactly one after it maps q back to hidden."""
    if not parts.windows:
        _check_window(mod, where)
    calls = [c for c in run.calls if c.owner == where]
    index, core = _core(calls, where, run)
    heads, head_dim = _heads(core, run, where)
    q_dim = heads * head_dim
    linears = _linears(mod, where)
    called = Counter(c.weight for c in calls if c.kind == "linear")
    odd = [n for n in linears if called[n] != 1]
    if odd:
        raise ValueError(
            f"{where}: {', '.join(odd)} ran {called[odd[0]]} times in the forward; "
            "paraplan reads attention projections that run once each"
        )
    before = [linears[c.weight] for c in calls[:index] if c.kind == "linear"]
    after = [linears[c.weight] for c in calls[index:] if c.kind == "linear"]
    outs = sorted(m.out_features for m in before)
    kv_dim, rest = divmod(sum(outs) - q_dim, 2)
    shapes = ", ".join(
        f"{n} [{m.in_features} -> {m.out_features}]" for n, m in linears.items()
    ) or "no nn.Linear: " + _weighted(mod)
    if (
        rest
        or kv_dim <= 0
        or kv_dim % head_dim
        or any(m.in_features != hidden for m in before)
        or outs not in ([q_dim + 2 * kv_dim], sorted([q_dim, 2 * kv_dim]), sorted([q_dim, kv_dim, kv_dim]))
        or len(after) != 1
        or after[0].in_features != q_dim
        or after[0].out_features != hidden
    ):
        raise ValueError(
            f"{where}: an attention paraplan cannot read ({shapes}; {heads} heads of {head_dim}); "
            f"it reads q, k, v (or fused qkv) projections from hidden={hidden} before the core "
            "and one output projection after it (latent attention, MLA, is not traced yet)"
        )
    for name, m in mod.named_modules():
        if isinstance(m, import_torch().nn.Linear):
            _claim(parts, where, name, m)
    dropout = any(c.value > 0 for c in calls if c.kind in ("attention", "dropout"))
    return Attention(num_heads=heads, num_kv_heads=kv_dim // head_dim, head_dim=head_dim, dropout=dropout)


def _activation(calls: list[Call], gated: bool, where: str) -> Activation:
    """The MLP's activation from the functions it called: gated SiLU = SwiGLU; ungated GeLU,
    ReLU or squared ReLU. Anything else (GeGLU, an ungated SiLU) is refused by name."""
    kinds = [c.kind for c in calls]
    if "gelu" in kinds:
        name = "gelu"
    elif "silu" in kinds:
        name = "silu"
    elif "relu" in kinds:
        name = "relu2" if "square" in kinds[kinds.index("relu") :] else "relu"
    else:
        raise ValueError(f"{where}: no activation function recognised (silu, gelu, relu, relu2)")
    if gated and name == "silu":
        return Activation.SWIGLU
    if not gated and name in ("gelu", "relu", "relu2"):
        return Activation(name)
    raise ValueError(
        f"{where}: {'a gated' if gated else 'an ungated'} {name} MLP; paraplan models "
        "gated SiLU (SwiGLU) and ungated GeLU, ReLU, squared ReLU, so it would plan a "
        "different model"
    )


def _dense_shape(linears: list[Any], hidden: int, where: str) -> tuple[int, bool]:
    """(width, gated) of an MLP's Linears: gate + up + down, fused gate_up + down, or up + down
    (the down projection maps the width back to hidden; the last registered one is tried first)."""
    for down in reversed(linears):
        f, ups = down.in_features, [m for m in linears if m is not down]
        if down.out_features != hidden or any(m.in_features != hidden for m in ups):
            continue
        widths = sorted(m.out_features for m in ups)
        if widths in ([f, f], [2 * f], [f]):
            return f, widths != [f]
    shapes = ", ".join(f"[{m.in_features} -> {m.out_features}]" for m in linears)
    raise ValueError(
        f"{where}: an MLP paraplan cannot read ({shapes or 'no nn.Linear'}); it reads "
        f"gate + up + down, fused gate_up + down, or up + down projections around "
        f"hidden={hidden}"
    )


def _packed_experts(mod: Any, where: str, hidden: int) -> tuple[int, int, bool, list[str]] | None:
    """(experts, width, gated, names) of experts stored as 3-D parameters [experts, out, in] or
    [experts, in, out] (Hugging Face 5: gate_up_proj, down_proj); None when there are none."""
    packed = [(n, p) for n, p in mod.named_parameters() if p.dim() == 3]
    if not packed:
        return None
    experts = {p.shape[0] for _, p in packed}
    mats = [(n, tuple(int(d) for d in p.shape[1:])) for n, p in packed]
    downs = [(n, s) for n, s in mats if s[0] == hidden] + [(n, s) for n, s in mats if s[1] == hidden]
    if len(experts) != 1 or len(packed) not in (2, 3):
        raise ValueError(
            f"{where}: expert weights {[(n, list(p.shape)) for n, p in packed]} are "
            "not one set of gate/up and down matrices"
        )
    for down, (a, b) in downs:
        f = b if a == hidden else a
        ups = [s for n, s in mats if n != down]
        widths = sorted(x if y == hidden else y for x, y in ups)
        if widths in ([2 * f], [f, f], [f]):
            return experts.pop(), f, widths != [f], [_path(where, n) for n, _ in packed]
    raise ValueError(
        f"{where}: expert weights {[(n, list(p.shape)) for n, p in packed]} do not "
        f"map hidden={hidden} to a width and back"
    )


def _listed_experts(mod: Any, where: str, hidden: int) -> tuple[int, int, bool, list[str]] | None:
    """The same for experts held as an nn.ModuleList of identical MLPs."""
    torch = import_torch()
    for name, sub in mod.named_modules():
        kids = list(sub) if isinstance(sub, torch.nn.ModuleList) else []
        if len(kids) > 1 and len({type(k) for k in kids}) == 1 and _linears(kids[0], ""):
            f, gated = _dense_shape(
                list(_linears(kids[0], "").values()), hidden, _path(where, _path(name, "0"))
            )
            names = [_path(where, _path(name, n)) for n, _ in sub.named_parameters()]
            return len(kids), f, gated, names
    return None


def _router(mod: Any, where: str, experts: int, hidden: int, skip: set[str]) -> list[str]:
    """Names of the router's weight [experts, hidden] (a Linear or a bare parameter)."""
    found = [
        _path(where, n)
        for n, p in mod.named_parameters()
        if tuple(p.shape) == (experts, hidden) and _path(where, n) not in skip
    ]
    if len(found) != 1:
        raise ValueError(
            f"{where}: {experts} experts but {len(found)} router weights of shape "
            f"[{experts}, {hidden}]; paraplan reads one linear router"
        )
    return found


def read_mlp(mod: Any, where: str, run: Run, hidden: int, parts: Parts) -> Mlp:
    """A dense MLP from its Linears' shapes, or a MoE layer: experts (3-D parameters or a list of
    MLPs), the router, top-k from the ``topk`` call, shared experts from the Linears left."""
    calls = [c for c in run.calls if c.owner == where]
    experts = _packed_experts(mod, where, hidden) or _listed_experts(mod, where, hidden)
    linears = _linears(mod, where)
    if experts is None:
        f, gated = _dense_shape(list(linears.values()), hidden, where)
        for name in linears:
            _claim(parts, "", name[: -len(".weight")], linears[name])
        return Mlp(ffn_hidden=f, gated=gated, activation=_activation(calls, gated, where))
    num_experts, f, gated, names = experts
    parts.read.update(names)
    parts.biases.extend(n for n in names if n.rsplit(".", 1)[-1].endswith("bias"))
    router = _router(mod, where, num_experts, hidden, set(names))
    parts.read.update(router)
    owned = set(names) | set(router)
    shared = {n: m for n, m in linears.items() if n not in owned}
    top_k = [int(c.value) for c in calls if c.kind == "topk"]
    if not top_k:
        raise ValueError(
            f"{where}: {num_experts} experts but no topk call in the forward; "
            "paraplan reads the experts per token from torch.topk"
        )
    fs = 0
    if shared:
        fs, shared_gated = _dense_shape(list(shared.values()), hidden, f"{where} (shared experts)")
        if shared_gated != gated:
            raise ValueError(
                f"{where}: shared experts {'are' if shared_gated else 'are not'} "
                "gated but the routed experts differ; paraplan models one activation"
            )
        for name in shared:
            _claim(parts, "", name[: -len(".weight")], shared[name])
    for name in linears:  # a Linear router
        if name in router and linears[name].bias is not None:
            parts.read.add(name[: -len("weight")] + "bias")
            parts.biases.append(name[: -len("weight")] + "bias")
    return Mlp(
        ffn_hidden=f,
        gated=gated,
        activation=_activation(calls, gated, where),
        num_experts=num_experts,
        top_k=top_k[0],
        shared_ffn_hidden=fs,
    )


def read_block(block: Any, where: str, run: Run, hidden: int, parts: Parts) -> Block:
    """Attention + MLP of one block (plus two norms, read by the caller)."""
    weighted = mixers(block)
    if len(weighted) != 2:
        names = ", ".join(n for n, _ in weighted) or "none"
        raise ValueError(
            f"{where}: a block whose weighted sub-modules are {names}; paraplan reads "
            "a block as an attention module and an MLP module (plus norms): unknown "
            "block structure (state-space, cross-attention and vision blocks are not "
            "traced yet)"
        )
    cores = [
        n
        for n, _ in weighted
        if any(
            c.owner == _path(where, n)
            and (
                c.kind == "attention" or c.kind == "matmul" and c.shapes[1][-2:] == (run.seq_len, run.seq_len)
            )
            for c in run.calls
        )
    ]
    if len(cores) != 1:
        raise ValueError(
            f"{where}: {len(cores)} of its sub-modules ({', '.join(cores) or 'none'}) "
            "run an attention core; paraplan reads one attention and one MLP per block"
        )
    (attn_name, attn), (mlp_name, mlp) = sorted(weighted, key=lambda nm: nm[0] != cores[0])
    attention = read_attention(attn, _path(where, attn_name), run, hidden, parts)
    return Block(attention, read_mlp(mlp, _path(where, mlp_name), run, hidden, parts))
