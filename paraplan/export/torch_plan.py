"""PyTorch-native export target: render a parallel plan as a runnable torchrun script.

``render_torch_plan`` returns the text of a standalone ``torch_plan.py`` that trains
paraplan's tiny Llama-style reference model (``reference_model.py``, embedded verbatim)
with the plan's layout, using only public torch APIs (torch 2.13):

- ``init_device_mesh`` with dims ``("pp", "dp", "tp")``, TP innermost as in torchtitan;
- DTensor tensor parallelism via ``parallelize_module`` (Colwise/Rowwise, plus
  ``SequenceParallel`` on the norms when ``sequence_parallel``);
- ``zero`` 0: replicated parameters, gradients all-reduced (sum, then divide by dp)
  over the dp process group after backward, i.e. what DDP does, written out so that
  it composes with DTensor TP and pipelining; ``zero`` 1 and 2: FSDP2 ``fully_shard``
  with ``reshard_after_forward=False`` (FSDP2 always shards gradients and optimizer
  state, so ZeRO-1 is run as ZeRO-2); ``zero`` 3: ``fully_shard`` with
  ``reshard_after_forward=True``;
- ``torch.distributed.pipelining``: one ``PipelineStage`` per virtual stage,
  ``Schedule1F1B`` when vp == 1, ``ScheduleInterleaved1F1B`` when vp > 1;
- recompute ``full`` wraps every block with ``checkpoint_wrapper``; ``selective``
  wraps only the parameter-free attention core (RoPE + SDPA).

The script's ``--check`` flag compares loss, gradients and SGD-updated parameters with
a single-process full-batch reference in float64 (frameworks.md section 7).

The model dimensions follow the reference configuration (vocab 64, dim 32, 4 heads,
2 KV heads) and grow only when ``tp`` would not divide them (see ``_reference_dims``).

Size note: the generated script's runtime is the ``_RUNTIME_BODY`` string constant,
which is why this module is longer than the usual 400-line aim; it is kept in one
piece so the generated script reads top to bottom.
"""

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from paraplan.cost.plan import even_split

__all__ = ["render_torch_plan", "check_torch_plan"]

RECOMPUTE_CHOICES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
REFERENCE_VOCAB_SIZE = 64  # reference_model.ModelArgs default
REFERENCE_NUM_HEADS = 4  # reference_model.ModelArgs default
REFERENCE_HEAD_DIM = 8  # dim 32 / 4 heads
FFN_MULTIPLIER = 2  # reference ffn_dim 64 = 2 * dim 32
CHECK_TOLERANCE = 1e-6  # max relative diff allowed by --check (float64)
SGD_LR = 0.1  # fixed SGD learning rate of --check (frameworks.md section 7)
SEED = 1234
REFERENCE_MODEL_PATH = Path(__file__).with_name("reference_model.py")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """The plan knobs the script needs, as passed to ``render_torch_plan``."""

    dp: int
    tp: int
    pp: int
    vp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    zero: int
    sequence_parallel: bool
    recompute: str
    layers_per_stage: tuple[int, ...] | None
    num_layers: int

    @property
    def num_stages(self) -> int:
        """Pipeline stages in virtual-stage order (pp * vp)."""
        return self.pp * self.vp

    @property
    def num_devices(self) -> int:
        """Processes torchrun must start."""
        return self.dp * self.tp * self.pp

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step per dp rank: global_batch / (micro_batch * dp)."""
        return self.global_batch // (self.micro_batch * self.dp)


class _ModelDims(NamedTuple):
    """Reference-model shape used by the generated script."""

    vocab_size: int
    dim: int
    num_heads: int
    num_kv_heads: int
    ffn_dim: int


def check_positive_knobs(plan: _Plan) -> None:
    """Every degree, batch knob, seq_len and num_layers must be an int >= 1."""
    for knob in ("dp", "tp", "pp", "vp", "micro_batch", "global_batch", "seq_len", "num_layers"):
        value = getattr(plan, knob)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{knob}={value!r} must be an integer >= 1.")


def check_zero_and_recompute(plan: _Plan) -> None:
    """zero must be 0-3 and recompute one of none, selective, full."""
    if plan.zero not in ZERO_STAGES:
        raise ValueError(f"zero={plan.zero!r} must be one of 0, 1, 2, 3.")
    if plan.recompute not in RECOMPUTE_CHOICES:
        raise ValueError(
            f"recompute={plan.recompute!r} must be one of {', '.join(RECOMPUTE_CHOICES)}."
        )


def check_batch_divisible(plan: _Plan) -> None:
    """global_batch % (micro_batch * dp) == 0 (micro-batches per step is an int)."""
    per_step = plan.micro_batch * plan.dp
    if plan.global_batch % per_step:
        raise ValueError(
            f"global_batch={plan.global_batch} must be divisible by micro_batch * dp"
            f" = {plan.micro_batch} * {plan.dp} = {per_step}; choose global_batch as"
            f" a multiple of {per_step}."
        )


def check_virtual_stages(plan: _Plan) -> None:
    """vp > 1 (interleaving) needs pp > 1."""
    if plan.vp > 1 and plan.pp == 1:
        raise ValueError(
            f"vp={plan.vp} needs pp > 1: interleaved virtual stages are spread over"
            " pipeline ranks; set vp=1 or pp >= 2."
        )


def check_schedule_micro_batches(plan: _Plan) -> None:
    """1F1B: n_mb >= pp; Interleaved1F1B: n_mb % max(1, n_mb // pp) == 0."""
    if plan.pp == 1:
        return
    num_mb = plan.num_micro_batches
    if plan.vp == 1 and num_mb < plan.pp:
        raise ValueError(
            f"Schedule1F1B needs num_micro_batches >= number of stages, got "
            f"global_batch / (micro_batch * dp) = {num_mb} < pp={plan.pp}; "
            f"raise global_batch or lower micro_batch."
        )
    num_rounds = max(1, num_mb // plan.pp)
    if plan.vp > 1 and num_mb % num_rounds:
        raise ValueError(
            f"ScheduleInterleaved1F1B needs num_micro_batches % max(1, "
            f"num_micro_batches // pp) == 0, got {num_mb} % {num_rounds} != 0 "
            f"(pp={plan.pp}, vp={plan.vp}); use a multiple of pp micro-batches."
        )


def check_layers_per_stage(plan: _Plan) -> None:
    """layers_per_stage has pp*vp entries >= 1 summing to num_layers."""
    if plan.layers_per_stage is None:
        if plan.num_layers < plan.num_stages:
            raise ValueError(
                f"num_layers={plan.num_layers} must be >= pp * vp = "
                f"{plan.num_stages} so every pipeline stage gets a layer."
            )
        return
    counts = plan.layers_per_stage
    if len(counts) != plan.num_stages:
        raise ValueError(
            f"layers_per_stage has {len(counts)} entries but needs pp * vp = "
            f"{plan.num_stages} (one per virtual stage, in virtual-stage order)."
        )
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"layers_per_stage={list(counts)} must contain integers >= 1.")
    if sum(counts) != plan.num_layers:
        raise ValueError(
            f"layers_per_stage={list(counts)} sums to {sum(counts)} but must sum to"
            f" num_layers={plan.num_layers}."
        )


def check_sequence_parallel(plan: _Plan) -> None:
    """With sequence_parallel and tp > 1, tp must divide seq_len."""
    if plan.sequence_parallel and plan.tp > 1 and plan.seq_len % plan.tp:
        raise ValueError(
            f"sequence_parallel=True shards the sequence over tp: seq_len="
            f"{plan.seq_len} must be divisible by tp={plan.tp}."
        )


def _reference_dims(tp: int) -> _ModelDims:
    """Smallest reference shape that tp divides (the defaults for tp in 1, 2, 4).

    Heads and vocab are rounded up to multiples of tp; KV heads stay at half the
    heads (grouped-query attention) when tp divides that, else equal the heads.
    """
    num_heads = tp * math.ceil(REFERENCE_NUM_HEADS / tp)
    half = num_heads // 2
    num_kv_heads = half if half % tp == 0 else num_heads
    dim = num_heads * REFERENCE_HEAD_DIM
    vocab_size = tp * math.ceil(REFERENCE_VOCAB_SIZE / tp)
    return _ModelDims(vocab_size, dim, num_heads, num_kv_heads, FFN_MULTIPLIER * dim)


def _reference_source_parts() -> tuple[list[str], str]:
    """Import lines and body (no docstring, imports or ``__all__``) of the model file.

    The file is read as text, so rendering never imports torch.
    """
    source = REFERENCE_MODEL_PATH.read_text(encoding="utf-8")
    lines = source.splitlines()
    imports: list[str] = []
    skip: set[int] = set()
    for index, node in enumerate(ast.parse(source).body):
        is_docstring = index == 0 and isinstance(node, ast.Expr)
        is_import = isinstance(node, ast.Import | ast.ImportFrom)
        is_all = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        )
        if is_docstring or is_import or is_all:
            span = range(node.lineno - 1, node.end_lineno or node.lineno)
            skip.update(span)
            if is_import:
                imports.extend(lines[i] for i in span)
    body = "\n".join(line for i, line in enumerate(lines) if i not in skip)
    return imports, body.strip("\n")


def _render_header(plan: _Plan) -> str:
    """Script docstring with the plan and the torchrun command line."""
    return f'''"""Training steps of paraplan's reference model under one parallel plan.

Generated by paraplan.export.torch_plan. Plan: dp={plan.dp} tp={plan.tp} \
pp={plan.pp} vp={plan.vp}
zero={plan.zero} sequence_parallel={plan.sequence_parallel} \
recompute={plan.recompute} micro_batch={plan.micro_batch}
global_batch={plan.global_batch} seq_len={plan.seq_len} \
num_layers={plan.num_layers} num_micro_batches={plan.num_micro_batches}

Run:
    torchrun --standalone --nproc_per_node={plan.num_devices} torch_plan.py \\
        [--backend gloo|nccl] [--device cpu|cuda] [--check] [--steps N]

zero=0 all-reduces gradients over the dp group by hand (DDP semantics);
zero=1/2 use FSDP2 fully_shard(reshard_after_forward=False) (ZeRO-1 runs as
ZeRO-2); zero=3 uses fully_shard(reshard_after_forward=True). --check compares
loss, gradients and SGD-updated parameters with a single-process float64
reference on rank 0 and exits non-zero if a relative difference exceeds
CHECK_TOLERANCE.
"""'''


def _literal(value: object) -> str:
    """Python literal of a constant, with double-quoted strings (ruff format style)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _render_constants(plan: _Plan, layers: tuple[int, ...]) -> str:
    """Module-level constants of the generated script."""
    dims = _reference_dims(plan.tp)
    values = {
        "DP": plan.dp,
        "TP": plan.tp,
        "PP": plan.pp,
        "VP": plan.vp,
        "NUM_STAGES": plan.num_stages,
        "MICRO_BATCH": plan.micro_batch,
        "GLOBAL_BATCH": plan.global_batch,
        "NUM_MICRO_BATCHES": plan.num_micro_batches,
        "SEQ_LEN": plan.seq_len,
        "ZERO": plan.zero,
        "SEQUENCE_PARALLEL": plan.sequence_parallel,
        "RECOMPUTE": plan.recompute,
        "NUM_LAYERS": plan.num_layers,
        "LAYERS_PER_STAGE": list(layers),
        "VOCAB_SIZE": dims.vocab_size,
        "DIM": dims.dim,
        "NUM_HEADS": dims.num_heads,
        "NUM_KV_HEADS": dims.num_kv_heads,
        "FFN_DIM": dims.ffn_dim,
        "SEED": SEED,
        "SGD_LR": SGD_LR,
        "CHECK_TOLERANCE": CHECK_TOLERANCE,
    }
    lines = [f"{name} = {_literal(value)}" for name, value in values.items()]
    lines.append("DTYPE = torch.float64  # exact comparison with the reference")
    return "\n".join(lines)


_RUNTIME_IMPORTS = """\
import argparse
import copy
import json
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleInterleaved1F1B,
)
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)"""


_RUNTIME_BODY = '''\
CHECKPOINT_PREFIX = "_checkpoint_wrapped_module."


@dataclass
class Runtime:
    """Everything one rank needs to run training steps."""

    mesh: DeviceMesh
    device: torch.device
    stage_indices: list[int]
    parts: list[nn.Module]
    schedule: Schedule1F1B | ScheduleInterleaved1F1B | None
    optimizer: torch.optim.Optimizer


def parse_args() -> argparse.Namespace:
    """Command-line flags; backend and device default to what the host has."""
    parser = argparse.ArgumentParser(description="paraplan torch plan step")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.backend is None:
        args.backend = "nccl" if args.device == "cuda" else "gloo"
    return args


def init_distributed(args: argparse.Namespace) -> tuple[DeviceMesh, torch.device]:
    """Process group and the (pp, dp, tp) device mesh, TP innermost."""
    num_devices = int(os.environ.get("WORLD_SIZE", "1"))
    if num_devices != PP * DP * TP:
        sys.exit(f"launch with --nproc_per_node={PP * DP * TP}, got {num_devices}")
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    mesh = init_device_mesh(args.device, (PP, DP, TP), mesh_dim_names=("pp", "dp", "tp"))
    return mesh, device


def build_full_model(device: torch.device) -> Transformer:
    """The full reference model, identically initialised on every rank."""
    torch.manual_seed(SEED)
    args = ModelArgs(
        vocab_size=VOCAB_SIZE,
        dim=DIM,
        num_heads=NUM_HEADS,
        num_kv_heads=NUM_KV_HEADS,
        ffn_dim=FFN_DIM,
        num_layers=NUM_LAYERS,
    )
    return Transformer(args).to(device=device, dtype=DTYPE)


def make_stage(full: Transformer, stage_index: int) -> Transformer:
    """Copy of the model keeping only the modules of one (virtual) stage."""
    part = copy.deepcopy(full)
    start = sum(LAYERS_PER_STAGE[:stage_index])
    keep = {str(i) for i in range(start, start + LAYERS_PER_STAGE[stage_index])}
    for name in list(part.layers.keys()):
        if name not in keep:
            del part.layers[name]
    if stage_index != 0:
        part.tok_embeddings = None
    if stage_index != NUM_STAGES - 1:
        part.norm = None
        part.lm_head = None
    return part


def block_tp_plan(use_sp: bool) -> dict:
    """Megatron-style TP of one block; SP shards norms and residuals on seq."""
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1) if use_sp else None),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1) if use_sp else None),
    }
    if use_sp:
        plan["attention_norm"] = SequenceParallel()
        plan["ffn_norm"] = SequenceParallel()
        for name in ("attention", "feed_forward"):
            plan[name] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
    return plan


def apply_tp(part: Transformer, tp_mesh: DeviceMesh) -> None:
    """parallelize_module on the tp mesh (torchtitan's Llama plan)."""
    use_sp = SEQUENCE_PARALLEL
    seq = Shard(1) if use_sp else Replicate()
    plan = {}
    if part.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if part.norm is not None and use_sp:
        plan["norm"] = SequenceParallel()
    if part.lm_head is not None:
        plan["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    if plan:
        parallelize_module(part, tp_mesh, plan)
    for block in part.layers.values():
        parallelize_module(block, tp_mesh, block_tp_plan(use_sp))


def apply_recompute(part: Transformer) -> None:
    """full: checkpoint every block; selective: only the attention core."""
    for name, block in list(part.layers.items()):
        if RECOMPUTE == "full":
            part.layers[name] = checkpoint_wrapper(block)
        elif RECOMPUTE == "selective":
            block.attention.core = checkpoint_wrapper(block.attention.core)


def apply_fsdp(part: Transformer, dp_mesh: DeviceMesh) -> None:
    """FSDP2 per block and on the stage root; zero=3 reshards after forward."""
    reshard = ZERO == 3
    for block in part.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(part, mesh=dp_mesh, reshard_after_forward=reshard)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy over the micro-batch."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def build_runtime(mesh: DeviceMesh, device: torch.device) -> Runtime:
    """Stages of this rank with TP, recompute and FSDP applied, plus schedule."""
    full = build_full_model(device)
    pp_rank = mesh["pp"].get_local_rank()
    stage_indices = [pp_rank + k * PP for k in range(VP)]
    parts = []
    for stage_index in stage_indices:
        part = make_stage(full, stage_index)
        if TP > 1:
            apply_tp(part, mesh["tp"])
        apply_recompute(part)
        if ZERO > 0:
            apply_fsdp(part, mesh["dp"])
        parts.append(part)
    schedule = None
    if PP > 1:
        stages = [
            PipelineStage(part, index, NUM_STAGES, device, group=mesh["pp"].get_group())
            for part, index in zip(parts, stage_indices, strict=True)
        ]
        if VP == 1:
            schedule = Schedule1F1B(stages[0], NUM_MICRO_BATCHES, loss_fn=loss_fn)
        else:
            schedule = ScheduleInterleaved1F1B(stages, NUM_MICRO_BATCHES, loss_fn=loss_fn)
    params = [p for part in parts for p in part.parameters()]
    optimizer = torch.optim.SGD(params, lr=SGD_LR)
    return Runtime(mesh, device, stage_indices, parts, schedule, optimizer)


def make_batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic global batch of (inputs, labels) for one step."""
    gen = torch.Generator().manual_seed(SEED + 1 + step)
    tokens = torch.randint(0, VOCAB_SIZE, (GLOBAL_BATCH, SEQ_LEN + 1), generator=gen)
    inputs = tokens[:, :-1].contiguous().to(device)
    return inputs, tokens[:, 1:].contiguous().to(device)


def run_micro_batches(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """No pipeline: accumulate gradients over the micro-batches of this dp rank."""
    total = torch.zeros((), dtype=DTYPE, device=x.device)
    for mb in range(NUM_MICRO_BATCHES):
        rows = slice(mb * MICRO_BATCH, (mb + 1) * MICRO_BATCH)
        loss = loss_fn(model(x[rows]), y[rows]) / NUM_MICRO_BATCHES
        loss.backward()
        total += loss.detach()
    return total


def run_pipeline(rt: Runtime, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """Pipeline step; returns the mean micro-batch loss on the last stage's ranks."""
    is_first_stage_rank = 0 in rt.stage_indices
    is_last_stage_rank = NUM_STAGES - 1 in rt.stage_indices
    losses: list[torch.Tensor] = []
    args = (x,) if is_first_stage_rank else ()
    kwargs = {"target": y, "losses": losses} if is_last_stage_rank else {}
    rt.schedule.step(*args, **kwargs)
    if not is_last_stage_rank:
        return None
    return torch.stack([loss.detach() for loss in losses]).mean()


def all_reduce_grads(rt: Runtime) -> None:
    """zero=0: average gradients over the dp group (DDP semantics)."""
    group = rt.mesh["dp"].get_group()
    with torch.no_grad():
        for part in rt.parts:
            for param in part.parameters():
                if param.grad is None:
                    continue
                grad = param.grad
                local = grad.to_local() if isinstance(grad, DTensor) else grad
                dist.all_reduce(local, group=group)
                local.div_(DP)


def train_step(rt: Runtime, step: int) -> float:
    """One optimizer step; returns the global mean loss on every rank."""
    inputs, labels = make_batch(step, rt.device)
    local_batch = GLOBAL_BATCH // DP
    dp_rank = rt.mesh["dp"].get_local_rank()
    rows = slice(dp_rank * local_batch, (dp_rank + 1) * local_batch)
    rt.optimizer.zero_grad()
    if rt.schedule is None:
        local_loss = run_micro_batches(rt.parts[0], inputs[rows], labels[rows])
    else:
        local_loss = run_pipeline(rt, inputs[rows], labels[rows])
    if ZERO == 0 and DP > 1:
        all_reduce_grads(rt)
    rt.optimizer.step()
    summed = torch.zeros((), dtype=DTYPE, device=rt.device)
    if local_loss is not None:
        summed += local_loss
    dist.all_reduce(summed)
    return summed.item() / (DP * TP)


def to_full(tensor: torch.Tensor) -> torch.Tensor:
    """Full (unsharded) CPU copy of a tensor or DTensor (collective for DTensor)."""
    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().cpu().clone()


def gather_state(rt: Runtime) -> dict[str, tuple] | None:
    """Full grads and params of all stages on rank 0 (None elsewhere)."""
    state = {}
    with torch.no_grad():
        for part in rt.parts:
            for name, param in part.named_parameters():
                grad = None if param.grad is None else to_full(param.grad)
                state[name.replace(CHECKPOINT_PREFIX, "")] = (grad, to_full(param))
    is_sender = rt.mesh["dp"].get_local_rank() == 0 and rt.mesh["tp"].get_local_rank() == 0
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(state if is_sender else {}, gathered, dst=0)
    if gathered is None:
        return None
    return {name: pair for part_state in gathered for name, pair in part_state.items()}


def reference_run(steps: int, device: torch.device) -> tuple[list[float], dict]:
    """Single-process full-batch SGD run; returns losses and final grads/params."""
    model = build_full_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    losses, grads = [], {}
    for step in range(steps):
        optimizer.zero_grad()
        inputs, labels = make_batch(step, device)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        optimizer.step()
        losses.append(loss.item())
    state = {n: (grads[n], p.detach().cpu()) for n, p in model.named_parameters()}
    return losses, state


def rel_diff(value: torch.Tensor, ref: torch.Tensor) -> float:
    """max |value - ref| / max |ref| (tensor-wise relative difference)."""
    scale = ref.abs().max().clamp_min(torch.finfo(ref.dtype).tiny)
    return ((value - ref).abs().max() / scale).item()


def compare(losses: list[float], state: dict, device: torch.device) -> dict:
    """Check result (one JSON-able dict) of the distributed run vs the reference."""
    ref_losses, ref_state = reference_run(len(losses), device)
    loss_diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True))
    missing = sorted(set(ref_state) ^ set(state))
    grad_diff = param_diff = 0.0
    for name in set(ref_state) & set(state):
        grad, param = state[name]
        if grad is None:
            missing.append(name + ".grad")
            continue
        grad_diff = max(grad_diff, rel_diff(grad, ref_state[name][0]))
        param_diff = max(param_diff, rel_diff(param, ref_state[name][1]))
    is_ok = not missing and max(loss_diff, grad_diff, param_diff) <= CHECK_TOLERANCE
    return {
        "check": "ok" if is_ok else "fail",
        "loss": losses[-1],
        "ref_loss": ref_losses[-1],
        "loss_rel_diff": loss_diff,
        "max_rel_grad_diff": grad_diff,
        "max_rel_param_diff": param_diff,
        "num_params": len(ref_state),
        "mismatched_names": missing,
    }


def main() -> int:
    """Run --steps steps under the plan; with --check verify against a reference."""
    args = parse_args()
    mesh, device = init_distributed(args)
    rt = build_runtime(mesh, device)
    losses = [train_step(rt, step) for step in range(args.steps)]
    is_rank0 = dist.get_rank() == 0
    status = torch.zeros((), dtype=torch.int64, device=device)
    if args.check:
        state = gather_state(rt)
        if is_rank0:
            result = compare(losses, state, device)
            print(json.dumps(result), flush=True)
            status += result["check"] != "ok"
        dist.broadcast(status, src=0)
    elif is_rank0:
        for step, loss in enumerate(losses):
            print(json.dumps({"step": step, "loss": loss}), flush=True)
    dist.destroy_process_group()
    return int(status.item())


if __name__ == "__main__":
    sys.exit(main())
'''


def check_torch_plan(**knobs: object) -> None:
    """The checks ``render_torch_plan`` runs on the same keyword arguments, without rendering:
    ValueError naming the knob and the rule when the plan cannot run (cheap enough to run on
    every layout the planner considers)."""
    _checked_plan(**knobs)  # type: ignore[arg-type]


def _checked_plan(
    *,
    dp: int,
    tp: int,
    pp: int,
    vp: int,
    micro_batch: int,
    global_batch: int,
    seq_len: int,
    zero: int,
    sequence_parallel: bool,
    recompute: str,
    layers_per_stage: list[int] | None,
    num_layers: int,
) -> _Plan:
    plan = _Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        vp=vp,
        micro_batch=micro_batch,
        global_batch=global_batch,
        seq_len=seq_len,
        zero=zero,
        sequence_parallel=bool(sequence_parallel),
        recompute=str(recompute),
        layers_per_stage=None if layers_per_stage is None else tuple(layers_per_stage),
        num_layers=num_layers,
    )
    for check in (
        check_positive_knobs,
        check_zero_and_recompute,
        check_batch_divisible,
        check_virtual_stages,
        check_schedule_micro_batches,
        check_layers_per_stage,
        check_sequence_parallel,
    ):
        check(plan)
    return plan


def render_torch_plan(
    *,
    dp: int,
    tp: int,
    pp: int,
    vp: int,
    micro_batch: int,
    global_batch: int,
    seq_len: int,
    zero: int,
    sequence_parallel: bool,
    recompute: str,
    layers_per_stage: list[int] | None,
    num_layers: int,
) -> str:
    """Text of a standalone torchrun script that trains the reference model.

    Launch it with ``torchrun --standalone --nproc_per_node=dp*tp*pp``.
    ``layers_per_stage`` lists transformer layers per virtual stage in virtual-stage
    order (stage s runs on pp rank s % pp); None splits evenly, earlier stages taking
    the remainder. ``recompute`` is "none", "selective" or "full" (a ``StrEnum`` with
    those values works too). Raises ValueError naming the knob and the rule when the
    plan cannot run, e.g. when Schedule1F1B would get fewer micro-batches than stages.
    Never imports torch.
    """
    plan = _checked_plan(
        dp=dp, tp=tp, pp=pp, vp=vp, micro_batch=micro_batch, global_batch=global_batch,
        seq_len=seq_len, zero=zero, sequence_parallel=sequence_parallel, recompute=recompute,
        layers_per_stage=layers_per_stage, num_layers=num_layers,
    )
    layers = plan.layers_per_stage or even_split(plan.num_layers, plan.num_stages)
    model_imports, model_body = _reference_source_parts()
    runtime_imports = _RUNTIME_IMPORTS.splitlines()
    imports = [i for i in model_imports if i not in runtime_imports] + runtime_imports
    sections = [
        _render_header(plan),
        "\n".join(imports),
        _render_constants(plan, layers),
        "# --- reference model: paraplan/export/reference_model.py ---",
        model_body,
        "# --- distributed training step ---",
        _RUNTIME_BODY.rstrip("\n"),
    ]
    # One blank line after the docstring and the imports, two between code sections.
    return "\n\n".join(sections[:3]) + "\n\n\n" + "\n\n\n".join(sections[3:]) + "\n"
