"""Model/plan validity, each rule once: the predicates the solver's search domains use
(solver/space.py), the checks ``check_plan`` runs on every evaluated plan, and the checks the
front door runs on the knobs a scenario fixes (paraplan/api.py). rules/validity.py states the
same facts for the framework rules (over a ModelSpec) by calling these.

A predicate (``tp_splits_heads``, ...) answers whether a value is allowed; a ``check_*``
raises ValueError naming the knob, the values and the rule. The rules a plan can break on its
own (degrees, ZeRO stage, rank order, etp) are ``cost.plan.check_structure``, run when a Plan is
built."""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.plan import Axis, Job, Layout, Plan, check_structure, show_divisors
from paraplan.cost.pp_schedule import micro_batch_rule, schedule_rule
from paraplan.graph import ModelSpec

__all__ = [
    "check_layer_kinds",
    "tp_splits_layer_kinds",
    "cp_splits_layer_kinds",
    "tp_splits_heads",
    "ep_splits_experts",
    "cp_splits_sequence",
    "batch_splits",
    "ep_follows_order",
    "check_tp_heads",
    "check_ep_experts",
    "check_etp_experts",
    "check_plan",
    "check_chunks",
    "check_expert_parallel",
    "expert_folded",
    "folded_ep_axes",
    "expert_axes",
]


def tp_splits_heads(num_heads: int, num_kv_heads: int, tp: int) -> bool:
    """Whether tp ranks split the attention: heads % tp == 0, and the kv heads (query groups)
    are a multiple or a divisor of tp (Megatron: a kv head is replicated when tp exceeds them)."""
    return num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)


def ep_splits_experts(num_experts: int, ep: int) -> bool:
    """Whether ep ranks split the routed experts: ep == 1, or a mixture-of-experts model
    (num_experts > 0) with num_experts % ep == 0."""
    return ep == 1 or (num_experts > 0 and num_experts % ep == 0)


def cp_splits_sequence(seq_len: int, cp: int) -> bool:
    """Whether cp ranks split the sequence into 2 * cp equal chunks (causal load balancing:
    each rank takes one chunk from each end): cp == 1 or seq_len % (2 * cp) == 0."""
    return cp == 1 or seq_len % (2 * cp) == 0


def batch_splits(global_batch: int, micro_batch: int, dp: int) -> bool:
    """Whether the global batch is a whole number of micro-batches per data-parallel replica:
    global_batch % (micro_batch * dp) == 0 (global = micro-batch x accumulation x replicas)."""
    return global_batch % (micro_batch * dp) == 0


def ep_follows_order(plan: Layout, order: tuple[Axis, ...] | None = None) -> bool:
    """The EP group splits along the rank order (``order``, else the plan's), as
    ``check_expert_parallel`` asks: a folded plan (``expert_folded``: etp = 1 < tp) takes the
    innermost ep ranks of tp x cp x dp (``folded_ep_axes``); otherwise ep divides, or is a multiple
    of, the inner of the cp and dp axes."""
    if expert_folded(plan):
        o = plan.order if order is None else order
        return folded_ep_axes(plan if o == plan.order else replace(plan, order=o)) is not None
    inner, _ = expert_axes(plan, order)
    return plan.ep % inner == 0 or inner % plan.ep == 0


def check_tp_heads(tp: int, num_heads: int, num_kv_heads: int) -> None:
    """ValueError unless ``tp_splits_heads``; names which of the two head counts breaks it."""
    if num_heads % tp:
        raise ValueError(f"plan.tp={tp} must divide model heads={num_heads}")
    if not tp_splits_heads(num_heads, num_kv_heads, tp):
        raise ValueError(f"plan.tp={tp} and model kv_heads={num_kv_heads}: one must divide the other")


def check_ep_experts(ep: int, num_experts: int) -> None:
    """ValueError unless ``ep_splits_experts``: ep > 1 needs experts, and ep divides them."""
    if ep_splits_experts(num_experts, ep):
        return
    if num_experts == 0:
        raise ValueError(f"plan.ep={ep}: expert parallelism needs a mixture-of-experts model")
    raise ValueError(
        f"plan.ep={ep} must divide the model's {num_experts} experts; "
        f"choose from {show_divisors(num_experts)}"
    )


def check_etp_experts(etp: int | None, tp: int | None, num_experts: int) -> None:
    """An expert tensor-parallel degree other than tp needs routed experts to shard (tp None:
    not fixed yet, so any etp on a dense model is refused)."""
    if etp is not None and num_experts == 0 and etp != tp:
        raise ValueError(
            f"plan.etp={etp} needs a mixture-of-experts model (expert tensor parallelism "
            "shards the routed experts); remove plan.etp"
        )


def check_plan(
    plan: Plan,
    job: Job,
    *,
    num_devices: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    num_experts: int = 0,
) -> None:
    """Every rule a plan must meet on a model, job and cluster (those it can break on its own
    were checked when it was built: ``check_structure``); ValueError names the knob, the values
    and the rule."""
    check_structure(plan)
    if plan.num_devices != num_devices:
        raise ValueError(
            f"plan: dp*tp*pp*cp = {plan.dp}*{plan.tp}*{plan.pp}*{plan.cp} = {plan.num_devices} "
            f"must equal the cluster's {num_devices} devices"
        )
    check_tp_heads(plan.tp, num_heads, num_kv_heads)
    if not cp_splits_sequence(job.seq_len, plan.cp):
        raise ValueError(
            f"plan.cp={plan.cp} must split job.seq_len={job.seq_len} into an even number of "
            "tokens per rank (2*cp chunks for causal load balance)"
        )
    if not batch_splits(job.global_batch, plan.micro_batch, plan.dp):
        per_step = plan.micro_batch * plan.dp
        raise ValueError(
            f"job.global_batch={job.global_batch} must be divisible by "
            f"plan.micro_batch*dp = {plan.micro_batch}*{plan.dp} = {per_step} "
            "(global batch = micro-batch x accumulation steps x data-parallel replicas)"
        )
    if len(plan.layers_per_stage) != plan.pp:
        raise ValueError(f"plan.layers_per_stage has {len(plan.layers_per_stage)} entries; need pp={plan.pp}")
    check_chunks(plan, num_layers)
    if sum(plan.layers_per_stage) != num_layers or min(plan.layers_per_stage) < plan.vp:
        raise ValueError(
            f"plan.layers_per_stage={list(plan.layers_per_stage)} must sum to the model's "
            f"{num_layers} layers with at least vp={plan.vp} per stage"
        )
    if plan.vp > 1 and plan.pp == 1:
        raise ValueError(f"plan.vp={plan.vp} needs pp > 1 (interleaving splits pipeline stages)")
    if plan.vp > 1 and plan.num_micro_batches(job) % plan.pp:
        raise ValueError(
            f"interleaved schedule (vp={plan.vp}) needs the micro-batch count "
            f"{plan.num_micro_batches(job)} to be a multiple of pp={plan.pp}"
        )
    broken = schedule_rule(plan.pp_schedule, plan.pp, plan.vp) or micro_batch_rule(
        plan.pp_schedule, plan.pp, plan.num_micro_batches(job)
    )
    if broken:
        raise ValueError(broken)
    if len(plan.recompute) != plan.pp:
        raise ValueError(f"plan.recompute has {len(plan.recompute)} entries; need pp={plan.pp}")
    check_expert_parallel(plan, num_experts)


def check_chunks(plan: Plan, num_layers: int) -> None:
    """plan.layers_per_chunk: pp rows of vp counts, each >= 1, all summing to the model's layers,
    row s to layers_per_stage[s]. Without it, each stage's layers are spread over its chunks by
    default_chunks (so vp need not divide a stage)."""
    rows = plan.layers_per_chunk
    if not rows:
        return
    if len(rows) != plan.pp or any(len(r) != plan.vp for r in rows):
        raise ValueError(
            f"plan.layers_per_chunk has {len(rows)} rows of {sorted({len(r) for r in rows})} "
            f"entries; need pp={plan.pp} rows of vp={plan.vp} layer counts (one per virtual stage)"
        )
    bad = [(s, c) for s, r in enumerate(rows) for c, n in enumerate(r) if n < 1]
    if bad:
        s, c = bad[0]
        raise ValueError(
            f"plan.layers_per_chunk[{s}][{c}]={rows[s][c]}: every virtual stage holds at least one layer"
        )
    sums = [sum(r) for r in rows]
    if sum(sums) != num_layers:
        raise ValueError(
            f"plan.layers_per_chunk holds {sum(sums)} layers (stages {sums}); the model has {num_layers}"
        )
    if tuple(sums) != tuple(plan.layers_per_stage):
        raise ValueError(
            f"plan.layers_per_chunk row sums {sums} must equal plan.layers_per_stage="
            f"{list(plan.layers_per_stage)} (each row is one pp stage's chunks)"
        )


def _tp_splits_mamba(spec: ModelSpec, tp: int) -> bool:
    """Mamba-2 heads and B/C groups (megatron-core ssm/mamba_mixer.py: ngroups % tp == 0,
    nheads % tp == 0), Mamba-1's inner width; True without Mamba layers."""
    m = spec.mamba
    if not spec.has_ssm:
        return True
    if m.version == 2:
        return m.num_groups % tp == 0 and m.num_heads % tp == 0
    return (m.expand * spec.hidden) % tp == 0


def tp_splits_layer_kinds(spec: ModelSpec, tp: int) -> bool:
    """Whether tp ranks split the model's Mamba layers (``_tp_splits_mamba``) and the vision
    encoder's heads. True for a model with neither."""
    return _tp_splits_mamba(spec, tp) and not (spec.vision.num_layers and spec.vision.num_heads % tp)


def cp_splits_layer_kinds(spec: ModelSpec, cp: int) -> bool:
    """Whether cp ranks can split the model's layers as costed: not with Mamba layers (module
    docstring of check_layer_kinds)."""
    return cp == 1 or not spec.has_ssm


def check_layer_kinds(plan: Plan, spec: ModelSpec) -> None:
    """Rules of the layer kinds beyond the decoder block; ValueError names the knob and the rule.

    - Mamba layers and context parallelism: megatron-core 0.16.1 splits a Mamba mixer over cp
      with an all-to-all that turns sequence shards into head shards (ssm/mamba_context_parallel.py,
      needs heads % (tp * cp) == 0); paraplan does not cost that exchange, so cp > 1 is refused.
    - Mamba and vision layers under TP: ``tp_splits_layer_kinds``.
    """
    if not cp_splits_layer_kinds(spec, plan.cp):
        raise ValueError(
            f"plan.cp={plan.cp}: model {spec.name} has Mamba layers, whose context-parallel "
            "all-to-all (megatron-core ssm/mamba_context_parallel.py) paraplan does not cost; "
            "use cp=1"
        )
    if tp_splits_layer_kinds(spec, plan.tp):
        return
    if not _tp_splits_mamba(spec, plan.tp):
        m = spec.mamba
        what = (
            f"mamba.num_groups={m.num_groups} and mamba.num_heads={m.num_heads}"
            if m.version == 2
            else f"the Mamba inner width {m.expand * spec.hidden}"
        )
        raise ValueError(f"plan.tp={plan.tp} must divide {what} (TP splits the Mamba heads and groups)")
    raise ValueError(
        f"plan.tp={plan.tp} must divide model.vision.num_heads={spec.vision.num_heads} "
        "(TP splits the vision encoder's heads)"
    )


def check_expert_parallel(plan: Plan, num_experts: int) -> None:
    """Megatron's expert-parallel rules: EP is carved out of dp x cp (it does not change the
    device count), ep divides the experts, and MoE with TP needs sequence parallelism."""
    if plan.ep > 1 and num_experts == 0:
        check_ep_experts(plan.ep, num_experts)
    if num_experts and plan.tp > 1 and not plan.sequence_parallel:
        raise ValueError(
            f"plan.tp={plan.tp} on a mixture-of-experts model needs plan.sequence_parallel=true "
            "(Megatron routes the sequence-parallel shards to the experts)"
        )
    check_etp_experts(plan.etp, plan.tp, num_experts)
    if plan.ep == 1:
        return
    check_ep_experts(plan.ep, num_experts)
    if expert_folded(plan):
        if folded_ep_axes(plan) is None:
            raise ValueError(
                f"plan.ep={plan.ep} with plan.etp=1 spans tp ranks (Megatron's MoE parallel "
                f"folding) and must take the innermost ep of the tp*cp*dp = "
                f"{plan.tp}*{plan.cp}*{plan.dp} ranks along the rank order: whole inner axes and "
                "a divisor of the next"
            )
        return
    inner, _ = expert_axes(plan)
    if (plan.dp * plan.cp) % plan.ep or not ep_follows_order(plan):
        raise ValueError(
            f"plan.ep={plan.ep} must divide dp*cp = {plan.dp}*{plan.cp} and split along the rank "
            f"order (ep divides, or is a multiple of, the inner of cp/dp, degree {inner}); "
            "expert parallelism is carved out of the data- and context-parallel ranks"
        )


def expert_folded(plan: Layout) -> bool:
    """Megatron-core's MoE parallel folding (docs/frameworks.md Sec. 2.3, expert grid ETP x EP x
    expert-DP x PP laid over the same ranks as TP x CP x DP x PP): with etp = 1 < tp the EP group is
    the innermost ep ranks, TP ranks first. Megatron-core's expert RankGenerator (order
    tp-cp-ep-dp-pp with tp = etp = 1) puts ep right after etp whether or not ep divides dp*cp, so
    an etp = 1 plan always folds (the Megatron-MoE-ModelZoo's "intra-node EP strategy": TP4 x EP8
    with ETP 1 keeps the EP group inside the node)."""
    return plan.ep > 1 and plan.etp == 1 and plan.tp > 1


def folded_ep_axes(plan: Layout) -> list[tuple[Axis, int]] | None:
    """EP group of a folded plan as (axis, members along it): the innermost
    ep ranks of tp x cp x dp in rank order (Megatron's expert RankGenerator with tp = etp = 1 puts
    ep innermost), i.e. whole inner axes and a divisor of the next; None if ep does not split so."""
    left = plan.ep
    out: list[tuple[Axis, int]] = []
    for axis in (a for a in plan.order if a != Axis.PP):
        d = plan.degree(axis)
        if left == 1:
            break
        take = d if left % d == 0 else left
        if d % take:
            return None
        out.append((axis, take))
        left //= take
    return out if left == 1 else None


def expert_axes(plan: Layout, order: tuple[Axis, ...] | None = None) -> tuple[int, int]:
    """Degrees of the inner and outer of the cp and dp axes under the rank order (``order``,
    else the plan's)."""
    o = plan.order if order is None else order
    cp_first = o.index(Axis.CP) < o.index(Axis.DP)
    return (plan.cp, plan.dp) if cp_first else (plan.dp, plan.cp)
