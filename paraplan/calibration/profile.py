"""``paraplan profile --out DIR``: microbenchmark this machine with torch; records for calibrate.

Runs, on the first GPU (or the CPU when there is none):

- GEMMs ``(m, k) @ (k, n)`` over square shapes per precision (bf16; fp8 through
  ``torch._scaled_mm`` where the GPU has FP8 tensor cores);
- causal ``scaled_dot_product_attention`` over sequence lengths (bf16);
- an HBM copy (``dst.copy_(src)``) over buffer sizes;

and, with ``--processes N`` ranks (default: every GPU, NCCL; on a CPU 2 local processes, gloo),
all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over group sizes 2, 4, ... N
(operations a backend lacks are skipped and logged). Every measurement is one JSON line of
``DIR/records.jsonl``::

    {"kind": "gemm", "device": "NVIDIA H100 80GB HBM3", "accelerator": "h100", "smoke_test": false,
     "precision": "bf16", "m": 4096, "n": 4096, "k": 4096, "flops": 1.37e11, "time_s": 2.1e-4}

``accelerator`` is the catalog key the device name maps to (``None`` when it maps to none; edit it
to calibrate anyway). On a CPU every record has ``smoke_test: true``: the shapes are tiny, the
numbers only test the pipeline, and ``paraplan calibrate`` keeps them in a smoke-test entry that
is never applied to a cluster (hardware/calibration.py).

Formula (FLOPs per record): GEMM 2 m n k; causal attention forward 4 b h s^2 d / 2 (the cost
model's count, cost/compute.py); copy bytes 2 x buffer (read + write).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError

__all__ = ["run_profile", "accelerator_for_device", "Shapes", "CPU_SHAPES", "GPU_SHAPES"]

_DEVICE_KEYS = (  # substring of torch.cuda.get_device_name -> catalog accelerator key; first wins
    ("GB300", "gb300"),
    ("GB200", "gb200"),
    ("B200", "b200"),
    ("H200", "h200"),
    ("H800", "h800"),
    ("H100", "h100"),
    ("MI300X", "mi300x"),
)
CAUSAL_FRACTION = 0.5


class Shapes:
    """Sizes one profile run measures."""

    def __init__(
        self,
        *,
        gemm: tuple[int, ...],
        attention_seq: tuple[int, ...],
        heads: int,
        head_dim: int,
        copy_bytes: tuple[int, ...],
        message_bytes: tuple[int, ...],
        repeats: int,
    ) -> None:
        self.gemm, self.attention_seq, self.heads, self.head_dim = gemm, attention_seq, heads, head_dim
        self.copy_bytes, self.message_bytes, self.repeats = copy_bytes, message_bytes, repeats


CPU_SHAPES = Shapes(
    gemm=(64, 128, 256),
    attention_seq=(64, 128, 256),
    heads=2,
    head_dim=32,
    copy_bytes=(1 << 16, 1 << 20),
    message_bytes=(1 << 10, 1 << 16),
    repeats=3,
)
GPU_SHAPES = Shapes(
    gemm=(1024, 2048, 4096, 8192),
    attention_seq=(1024, 2048, 4096, 8192),
    heads=16,
    head_dim=128,
    copy_bytes=(1 << 26, 1 << 30),
    message_bytes=(1 << 16, 1 << 20, 1 << 24, 1 << 28),
    repeats=10,
)


def accelerator_for_device(name: str) -> str | None:
    """Catalog accelerator key of a torch device name (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    if "A100" in name:
        return "a100-80gb" if "80" in name else "a100-40gb"
    return next((key for token, key in _DEVICE_KEYS if token in name), None)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError("paraplan profile needs torch: pip install 'paraplan[torch]'") from None
    return torch


def _timer(torch: Any, device: Any, fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs after one warm-up (synchronised on GPUs)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _gemm_records(torch: Any, device: Any, shapes: Shapes, base: dict) -> list[dict]:
    out = []
    fp8 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)
    for n in shapes.gemm:
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        t = _timer(torch, device, lambda a=a, b=b: a @ b, shapes.repeats)
        out.append(
            {
                **base,
                "kind": "gemm",
                "precision": "bf16",
                "m": n,
                "n": n,
                "k": n,
                "flops": 2.0 * n**3,
                "time_s": t,
            }
        )
        if fp8:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
            one = torch.ones((), device=device)
            try:
                t = _timer(
                    torch,
                    device,
                    lambda a8=a8, b8=b8, one=one: torch._scaled_mm(
                        a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                    ),
                    shapes.repeats,
                )
            except (RuntimeError, TypeError):
                fp8 = False
                continue
            out.append(
                {
                    **base,
                    "kind": "gemm",
                    "precision": "fp8",
                    "m": n,
                    "n": n,
                    "k": n,
                    "flops": 2.0 * n**3,
                    "time_s": t,
                }
            )
    return out


def _attention_records(torch: Any, device: Any, shapes: Shapes, base: dict) -> list[dict]:
    out = []
    h, d = shapes.heads, shapes.head_dim
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for s in shapes.attention_seq:
        q, k, v = (torch.randn(1, h, s, d, device=device, dtype=torch.bfloat16) for _ in range(3))
        t = _timer(torch, device, lambda q=q, k=k, v=v: sdpa(q, k, v, is_causal=True), shapes.repeats)
        out.append(
            {
                **base,
                "kind": "attention",
                "precision": "bf16",
                "batch": 1,
                "heads": h,
                "seq_len": s,
                "head_dim": d,
                "flops": 4.0 * h * s * s * d * CAUSAL_FRACTION,
                "time_s": t,
            }
        )
    return out


def _copy_records(torch: Any, device: Any, shapes: Shapes, base: dict) -> list[dict]:
    out = []
    for num_bytes in shapes.copy_bytes:
        src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        t = _timer(torch, device, lambda src=src, dst=dst: dst.copy_(src), shapes.repeats)
        out.append(
            {**base, "kind": "hbm_copy", "buffer_bytes": num_bytes, "bytes": 2.0 * num_bytes, "time_s": t}
        )
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collective_ops(torch: Any, dist: Any) -> dict[str, Callable[[Any, Any, int], Any]]:
    """Operation name -> fn(tensor, group, group_size) running it once."""

    def all_gather(x: Any, g: Any, n: int) -> Any:
        return dist.all_gather([torch.empty_like(x) for _ in range(n)], x, group=g)

    def reduce_scatter(x: Any, g: Any, n: int) -> Any:
        return dist.reduce_scatter(torch.empty_like(x[: len(x) // n]), list(x.chunk(n)), group=g)

    def all_to_all(x: Any, g: Any, n: int) -> Any:
        return dist.all_to_all_single(torch.empty_like(x), x, group=g)

    return {
        "all_reduce": lambda x, g, n: dist.all_reduce(x, group=g),
        "all_gather": all_gather,
        "reduce_scatter": reduce_scatter,
        "all_to_all": all_to_all,
    }


def _collective_worker(rank: int, world: int, port: int, shapes: Shapes, base: dict, path: str) -> None:
    torch = _torch()
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = dist.get_backend()
    records, skipped = [], set()
    sizes = [n for n in (2, 4, 8, 16, 32, 64) if n <= world]
    groups = {n: dist.new_group(list(range(n))) for n in sizes}
    for n in sizes:
        for op, fn in _collective_ops(torch, dist).items():
            for num_bytes in shapes.message_bytes:
                x = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)
                if rank < n and op not in skipped:
                    try:
                        t = _timer(torch, device, lambda fn=fn, x=x, n=n: fn(x, groups[n], n), shapes.repeats)
                    except (RuntimeError, ValueError):
                        skipped.add(op)
                        continue
                    records.append(
                        {
                            **base,
                            "kind": "collective",
                            "op": op,
                            "group_size": n,
                            "bytes": num_bytes,
                            "backend": backend,
                            "time_s": t,
                        }
                    )
                dist.barrier()
    for num_bytes in shapes.message_bytes:  # send/recv between ranks 0 and 1
        x = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)

        def send_recv(x: Any = x) -> None:
            if rank == 0:
                dist.send(x, 1)
                dist.recv(x, 1)
            elif rank == 1:
                dist.recv(x, 0)
                dist.send(x, 0)

        t = _timer(torch, device, send_recv, shapes.repeats)
        records.append(
            {
                **base,
                "kind": "collective",
                "op": "send_recv",
                "group_size": 2,
                "bytes": num_bytes,
                "backend": backend,
                "time_s": t / 2,
            }
        )
    if rank == 0:
        Path(path).write_text(
            "".join(json.dumps(r) + "\n" for r in records)
            + "".join(json.dumps({"skipped": op, "backend": backend}) + "\n" for op in sorted(skipped))
        )
    dist.destroy_process_group()


def run_profile(out_dir: Path, *, processes: int | None = None, log: Callable[[str], None] = print) -> Path:
    """Run the microbenchmarks (module docstring); write and return ``out_dir/records.jsonl``."""
    torch = _torch()
    import torch.multiprocessing as mp

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    world = processes or (torch.cuda.device_count() if cuda else 2)
    if world < 2:
        log("one rank: collectives skipped (give --processes 2 or more)")
    shapes = GPU_SHAPES if cuda else CPU_SHAPES
    base = {
        "device": name,
        "accelerator": accelerator_for_device(name) if cuda else None,
        "smoke_test": not cuda,
        "torch": torch.__version__,
    }
    if not cuda:
        log(
            "paraplan profile: no GPU found; running tiny shapes on the CPU with gloo. "
            "CPU numbers are only a smoke test of the pipeline: they calibrate nothing."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for step, fn in (
        ("GEMMs", _gemm_records),
        ("attention", _attention_records),
        ("HBM copy", _copy_records),
    ):
        log(f"{name}: {step}")
        records += fn(torch, device, shapes, base)
    if world >= 2:
        log(f"{name}: collectives on {world} ranks ({'nccl' if cuda else 'gloo'})")
        part = out_dir / "collectives.rank0.jsonl"
        # fork on the CPU (torch already imported: seconds faster); CUDA needs fresh processes
        mp.start_processes(
            _collective_worker,
            args=(world, _free_port(), shapes, base, str(part)),
            nprocs=world,
            join=True,
            start_method="spawn" if cuda else "fork",
        )
        for line in part.read_text().splitlines():
            rec = json.loads(line)
            if "skipped" in rec:
                log(f"  {rec['skipped']}: not supported by {rec['backend']}, skipped")
            else:
                records.append(rec)
        part.unlink()
    path = out_dir / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
