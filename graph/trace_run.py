"""Run a ``torch.nn.Module`` once on the meta device and record what it does (no weights, no GPU).

What is recorded: forward (and backward) FLOPs per module from ``torch.utils.flop_counter``
(matrix multiplies and attention; element-wise work counts 0 there, as in paraplan's GEMM FLOPs),
and, inside each block's direct sub-modules, the calls that show the architecture (a
``TorchFunctionMode``): ``linear`` with its weight's name, the attention core
(``scaled_dot_product_attention`` or a product of two activations with a seq x seq result) with
its shapes, activation functions, ``topk`` (the routed experts per token) and dropout.
torch is imported inside the functions only: it is an optional extra (``paraplan[torch]``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "Run", "run_on_meta", "import_torch"]

# function __name__ -> recorded kind; torch.overrides hands the mode functions and Tensor methods
_KINDS = {
    "linear": "linear",
    "scaled_dot_product_attention": "attention",
    "matmul": "matmul",
    "__matmul__": "matmul",
    "bmm": "matmul",
    "einsum": "matmul",
    "silu": "silu",
    "sigmoid": "silu",
    "gelu": "gelu",
    "tanh": "gelu",
    "relu": "relu",
    "square": "square",
    "pow": "square",
    "__pow__": "square",
    "topk": "topk",
    "dropout": "dropout",
}


def import_torch() -> Any:
    """torch, or ImportError saying which extra installs it."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"tracing a torch.nn.Module needs torch: pip install 'paraplan[torch]' ({e})"
        ) from None
    return torch


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded call: ``owner`` the block sub-module it ran in (its path; "" outside the
    blocks), ``kind`` (see _KINDS), ``weight`` the parameter name of a linear's weight,
    ``shapes`` of its tensor arguments (an attention core: q, k), ``value`` topk's k or a
    dropout probability."""

    owner: str
    kind: str
    weight: str = ""
    shapes: tuple[tuple[int, ...], ...] = ()
    value: float = 0.0


@dataclass(slots=True)
class Run:
    """The result of one meta-device run: tokens (batch x seq_len), FLOPs per module path
    (forward; "" is the whole module), backward FLOPs (None when backward could not run) and
    the recorded calls in order."""

    batch: int
    seq_len: int
    forward_flops: dict[str, int]
    backward_flops: int | None
    calls: list[Call] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return self.batch * self.seq_len


def _token_ids(example_batch: Any) -> Any:
    """The token-id tensor of the batch: the tensor itself, ``input_ids`` or the first integer
    tensor of a dict, tuple or list; ValueError when there is none of shape [batch, seq_len]."""
    torch = import_torch()
    if isinstance(example_batch, torch.Tensor):
        items: list[Any] = [example_batch]
    elif isinstance(example_batch, dict):
        items = [example_batch.get("input_ids"), *example_batch.values()]
    elif isinstance(example_batch, (tuple, list)):
        items = list(example_batch)
    else:
        raise ValueError(
            f"example_batch must be a tensor of token ids [batch, seq_len], or a dict "
            f"or tuple of the module's inputs; got a {type(example_batch).__name__}"
        )
    for item in items:
        if isinstance(item, torch.Tensor) and not item.is_floating_point() and item.dim() == 2:
            return item
    raise ValueError(
        "example_batch holds no token ids: an integer tensor of shape "
        "[batch, seq_len] (as input_ids, or the first positional input)"
    )


def _to_meta(value: Any) -> Any:
    torch = import_torch()
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, dict):
        return {k: _to_meta(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to_meta(v) for v in value)
    return value


def _meta_state(module: Any) -> tuple[dict[str, Any], dict[int, str]]:
    """Meta copies of the module's parameters and buffers (tied tensors stay one tensor), by
    every name they have, and each copy's canonical parameter name by id. A module already on
    the meta device is used as it is (its own tensors)."""
    torch = import_torch()
    on_meta = all(t.device.type == "meta" for t in [*module.parameters(), *module.buffers()])
    copies: dict[int, Any] = {}
    state: dict[str, Any] = {}
    names: dict[int, str] = {}
    for name, t in [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]:
        if id(t) not in copies:
            copy = t
            if not on_meta:
                copy = torch.empty_like(t, device="meta")
                if isinstance(t, torch.nn.Parameter):
                    copy = torch.nn.Parameter(copy, requires_grad=t.requires_grad)
            copies[id(t)] = copy
            names[id(copy)] = name
        state[name] = copies[id(t)]
    return ({} if on_meta else state), names


def _output_tensor(out: Any) -> Any:
    """The module's first floating-point output (logits; HF: ``.logits``), or None."""
    torch = import_torch()
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    return next((t for t in (_output_tensor(v) for v in values) if t is not None), None)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape)


class _Owners:
    """Which hooked block sub-module is running (forward hooks push and pop its path)."""

    def __init__(self) -> None:
        self.stack: list[str] = []

    @property
    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    @contextmanager
    def hooked(self, parts: dict[str, Any]) -> Iterator[None]:
        def enter(path: str) -> Any:
            return lambda *_: self.stack.append(path)  # None: the inputs stay as they are

        def leave(*_: Any) -> None:  # a hook returning a value would replace the output
            self.stack.pop()

        handles = []
        for path, mod in parts.items():
            handles.append(mod.register_forward_pre_hook(enter(path)))
            handles.append(mod.register_forward_hook(leave))
        try:
            yield
        finally:
            for h in handles:
                h.remove()


def _recorder(owners: _Owners, names: dict[int, str], calls: list[Call]) -> Any:
    """A TorchFunctionMode appending a Call for each call of a kind in _KINDS."""
    from torch.overrides import TorchFunctionMode

    torch = import_torch()

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            kind = _KINDS.get(getattr(func, "__name__", ""))
            if kind is None or not owners.current and kind != "linear":
                return out
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if kind == "matmul" and len(tensors) == 2 and isinstance(out, torch.Tensor):
                calls.append(Call(owners.current, kind, shapes=(_shape(tensors[0]), _shape(out))))
            elif kind == "linear":
                weight = args[1] if len(args) > 1 else kwargs.get("weight")
                calls.append(Call(owners.current, kind, names.get(id(weight), ""), (_shape(weight),)))
            elif kind == "attention":
                p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
                calls.append(
                    Call(owners.current, kind, shapes=(_shape(args[0]), _shape(args[1])), value=float(p))
                )
            elif kind == "topk":
                k = kwargs.get("k", args[1] if len(args) > 1 else 0)
                calls.append(Call(owners.current, kind, value=float(k)))
            elif kind == "square":  # pow(x, 2) too; norms' x.pow(2) run outside the MLP
                if kwargs.get("exponent", args[1] if len(args) > 1 else 2) == 2:
                    calls.append(Call(owners.current, kind))
            elif kind == "dropout":
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                training = kwargs.get("training", args[2] if len(args) > 2 else True)
                calls.append(Call(owners.current, kind, value=float(p) if training else 0.0))
            else:
                calls.append(Call(owners.current, kind))
            return out

    return Recorder()


def _flops_by_module(counter: Any, root: str) -> dict[str, int]:
    """FlopCounterMode's per-module totals keyed by module path ("" = the whole module)."""
    out: dict[str, int] = {}
    for key, by_op in counter.get_flop_counts().items():
        if key == "Global":
            out[""] = int(sum(by_op.values()))
        elif key.startswith(root + "."):
            out[key[len(root) + 1 :]] = int(sum(by_op.values()))
    out.setdefault("", 0)
    return out


def run_on_meta(module: Any, example_batch: Any, parts: dict[str, Any]) -> Run:
    """Run ``module`` on ``example_batch`` on the meta device: forward under FlopCounterMode and
    the call recorder (``parts``: path -> block sub-module whose calls are recorded), then
    backward of the output's sum (``torch.autograd.grad``: no ``.grad`` is written).
    ValueError when the forward cannot run on the meta device (data-dependent control flow)."""
    torch = import_torch()
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"from_module needs a torch.nn.Module, not a {type(module).__name__}")
    ids = _token_ids(example_batch)
    batch, seq_len = (int(d) for d in ids.shape)
    if batch < 1 or seq_len < 1:
        raise ValueError(
            f"example_batch's token ids have shape {list(ids.shape)}; give at least "
            "one sequence of at least one token"
        )
    inputs = _to_meta(example_batch)
    state, names = _meta_state(module)
    owners, calls = _Owners(), list[Call]()
    args, kwargs = (
        ((), inputs)
        if isinstance(inputs, dict)
        else ((inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs), {})
    )
    root = type(module).__name__
    try:
        with (
            torch.enable_grad(),
            torch.device("meta"),
            owners.hooked(parts),
            FlopCounterMode(display=False) as forward,
        ):
            with _recorder(owners, names, calls):
                if state:
                    out = torch.func.functional_call(module, state, args, kwargs, tie_weights=False)
                else:
                    out = module(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as e:
        first = (str(e).splitlines() or [""])[0][:300]
        raise ValueError(
            f"the module's forward does not run on the meta device ({type(e).__name__}: {first}); "
            "tracing needs a forward without data-dependent control flow (e.g. no .item(), "
            "nonzero() or per-expert token lists; Hugging Face MoE: experts_implementation="
            "'batched_mm')"
        ) from None
    run = Run(batch, seq_len, _flops_by_module(forward, root), None, calls)
    logits = _output_tensor(out)
    params = [t for t in (state.values() if state else module.parameters()) if t.requires_grad]
    if logits is None or not logits.requires_grad or not params:
        warnings.warn("from_module: no differentiable output; checked the forward FLOPs only", stacklevel=3)
        return run
    try:
        with torch.device("meta"), FlopCounterMode(display=False) as backward:
            torch.autograd.grad(
                logits.float().sum(), list({id(p): p for p in params}.values()), allow_unused=True
            )
        run.backward_flops = int(backward.get_total_flops())
    except (RuntimeError, NotImplementedError) as e:
        warnings.warn(
            f"from_module: backward does not run on the meta device ({e}); checked the forward FLOPs only",
            stacklevel=3,
        )
    return run
