"""The runtime of the script paraplan.export.torch_plan renders: its imports and the distributed
training step (mesh, DTensor TP, FSDP2, pipelining, recompute, the float64 --check), as text.

It is a string, not code paraplan runs: the script executes it under torchrun after the plan's
constants and the reference model (torch_plan.render_torch_plan puts them together), and
rendering never imports torch. Kept in one piece so the generated script reads top to bottom.
"""

__all__ = ["RUNTIME_IMPORTS", "RUNTIME_BODY"]

RUNTIME_IMPORTS = """\
import argparse
import copy
import json
import os
import sys

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


RUNTIME_BODY = '''\
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
