"""The launch environment a plan's job needs, per framework: the CUDA caching allocator's mode.

``job.allocator: expandable_segments`` is PyTorch's ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
(PyTorch docs, "CUDA semantics", "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF": segments
are mapped and grown in place instead of allocated at their exact size, so blocks of varying size
fragment less). The variable is read once, when the allocator is first used, so it must be in the
environment before the process touches CUDA: an exported shell variable, or ``os.environ`` set
before ``import torch``.

Every PyTorch-based training framework reads it (megatron, nemo, deepspeed, torchtitan, torch).
DeepSpeed's launcher runs its workers with the environment of the launching shell plus the
``NAME=VALUE`` lines of a ``.deepspeed_env`` file, exported on every node (DeepSpeed docs,
"Getting Started", multi-node environment variables). MaxText runs on JAX, whose XLA client has
its own allocator (``XLA_PYTHON_CLIENT_*``): the PyTorch setting means nothing there, so
``maxtext`` refuses ``job.allocator: expandable_segments`` by name (``check_allocator``).
"""

from __future__ import annotations

from paraplan.cost.plan import Allocator, Job
from paraplan.rules.base import Draft, Refusal, RuleContext

__all__ = [
    "ALLOC_CONF_VAR",
    "ALLOC_CONF",
    "PYTORCH_FRAMEWORKS",
    "OFFLOAD_ENV",
    "allocator_env",
    "offload_env",
    "megatron_job_env",
    "check_allocator",
]

ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC_CONF = {Allocator.EXPANDABLE_SEGMENTS: "expandable_segments:True"}
"""job.allocator -> the variable's value (the default allocator needs none)."""
PYTORCH_FRAMEWORKS = ("megatron", "nemo", "deepspeed", "torchtitan", "torch")
"""The training frameworks whose processes run PyTorch's CUDA caching allocator."""


def allocator_env(job: Job) -> dict[str, str]:
    """``{PYTORCH_CUDA_ALLOC_CONF: value}`` for a job whose allocator needs it, else {}."""
    value = ALLOC_CONF.get(job.allocator)
    return {} if value is None else {ALLOC_CONF_VAR: value}


OFFLOAD_ENV = {"NVTE_CPU_OFFLOAD_V1": "1"}
"""What Megatron's fine-grained activation offloading needs with Transformer Engine >= 2.10
(megatron-core 0.19.2 training/arguments.py: "NVTE_CPU_OFFLOAD_V1 should be set to 1 to avoid
offloading weights"); harmless with older Transformer Engine, which does not read it."""


def offload_env(job: Job) -> dict[str, str]:
    """OFFLOAD_ENV for a job with ``job.offload_modules`` (cost/offload.py), else {}."""
    return dict(OFFLOAD_ENV) if job.offload_modules else {}


def megatron_job_env(job: Job) -> dict[str, str]:
    """The environment a Megatron-Core launch (Megatron-LM, NeMo / Megatron-Bridge) needs from the
    job: ``allocator_env`` and ``offload_env``."""
    return {**allocator_env(job), **offload_env(job)}


def check_allocator(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """MaxText (JAX / XLA) has no PyTorch caching allocator: job.allocator must stay default."""
    if ctx.job.allocator is Allocator.DEFAULT:
        return None
    return Refusal(
        f"job.allocator={ctx.job.allocator.value} is PyTorch's {ALLOC_CONF_VAR}; maxtext runs on "
        f"JAX, whose XLA allocator does not read it (run by: {', '.join(PYTORCH_FRAMEWORKS)}); "
        "use allocator: default"
    )
