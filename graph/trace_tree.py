"""Where a traced module keeps its parts, and what they hold: the layer stack, the token
embedding, each block's attention and MLP with its two norms, the final norm and the LM head
(tied or not), found on the module tree and the calls of the meta-device run
(graph/trace_run.py); per part its parameters and traced forward FLOPs. A block's own reading is
graph/trace_read.py; the comparison with the formulas graph/trace_check.py.
"""

from __future__ import annotations

from typing import Any

from paraplan.graph.trace_read import Block, Parts, mixers, norm_modules, read_block
from paraplan.graph.trace_run import Run, import_torch

__all__ = ["layer_stack", "embedding", "read_blocks", "read_ends", "traced_part_flops", "numel"]


def layer_stack(module: Any) -> tuple[str, list[Any]]:
    """Path and children of the nn.ModuleList / nn.Sequential of same-class blocks (with
    matrices) holding the most parameters; the outer one wins a tie."""
    torch = import_torch()
    best: tuple[int, str, list[Any]] | None = None
    for path, mod in module.named_modules():
        if not isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)) or len(mod) == 0:
            continue
        kids = list(mod)
        if len({type(k) for k in kids}) != 1 or not mixers(kids[0]):
            continue
        count = sum(p.numel() for p in mod.parameters())
        if best is None or count > best[0]:
            best = (count, path, kids)
    if best is None:
        raise ValueError(
            f"{type(module).__name__}: no layer stack found; paraplan reads the "
            "blocks from an nn.ModuleList (or nn.Sequential) of blocks of one class"
        )
    return best[1], best[2]


def embedding(module: Any, stack: str) -> tuple[str, Any]:
    """The token embedding: the largest nn.Embedding outside the layer stack."""
    torch = import_torch()
    found = [
        (n, m)
        for n, m in module.named_modules()
        if isinstance(m, torch.nn.Embedding) and not n.startswith(stack + ".")
    ]
    if not found:
        raise ValueError(
            f"{type(module).__name__}: no nn.Embedding (the token embedding) outside "
            f"the layer stack {stack!r}"
        )
    return max(found, key=lambda nm: nm[1].num_embeddings)


def _head(module: Any, run: Run, emb_weight: str, vocab: int, hidden: int) -> tuple[str, bool]:
    """Weight name of the LM head (the last projection to the vocabulary outside the blocks) and
    whether it is the embedding's weight (tied)."""
    heads = [
        c.weight for c in run.calls if c.kind == "linear" and not c.owner and c.shapes[0] == (vocab, hidden)
    ]
    if not heads or not heads[-1]:
        raise ValueError(
            f"{type(module).__name__}: no LM head found; paraplan needs a projection "
            f"from hidden={hidden} to the vocabulary ({vocab}) after the blocks"
        )
    return heads[-1], module.get_parameter(heads[-1]) is module.get_parameter(emb_weight)


def _norm_kind(norm: Any) -> str:
    """A norm with a bias has LayerNorm's 2 x hidden parameters; one without, RMSNorm's hidden."""
    return "layernorm" if getattr(norm, "bias", None) is not None else "rmsnorm"


def numel(mod: Any) -> int:
    return sum(p.numel() for p in mod.parameters())


def read_blocks(
    blocks: list[Any], where: list[str], run: Run, hidden: int, parts: Parts
) -> tuple[list[Block], set[str], dict[str, int]]:
    """Each block's attention and MLP, the norm kinds, and the parameters of the attention and
    MLP parts (each with one of the block's two norms, as build_graph counts them)."""
    read, kinds, params = [], set(), {"attention": 0, "mlp": 0}
    attention_owners = _attention_owners(run)
    for w, b in zip(where, blocks, strict=True):
        read.append(read_block(b, w, run, hidden, parts))
        norms = norm_modules(b, hidden)
        if len(norms) != 2:
            raise ValueError(
                f"{w}: {len(norms)} norms of width {hidden} "
                f"({', '.join(n for n, _ in norms) or 'none'}); paraplan models two "
                "per block (before attention and before the MLP)"
            )
        for n, m in norms:
            parts.read.update(f"{w}.{n}.{q}" for q, _ in m.named_parameters())
            kinds.add(_norm_kind(m))
        for (name, mod), (_, norm) in zip(
            sorted(mixers(b), key=lambda nm: f"{w}.{nm[0]}" not in attention_owners), norms, strict=True
        ):
            params["attention" if f"{w}.{name}" in attention_owners else "mlp"] += numel(mod) + numel(norm)
    return read, kinds, params


def read_ends(
    module: Any, run: Run, stack: str, emb_path: str, vocab: int, hidden: int, parts: Parts
) -> tuple[str, bool, dict[str, int]]:
    """The final norm (its kind) and the LM head (tied or not), with their parameters."""
    outside = [(n, m) for n, m in norm_modules(module, hidden) if not n.startswith(stack + ".")]
    if len(outside) != 1:
        raise ValueError(
            f"{type(module).__name__}: {len(outside)} norms outside the blocks "
            f"({', '.join(n for n, _ in outside) or 'none'}); paraplan models one "
            "final norm before the LM head"
        )
    final_path, final_norm = outside[0]
    parts.read.update(f"{final_path}.{q}" for q, _ in final_norm.named_parameters())
    head_weight, tied = _head(module, run, f"{emb_path}.weight", vocab, hidden)
    params = {"final_norm": numel(final_norm), "lm_head": 0}
    if not tied:
        head_path = head_weight.rsplit(".", 1)[0]
        head = module.get_submodule(head_path)
        params["lm_head"] = numel(head)
        parts.read.update(f"{head_path}.{q}" for q, _ in head.named_parameters())
        if getattr(head, "bias", None) is not None:
            parts.biases.append(f"{head_path}.bias")
    return _norm_kind(final_norm), tied, params


def traced_part_flops(run: Run, where: list[str], mixer_paths: list[str]) -> dict[str, int]:
    """Forward FLOPs per part: attention and MLP sub-modules, the rest of the blocks ("other"),
    and everything outside the blocks (the LM head; the embedding and norms do no GEMM)."""
    blocks = sum(run.forward_flops.get(w, 0) for w in where)  # the list itself never runs
    attention_owners = _attention_owners(run)
    attention = sum(run.forward_flops.get(p, 0) for p in attention_owners)
    mlp = sum(run.forward_flops.get(p, 0) for p in mixer_paths if p not in attention_owners)
    return {
        "embedding": 0,
        "attention": attention,
        "mlp": mlp,
        "final_norm": 0,
        "lm_head": run.forward_flops[""] - blocks,
        "other": blocks - attention - mlp,
    }


def _attention_owners(run: Run) -> set[str]:
    """Paths of the block sub-modules that ran an attention core."""
    s = run.seq_len
    return {
        c.owner
        for c in run.calls
        if c.owner and (c.kind == "attention" or c.kind == "matmul" and c.shapes[1][-2:] == (s, s))
    }
