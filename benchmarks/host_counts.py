"""Experiment (docs/moe_physics.md Sec. 5.12, tried and not kept): a MoE block's host launches
counted by module and CUDA-graph scope in place of cost/host.py's lumped per-layer constant.

    python -m benchmarks.host_counts            # the Sec. 5.12 table (76 MoE rows, pairs)
    python -m benchmarks.host_counts --fit --grouped  # coordinate descent of the counted parameters
    python -m benchmarks.host_counts --crossval  # the fitted values, leave-one-source-out

The counted forward host time of one MoE block (backward twice it, the sync as cost/host.py):

    factor x (te_call x calls + grouped_call x 2 + TORCH_OP_LAUNCH_S x ops
              + local_experts x expert_launch_s)

``te_call`` a Transformer Engine module call's host time (BF16 and FP8 recipes apart),
``grouped_call`` the experts' GroupedLinear call's (fc1, fc2; by default as any TE call), ``factor``
a Grace host's over an x86 host's (hardware/data/serving.yaml ``grace_hosted``; prior the serving
fit's ``grace_host_factor`` 1.3). It replaces ``moe_layer_overhead_us`` and the unfused router /
permute term (``fusion_launch_s``), whose kernels are among the counted ops. The model in cost/
is unchanged: ``counted`` patches cost/block.py's launch functions for the duration of a run.

What one transformer block with routed experts launches from the host per forward pass is
counted by module and by CUDA-graph scope (megatron-core 0.19.2, Transformer Engine 2.x).

Two kinds of launch are counted apart, since their host cost differs:

- **Transformer Engine module calls** (``te``): each ``TENorm``, ``TELinear``,
  ``TELayerNormColumnParallelLinear``, ``TERowParallelLinear``, ``TEDotProductAttention`` and
  ``TEGroupedLinear`` forward is a Python module call (the recipe and quantizer bookkeeping, the
  autograd function) around its kernels (the input's quantisation under an FP8 recipe, the GEMM,
  the norm); one call, however many kernels.
- **Eager PyTorch ops** (``ops``): one launch each (cost/host.py TORCH_OP_LAUNCH_S).

The routed experts' per-expert GEMMs and quantisations (one cuBLAS GEMM per local expert,
Transformer Engine's ``general_grouped_gemm`` on Blackwell and Hopper alike, docs/moe_physics.md
Sec. 5.10) stay cost/host.py's ``expert_launch_s`` per local expert.

Counts, read in megatron-core 0.19.2 (models/gpt/gpt_layer_specs.py, the TE backend;
transformer/multi_latent_attention.py, attention.py, transformer_layer.py, moe/moe_layer.py,
moe/router.py, moe/token_dispatcher.py, moe/experts.py, moe/shared_experts.py), forward:

- attention, MLA with a q latent: input_layernorm (TENorm), linear_q_down_proj (TELinear),
  linear_q_up_proj and linear_kv_up_proj (TELayerNormColumnParallelLinear, the q / kv latent
  norms fused), linear_kv_down_proj (TELinear), core_attention (TEDotProductAttention),
  linear_proj (TERowParallelLinear): 7 calls; without a q latent linear_q_proj replaces the
  down / up pair: 6. Ops: the fused MLA RoPE for q and kv (2), the latent split's copy, the
  bias-dropout-add (about 4).
- attention, GQA / MHA: linear_qkv (TELayerNormColumnParallelLinear, the input norm fused),
  q_layernorm and k_layernorm (TENorm, with QK-norm), core_attention, linear_proj: 3 or 5 calls;
  ops: RoPE for q and k, the bias-dropout-add (3).
- router scope: pre_mlp_layernorm (TENorm, 1 call); the gating GEMM (``router_gating_linear``)
  and the fused top-k with its score function, the aux-loss scores and the loss (about 4 ops;
  unfused, cost/host.py ``router_unfused_kernels`` more); the shared expert when not overlapped
  (``moe_shared_expert_overlap`` false; transformer_layer.py captures it with the moe_router
  scope): linear_fc1 and linear_fc2 (2 calls), its activation and the add (2 ops).
- preprocess scope: the token counts per expert and the splits (sum, reshape, the counts'
  all-gather over EP, slices, the device-to-host copy: about 8 ops for the alltoall dispatcher,
  about 4 for DeepEP's / HybridEP's layout kernels).
- left to the host by every partial scope: the permute (fused: TE's row-id map and permute,
  about 5 ops; unfused cost/host.py ``permute_unfused_kernels`` more), the dispatch and combine
  (3 ops), the regroup by local expert and back (2), the experts' GroupedLinear fc1 and fc2
  (2 calls) and activation (1 op), the unpermute (1) and the two residual adds (2).

An approximate count from reading the code, not a profile. Backward is counted as twice the
forward (dgrad and wgrad), as cost/host.py does.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import paraplan.cost.block as block_module
import paraplan.cost.floor as floor_module
import paraplan.cost.host as host
import paraplan.cost.stage_build as stage_build_module
from paraplan.cost.host import (
    FusionLaunches,
    expert_launch_s,
    permute_unfused_kernels,
    router_unfused_kernels,
)
from paraplan.cost.plan import CudaGraphs, Job, Layout, MoEDispatcher, Precision
from paraplan.graph.spec import ModelSpec
from paraplan.hardware.serving import is_grace_hosted

__all__ = [
    "Launches",
    "HostCounts",
    "attention_launches",
    "router_launches",
    "preprocess_launches",
    "rest_launches",
    "block_launches",
    "counted_launch_s",
    "counted",
    "main",
]


class Launches(NamedTuple):
    """Module calls and eager ops one block's forward launches from the host: ``te`` Transformer
    Engine module calls but the experts' GroupedLinear, ``grouped`` the GroupedLinear calls (fc1,
    fc2; their per-expert GEMMs are ``expert_launch_s``'s), ``ops`` eager PyTorch ops."""

    te: int
    ops: int
    grouped: int = 0


def _total(*parts: Launches) -> Launches:
    return Launches(sum(p.te for p in parts), sum(p.ops for p in parts), sum(p.grouped for p in parts))


def attention_launches(spec: ModelSpec) -> Launches:
    """The attention side's calls and ops (module docstring)."""
    if spec.is_mla:
        return Launches(7 if spec.q_lora_rank > 0 else 6, 4)
    return Launches(5 if spec.qk_norm else 3, 3)


def router_launches(spec: ModelSpec, job: Job, router_unfused_ops: int) -> Launches:
    """The router scope: the pre-MLP norm, gating and top-k, the shared expert (module docstring)."""
    shared = spec.num_shared_experts > 0 or spec.shared_ffn_hidden > 0
    ops = 4 + (0 if job.moe_router_fusion else router_unfused_ops)
    return Launches(1 + (2 if shared else 0), ops + (2 if shared else 0))


def preprocess_launches(dispatcher: MoEDispatcher) -> Launches:
    """The preprocess scope: token counts and splits (module docstring)."""
    return Launches(0, 8 if dispatcher in (MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER) else 4)


def rest_launches(job: Job, permute_unfused_ops: int) -> Launches:
    """What no partial scope captures: permute, dispatch, experts' calls, unpermute (module docstring)."""
    return Launches(0, 5 + 3 + 2 + 1 + 1 + 2 + (0 if job.moe_permute_fusion else permute_unfused_ops), 2)


def block_launches(
    spec: ModelSpec,
    job: Job,
    dispatcher: MoEDispatcher,
    graphs: CudaGraphs,
    router_unfused_ops: int,
    permute_unfused_ops: int,
) -> Launches:
    """Launches left to the host per block forward under ``graphs``: all with none; partial
    (attn, moe_router, moe_preprocess scopes) leaves the rest; full none."""
    if graphs is CudaGraphs.FULL:
        return Launches(0, 0)
    rest = rest_launches(job, permute_unfused_ops)
    if graphs is CudaGraphs.PARTIAL:
        return rest
    return _total(
        attention_launches(spec),
        router_launches(spec, job, router_unfused_ops),
        preprocess_launches(dispatcher),
        rest,
    )


@dataclass(frozen=True)
class HostCounts:
    """The counted model's parameters (us; ``grace_factor`` a ratio). Defaults: the point that
    keeps the most one-setting pairs (Sec. 5.12)."""

    te_call_us: float = 200.0
    te_call_fp8_us: float = 200.0
    grace_factor: float = 1.15
    expert_launch_us: float = 160.0
    expert_launch_bf16_us: float = 80.0
    sync_us: float = 200.0
    grouped_call_us: float | None = None  # a GroupedLinear call; None: as any TE call


def counted_launch_s(
    spec: ModelSpec, job: Job, plan: Layout, local_experts: int, accel_key: str, top_k: int, p: HostCounts
) -> float:
    """Host time of one MoE block's forward launches, counted (module docstring). Units: seconds."""
    if plan.cuda_graphs is CudaGraphs.FULL:
        return 0.0
    counts = block_launches(
        spec,
        job,
        plan.moe_dispatcher,
        plan.cuda_graphs,
        router_unfused_kernels(spec.router, top_k)[0],
        permute_unfused_kernels()[0],
    )
    bf16 = job.precision in (Precision.BF16, Precision.FP16)
    te_s = (p.te_call_us if bf16 else p.te_call_fp8_us) * 1e-6
    grouped_s = te_s if p.grouped_call_us is None else p.grouped_call_us * 1e-6
    factor = p.grace_factor if is_grace_hosted(accel_key) else 1.0
    return factor * (
        te_s * counts.te
        + grouped_s * counts.grouped
        + host.TORCH_OP_LAUNCH_S * counts.ops
        + local_experts * expert_launch_s(job.precision)
    )


@contextmanager
def counted(p: HostCounts) -> Iterator[None]:
    """Evaluate with the counted launches: cost/block.py's ``moe_launch_s`` answers the counted
    forward time of the block being built (its graph, job and cluster taken from ``block_work``'s
    arguments), ``fusion_launch_s`` nothing (its kernels are counted ops); the expert launches and
    the sync take ``p``'s values."""
    current: dict[str, Any] = {}
    original_work = block_module.block_work

    def work(graph: Any, index: int, plan: Layout, job: Job, cluster: Any) -> Any:
        current.update(spec=graph.spec, job=job, key=cluster.accelerator.key)
        moe = next((ly.experts for ly in graph.block_layers(index) if ly.experts), None)
        current["top_k"] = moe.top_k if moe else 1
        return original_work(graph, index, plan, job, cluster)

    def launch(plan: Layout, local_experts: int, eff: Any, precision: Precision) -> float:
        return counted_launch_s(
            current["spec"], current["job"], plan, local_experts, current["key"], current["top_k"], p
        )

    def no_fusion(job: Job, router: Any, top_k: int, graphs: CudaGraphs) -> FusionLaunches:
        return FusionLaunches(0.0, 0.0)

    saved = (
        block_module.moe_launch_s,
        block_module.fusion_launch_s,
        stage_build_module.block_work,
        floor_module.block_work,
        host.EXPERT_LAUNCH_S,
        host.EXPERT_LAUNCH_BF16_S,
        host.MOE_SYNC_S,
    )
    block_module.moe_launch_s, block_module.fusion_launch_s = launch, no_fusion
    stage_build_module.block_work = floor_module.block_work = work
    host.EXPERT_LAUNCH_S, host.EXPERT_LAUNCH_BF16_S = (
        p.expert_launch_us * 1e-6,
        p.expert_launch_bf16_us * 1e-6,
    )
    host.MOE_SYNC_S = p.sync_us * 1e-6
    try:
        yield
    finally:
        (
            block_module.moe_launch_s,
            block_module.fusion_launch_s,
            stage_build_module.block_work,
            floor_module.block_work,
            host.EXPERT_LAUNCH_S,
            host.EXPERT_LAUNCH_BF16_S,
            host.MOE_SYNC_S,
        ) = saved


# --------------------------------------------------------------------------- the experiment

GRID: dict[str, tuple[float, ...]] = {
    "te_call_us": (0.0, 50.0, 100.0, 150.0, 200.0, 300.0),
    "te_call_fp8_us": (100.0, 200.0, 300.0, 400.0, 600.0),
    "grace_factor": (1.0, 1.15, 1.3, 1.6, 2.0),
    "expert_launch_us": (0.0, 40.0, 80.0, 120.0, 160.0, 200.0),
    "expert_launch_bf16_us": (0.0, 40.0, 80.0, 120.0, 160.0),
    "sync_us": (0.0, 100.0, 200.0, 300.0),
    "grouped_call_us": (0.0, 50.0, 100.0, 200.0),
}
FITTED = HostCounts(
    te_call_us=200.0, te_call_fp8_us=200.0, expert_launch_us=200.0, sync_us=0.0, grouped_call_us=50.0
)
"""``--fit --grouped``'s result on the 76 MoE rows (2026-12-02, Sec. 5.12)."""


TABLE: tuple[tuple[str, HostCounts], ...] = (
    ("x1.15, TE 200 / 200 us", HostCounts()),
    ("x1.3, TE 200 / 200 us", HostCounts(grace_factor=1.3)),
    ("x1.15, TE 300 / 200 us", HostCounts(te_call_us=300.0)),
    ("x1.15, TE 200 / 300 us", HostCounts(te_call_fp8_us=300.0)),
    ("x1.15, TE 200 / 400, grouped 0", HostCounts(te_call_fp8_us=400.0, grouped_call_us=0.0)),
    ("fitted", FITTED),
)
"""The points of docs/moe_physics.md Sec. 5.12's table (unnamed values: HostCounts' defaults)."""
LADDER = tuple(range(2061, 2067))
WATCH = (323, 332, 340, 309, 2057, 276, 2078, 2079)


def _scored(p: HostCounts | None, only: set[int] | None = None) -> dict[int, float]:
    from benchmarks.calibrate_moe import committed, moe_cases, scored

    cases = [c for c in moe_cases() if only is None or c.row_id in only]
    if p is None:
        return scored(cases, committed())
    with counted(p):
        return scored(
            cases,
            {
                **committed(),
                **{k: getattr(p, k) for k in ("expert_launch_us", "expert_launch_bf16_us", "sync_us")},
            },
        )


def _line(name: str, errors: dict[int, float]) -> str:
    from benchmarks.calibrate_moe import _loss
    from benchmarks.calibration_set import load_cases
    from benchmarks.fidelity import summary
    from benchmarks.moe_pairs import PAIRS, RATIO_POINTS

    published = {c.row_id: c.published_step_s for c in load_cases(kind="moe")[0]}
    within = 0
    for a, b, _ in PAIRS:
        if a in errors and b in errors:
            ratio = published[a] / published[b]
            within += abs(ratio * (1 + errors[a]) / (1 + errors[b]) - ratio) <= RATIO_POINTS
    median, p90 = summary(list(errors.values()))
    past = sum(abs(e) > 0.25 for e in errors.values())
    ladder = " ".join(f"{errors[r]:+.0%}" for r in LADDER)
    watch = " ".join(f"{r} {errors[r]:+.0%}" for r in WATCH)
    head = f"{name:<28} {median:5.1%} / {p90:5.1%}  past 25%: {past:>2}  pairs {within:>2}"
    return f"{head}  loss {_loss(errors):.3f} | ladder {ladder} | {watch}"


def fit(start: HostCounts, rounds: int = 2, only: set[int] | None = None) -> HostCounts:
    """Coordinate descent on benchmarks/calibrate_moe.py's objective over GRID (``only``: those rows)."""
    from benchmarks.calibrate_moe import _loss

    best, best_loss = start, _loss(_scored(start, only))
    for _ in range(rounds):
        for name, grid in GRID.items():
            for v in grid:
                trial = replace(best, **{name: v})
                if trial == best or trial.expert_launch_bf16_us > trial.expert_launch_us:
                    continue
                loss = _loss(_scored(trial, only))
                if loss < best_loss - 1e-9 and math.isfinite(loss):
                    best, best_loss = trial, loss
            print(f"  {name} -> {getattr(best, name):g} (loss {best_loss:.4f})", file=sys.stderr, flush=True)
    return best


def crossval() -> None:
    """Leave one source out: FITTED refitted (one round) without each source, that source scored."""
    from benchmarks.calibration_set import load_cases
    from benchmarks.fidelity import summary

    cases = load_cases(kind="moe")[0]
    inside = _scored(FITTED)
    sources = sorted({c.source for c in cases if c.row_id in inside})
    held: dict[int, float] = {}
    for source in sources:
        ids = {c.row_id for c in cases if c.source == source and c.row_id in inside}
        values = fit(FITTED, rounds=1, only=set(inside) - ids)
        print(f"held out {source}: {values}", file=sys.stderr, flush=True)
        held.update(_scored(values, ids))
        (m, q), (hm, hq) = summary([inside[i] for i in ids]), summary([held[i] for i in ids])
        print(
            f"{source:<32} {len(ids):>3}  in-sample {m:.1%} / {q:.1%}  held out {hm:.1%} / {hq:.1%}",
            flush=True,
        )
    (m, q), (hm, hq) = summary(list(inside.values())), summary([held[i] for i in inside])
    print(f"MoE ({len(inside)}): in-sample {m:.1%} / {q:.1%}, leave-one-source-out {hm:.1%} / {hq:.1%}")


def main() -> int:
    if "--crossval" in sys.argv[1:]:
        crossval()
        return 0
    if "--fit" in sys.argv[1:]:
        start = HostCounts(te_call_us=100.0, te_call_fp8_us=300.0, grace_factor=1.3)
        if "--grouped" in sys.argv[1:]:
            start = replace(start, grouped_call_us=100.0)
        best = fit(start)
        print(_line("fitted", _scored(best)))
        print(best)
        return 0
    print(_line("main (lumped host term)", _scored(None)))
    for name, p in TABLE:
        print(_line(name, _scored(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
