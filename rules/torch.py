"""The PyTorch-native script's rules (torch 2.13: DeviceMesh, DTensor, FSDP2, pipelining): what a
plan must satisfy for ``paraplan.export.torch_plan`` to build a runnable script, checked without
rendering one. The script's own checks (``ScriptPlan``, ``check_torch_plan``) live here too: the
rule ``check_script_accepts`` runs them on every layout the planner considers, and the renderer
runs them again before it writes the script."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from paraplan.cost import Axis, Plan, Recompute
from paraplan.cost.plan import chunk_layers
from paraplan.rules.base import Draft, Refusal, RuleContext, SearchLimits, repair
from paraplan.rules.checks import (
    check_dense_model,
    layer_kinds_rule,
    loss_chunks_rule,
    megatron_offload_modules_rule,
    megatron_recompute_modules_rule,
    partial_recompute_rule,
    rank_order_rule,
    uniform_recompute_rule,
)
from paraplan.rules.moe_fusion import fusion_rule
from paraplan.rules.moe_state import state_rules
from paraplan.rules.plans import regroup, uniform_recompute
from paraplan.rules.pp_schedule import schedule_refusal_rule

__all__ = [
    "RULES",
    "SEARCH",
    "MODEL_RULES",
    "LAYOUT_RULES",
    "ZERO_RULES",
    "ORDER",
    "RECOMPUTE_CHOICES",
    "ZERO_STAGES",
    "ScriptPlan",
    "check_torch_plan",
    "checked_script_plan",
    "script_args",
    "virtual_stage_layers",
]


ORDER = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
"""init_device_mesh(("pp", "dp", "tp")) is row-major: tp varies fastest, then dp, then pp."""


def virtual_stage_layers(plan: Plan) -> list[int]:
    """Layers per virtual stage, in virtual-stage order (stage s = v * pp + r on pp rank r;
    unequal chunks from plan.layers_per_chunk)."""
    chunks = chunk_layers(plan)
    return [chunks[s % plan.pp][s // plan.pp] for s in range(plan.pp * plan.vp)]


# --------------------------------------------------------------------------- rules


def check_no_context_parallel(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The script's mesh has no cp dimension."""
    if draft.plan.cp == 1:
        return None
    return Refusal(
        f"plan.cp={draft.plan.cp}: the PyTorch-native script has no context parallelism",
        repair("cp -> 1, dp absorbs it", draft, regroup(draft.plan, cp=1)),
    )


check_uniform_recompute = uniform_recompute_rule("the script wraps every block the same way")


def check_schedule(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Schedule1F1B: n >= pp; ScheduleInterleaved1F1B: n % max(1, n // pp) == 0."""
    p = draft.plan
    if p.pp == 1:
        return None
    n = ctx.job.global_batch // (p.micro_batch * p.dp)
    if p.vp == 1 and n < p.pp:
        return Refusal(
            f"Schedule1F1B needs at least pp={p.pp} micro-batches per step; the plan has {n}",
            repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)),
        )
    if p.vp > 1 and n % max(1, n // p.pp):
        return Refusal(
            f"ScheduleInterleaved1F1B needs n % max(1, n // pp) == 0 for the {n} micro-batches and pp={p.pp}",
            repair("vp -> 1", draft, replace(p, vp=1)),
        )
    return None


check_rank_order = rank_order_rule(
    ORDER, "the script's mesh (pp, dp, tp) places tp innermost, then dp, then pp"
)
"""Mesh (pp, dp, tp): tp innermost, then dp, then pp."""


def script_args(ctx: RuleContext, draft: Draft) -> dict[str, object]:
    """The torch_plan script's arguments for ``draft``."""
    p, job = draft.plan, ctx.job
    mode = uniform_recompute(p) or Recompute.FULL  # RULES refuse mixed modes before this runs
    return dict(
        dp=p.dp,
        tp=p.tp,
        pp=p.pp,
        vp=p.vp,
        micro_batch=p.micro_batch,
        global_batch=job.global_batch,
        seq_len=job.seq_len,
        zero=p.zero,
        sequence_parallel=p.sequence_parallel,
        recompute=mode.value,
        layers_per_stage=virtual_stage_layers(p),
        num_layers=ctx.spec.num_layers,
    )


def check_script_accepts(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Whatever else ``render_torch_plan`` rejects (its checks, without rendering), with the
    generic repairs."""
    try:
        check_torch_plan(**script_args(ctx, draft))
    except ValueError as e:
        p = draft.plan
        return Refusal(
            f"torch_plan rejects it: {e}",
            repair("vp -> 1", draft, replace(p, vp=1) if p.vp > 1 else None)
            + repair(
                "sequence_parallel -> off",
                draft,
                replace(p, sequence_parallel=False) if p.sequence_parallel else None,
            )
            + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1) if p.pp > 1 else None),
        )
    return None


def check_dense_reference(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The script's reference model is a dense Llama: no experts, no latent attention."""
    s = ctx.spec
    if not (s.is_moe or s.is_mla):
        return None
    return Refusal(
        f"model {s.name} has "
        + ("routed experts" if s.is_moe else "multi-head latent attention")
        + ": the PyTorch-native plan's reference model is a dense Llama"
    )


check_layer_kinds = layer_kinds_rule("the PyTorch-native plan's reference model", frozenset())
"""The script's reference model is a stack of dense Llama blocks with full causal attention
(paraplan/export/reference_model.py): no windows, chunks, hybrid layers, vision encoder or MTP."""

check_recompute_layers = partial_recompute_rule(
    "the script wraps every block the same way; no number of layers"
)

MOE_STATE_RULES = state_rules("torch")
"""plan.moe_dispatcher, plan.moe_overlap, plan.cuda_graphs, job.moe_routing (rules/moe_state.py)."""

check_recompute_modules = megatron_recompute_modules_rule("torch")
"""job.recompute_modules: Megatron-only (rules/checks.py)."""
check_offload_modules = megatron_offload_modules_rule("torch")
"""job.offload_modules: Megatron-only (rules/checks.py)."""
check_loss_chunks = loss_chunks_rule("torch")
"""job.loss_chunks: torchtitan only (rules/checks.py)."""

check_pp_schedule = schedule_refusal_rule("torch")
"""plan.pp_schedule: the schedules torch runs (rules/pp_schedule.py)."""

check_moe_fusion = fusion_rule(
    "torch",
    "runs a dense reference model (no router)",
)
"""job.moe_router_fusion / moe_permute_fusion: megatron and nemo only (rules/moe_fusion.py)."""

RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_layer_kinds,
    check_dense_model,
    check_dense_reference,
    check_no_context_parallel,
    check_uniform_recompute,
    check_recompute_layers,
    check_schedule,
    check_rank_order,
    check_script_accepts,
    *MOE_STATE_RULES,
    check_pp_schedule,
)

SEARCH = SearchLimits()
"""solver.target=torch: the script takes layers per virtual stage; every block wrapped alike."""
MODEL_RULES = (
    check_moe_fusion,
    check_recompute_modules,
    check_offload_modules,
    check_loss_chunks,
    check_layer_kinds,
    check_dense_reference,
    MOE_STATE_RULES[3],
)  # + job.moe_routing
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (check_rank_order,)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family).
``check_script_accepts`` reads plan.zero only to pass it on: every Plan's ZeRO stage (0-3) is one
the script takes."""
ZERO_RULES = ()
"""The LAYOUT_RULES that read the ZeRO stage but not the rank order (rules/megatron.py): none."""


# --------------------------------------------------------------------------- the script's checks


RECOMPUTE_CHOICES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptPlan:
    """The plan knobs the script needs: the keyword arguments of ``render_torch_plan``.
    ``layers_per_stage``: transformer layers per virtual stage, in virtual-stage order (None: an
    even split); ``recompute``: "none", "selective" or "full"."""

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


def check_positive_knobs(plan: ScriptPlan) -> None:
    """Every degree, batch knob, seq_len and num_layers must be an int >= 1."""
    for knob in ("dp", "tp", "pp", "vp", "micro_batch", "global_batch", "seq_len", "num_layers"):
        value = getattr(plan, knob)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{knob}={value!r} must be an integer >= 1.")


def check_zero_and_recompute(plan: ScriptPlan) -> None:
    """zero must be 0-3 and recompute one of none, selective, full."""
    if plan.zero not in ZERO_STAGES:
        raise ValueError(f"zero={plan.zero!r} must be one of 0, 1, 2, 3.")
    if plan.recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute={plan.recompute!r} must be one of {', '.join(RECOMPUTE_CHOICES)}.")


def check_batch_divisible(plan: ScriptPlan) -> None:
    """global_batch % (micro_batch * dp) == 0 (micro-batches per step is an int)."""
    per_step = plan.micro_batch * plan.dp
    if plan.global_batch % per_step:
        raise ValueError(
            f"global_batch={plan.global_batch} must be divisible by micro_batch * dp"
            f" = {plan.micro_batch} * {plan.dp} = {per_step}; choose global_batch as"
            f" a multiple of {per_step}."
        )


def check_virtual_stages(plan: ScriptPlan) -> None:
    """vp > 1 (interleaving) needs pp > 1."""
    if plan.vp > 1 and plan.pp == 1:
        raise ValueError(
            f"vp={plan.vp} needs pp > 1: interleaved virtual stages are spread over"
            " pipeline ranks; set vp=1 or pp >= 2."
        )


def check_schedule_micro_batches(plan: ScriptPlan) -> None:
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


def check_layers_per_stage(plan: ScriptPlan) -> None:
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


def check_sequence_parallel(plan: ScriptPlan) -> None:
    """With sequence_parallel and tp > 1, tp must divide seq_len."""
    if plan.sequence_parallel and plan.tp > 1 and plan.seq_len % plan.tp:
        raise ValueError(
            f"sequence_parallel=True shards the sequence over tp: seq_len="
            f"{plan.seq_len} must be divisible by tp={plan.tp}."
        )


def check_torch_plan(**knobs: Any) -> None:
    """The checks ``render_torch_plan`` runs on the same keyword arguments, without rendering:
    ValueError naming the knob and the rule when the plan cannot run (cheap enough to run on
    every layout the planner considers)."""
    checked_script_plan(**knobs)


def _script_value(name: str, value: Any) -> Any:
    """A knob as ``ScriptPlan`` holds it: ``sequence_parallel`` a bool, ``recompute`` a str (a
    Recompute works too), ``layers_per_stage`` a tuple or None (a list works too)."""
    if name == "sequence_parallel":
        return bool(value)
    if name == "recompute":
        return str(value)
    if name == "layers_per_stage":
        return None if value is None else tuple(value)
    return value


def checked_script_plan(**knobs: Any) -> ScriptPlan:
    """The ``ScriptPlan`` of ``render_torch_plan``'s keyword arguments (its fields: TypeError for
    a missing or unknown one), checked: ValueError naming the knob and the rule."""
    plan = ScriptPlan(**{name: _script_value(name, value) for name, value in knobs.items()})
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
