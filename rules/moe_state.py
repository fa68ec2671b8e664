"""MoE software state per framework: which token dispatchers (``plan.moe_dispatcher``), EP
all-to-all overlap (``plan.moe_overlap``), CUDA-graph modes (``plan.cuda_graphs``) and routing
modes (``job.moe_routing``) each targeted release runs, what it does out of the box, and the
rules that refuse the rest by name (the field, the value, and the frameworks that do run it).

``SUPPORT`` is the one table; ``state_rules(name)`` gives a framework's four rules (the routing
rule reads only the model and job: ``routing_rule``), and ``MEGATRON_STATE_RULES`` /
``TORCHTITAN_STATE_RULES`` the combinations those frameworks check themselves. The dispatcher and
the routing are a mixture-of-experts model's: a dense model has neither, so they are not checked
on one. Sources read (the installed wheels):

- megatron-core 0.19.2 ``TransformerConfig`` (transformer_config.py): ``moe_token_dispatcher_type``
  {allgather, alltoall, flex} default allgather; ``moe_flex_dispatcher_backend`` {deepep,
  hybridep, ncclep} default deepep; ``ModelParallelConfig.overlap_moe_expert_parallel_comm``
  default False (``__post_init__``: ep > 1, alltoall or flex, virtual pipeline when pp > 1, no
  full recompute / recompute method / num layers, bf16 or fp16, at most one MTP layer);
  ``cuda_graph_impl`` {none, local, transformer_engine, full_iteration} default none;
  ``moe_router_force_load_balancing`` default False; ``moe_expert_capacity_factor`` default None
  (dropless). Megatron-Bridge 0.6.2 builds the same TransformerConfig (GPTModelProvider).
- torchtitan 0.3.0: ``make_token_dispatcher_config`` (models/common/config_utils.py) picks the
  dispatcher from the config function's ``moe_comm_backend``; the config functions paraplan maps
  (rules.torchtitan.CONFIGS) use "standard" (``AllToAllTokenDispatcher``), and no command-line
  flag changes it. ``training.disable_cuda_graphs`` default False: the whole forward + backward
  is one CUDA graph (trainer.py ``wrap_with_cuda_graph``), refused with pp > 1 and with a
  host-synchronising EP dispatcher (``_validate_cuda_graphs``). ``debug.moe_force_load_balance``
  (round-robin routing) default False; routing is dropless (no capacity option on the standard
  dispatcher). No schedule the export writes overlaps EP communication with another
  micro-batch's compute.
- DeepSpeed 0.19.8: expert parallelism and routing live in model code (``deepspeed.moe.layer.MoE``:
  ``ep_size``, ``capacity_factor=1.0``, ``drop_tokens=True``: token dropping out of the box), so
  the JSON export carries none of it (rules.deepspeed refuses ep > 1); its only
  ``enable_cuda_graph`` is the hybrid engine's inference one (runtime/config.py).
- MaxText 0.2.5 and the PyTorch-native script: their exports write no dispatcher, overlap,
  CUDA-graph or routing setting, so only the defaults run (MaxText is not installed here to read
  more; the script's reference model is dense).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost import CudaGraphs, MoEDispatcher, MoERouting, Recompute
from paraplan.rules.base import Draft, Fix, Refusal, Rule, RuleContext, repair
from paraplan.rules.frameworks import FRAMEWORKS
from paraplan.rules.validity import mtp_layers

__all__ = [
    "Support",
    "SUPPORT",
    "FIELDS",
    "STATE_RULE_READS",
    "runs",
    "state_rules",
    "routing_rule",
    "MEGATRON_STATE_RULES",
    "TORCHTITAN_STATE_RULES",
    "check_megatron_overlap",
    "check_megatron_cuda_graphs",
    "check_torchtitan_cuda_graphs",
]


@dataclass(frozen=True, slots=True)
class Support:
    """What one framework release runs of the MoE software state, why not the rest, and what it
    does out of the box (``defaults``, with the source read)."""

    release: str
    dispatchers: frozenset[MoEDispatcher]
    overlap: bool
    cuda_graphs: frozenset[CudaGraphs]
    routings: frozenset[MoERouting]
    why_not: dict[str, str]
    defaults: str


_ALL_DISPATCHERS = frozenset(MoEDispatcher)
_ALL_ROUTINGS = frozenset(MoERouting)
_NO_GRAPHS = frozenset({CudaGraphs.NONE})
_ONLY_ALLTOALL = frozenset({MoEDispatcher.ALLTOALL})
_ONLY_DROPLESS = frozenset({MoERouting.DROPLESS})

_MEGATRON = Support(
    release="Megatron-LM (megatron-core 0.19.2)",
    dispatchers=_ALL_DISPATCHERS,  # alltoall, allgather, flex + deepep / hybridep
    overlap=True,
    cuda_graphs=frozenset(CudaGraphs),  # transformer_engine scopes; full_iteration
    routings=_ALL_ROUTINGS,
    why_not={},
    defaults="dispatcher allgather (TransformerConfig.moe_token_dispatcher_type), no EP overlap, "
    "cuda_graph_impl none, dropless (moe_expert_capacity_factor None), no forced balance",
)

SUPPORT: dict[str, Support] = {
    "megatron": _MEGATRON,
    "nemo": replace(
        _MEGATRON,
        release="NeMo 2 / Megatron-Bridge 0.6.2",
        defaults="megatron-core's TransformerConfig defaults, unless the recipe sets others "
        "(e.g. Bridge's qwen3_moe recipes set alltoall; CommOverlapConfig leaves EP overlap off)",
    ),
    "torchtitan": Support(
        release="torchtitan 0.3.0",
        dispatchers=_ONLY_ALLTOALL,
        overlap=False,
        cuda_graphs=frozenset({CudaGraphs.NONE, CudaGraphs.FULL}),
        routings=frozenset({MoERouting.DROPLESS, MoERouting.FORCE_BALANCED}),
        why_not={
            "plan.moe_dispatcher": "the config functions paraplan maps build the 'standard' "
            "all-to-all dispatcher (make_token_dispatcher_config's moe_comm_backend is a config "
            "function argument, no command-line flag)",
            "plan.moe_overlap": "the 1F1B / Interleaved1F1B schedules the export writes run one "
            "micro-batch at a time",
            "plan.cuda_graphs": "its CUDA graph is the whole forward + backward "
            "(training.disable_cuda_graphs), never part of a layer",
            "job.moe_routing": "the standard dispatcher routes dropless (no capacity factor)",
        },
        defaults="'standard' all-to-all, no EP overlap, CUDA graphs on for forward + backward "
        "(training.disable_cuda_graphs False), dropless, debug.moe_force_load_balance False",
    ),
    "deepspeed": Support(
        release="DeepSpeed 0.19.8",
        dispatchers=_ONLY_ALLTOALL,
        overlap=False,
        cuda_graphs=_NO_GRAPHS,
        routings=_ONLY_DROPLESS,
        why_not={
            "plan.moe_dispatcher": "deepspeed.moe dispatches with its own all-to-all "
            "(_AllToAll in deepspeed/moe/sharded_moe.py), set in model code",
            "plan.moe_overlap": "deepspeed.moe has no EP overlap with another micro-batch",
            "plan.cuda_graphs": "its config has no training CUDA graphs (enable_cuda_graph is "
            "the hybrid engine's inference option)",
            "job.moe_routing": "routing is set in model code (deepspeed.moe.layer.MoE "
            "capacity_factor / drop_tokens), which the JSON export cannot carry",
        },
        defaults="deepspeed.moe.layer.MoE: capacity_factor 1.0 with drop_tokens True (token "
        "dropping), its own all-to-all, no CUDA graphs",
    ),
    "maxtext": Support(
        release="MaxText 0.2.5",
        dispatchers=_ONLY_ALLTOALL,
        overlap=False,
        cuda_graphs=_NO_GRAPHS,
        routings=_ONLY_DROPLESS,
        why_not={
            "plan.moe_dispatcher": "DeepEP / HybridEP are CUDA libraries and the export "
            "writes no dispatch key (XLA's collectives over the expert axis)",
            "plan.moe_overlap": "the export writes no EP-overlap setting",
            "plan.cuda_graphs": "the export writes no XLA command-buffer (CUDA graph) flags",
            "job.moe_routing": "the export writes no capacity or forced-balance key",
        },
        defaults="what the export writes: XLA-compiled steps, dropless routing",
    ),
    "torch": Support(
        release="the PyTorch-native plan script",
        dispatchers=_ONLY_ALLTOALL,
        overlap=False,
        cuda_graphs=_NO_GRAPHS,
        routings=_ONLY_DROPLESS,
        why_not={
            "plan.moe_dispatcher": "its reference model is dense",
            "plan.moe_overlap": "its reference model is dense",
            "plan.cuda_graphs": "the script launches every kernel from the host (no capture)",
            "job.moe_routing": "its reference model is dense",
        },
        defaults="eager kernels, no experts",
    ),
}
"""framework -> what it runs (rules_of names; nemo shares megatron-core's TransformerConfig)."""
if set(SUPPORT) != set(FRAMEWORKS):  # a framework added to the registry (frameworks.py) but not here
    raise TypeError(f"moe_state.SUPPORT must list the frameworks {FRAMEWORKS}; lists {tuple(SUPPORT)}")

FIELDS = ("plan.moe_dispatcher", "plan.moe_overlap", "plan.cuda_graphs", "job.moe_routing")
STATE_RULE_READS = ("moe_dispatcher", "moe_overlap", "cuda_graphs", "ep", "pp", "vp", "recompute")
"""The plan fields the rules defined here read (besides the model and the job): rules/filter.py
remembers their verdicts on a layout by these alone (its representative's recompute mode is the
filter's own), so the families that differ elsewhere share them (issue 22 item 7: the solver asks
them of every state of every family it reaches). tests/rules/test_moe_state_rules.py checks it."""
DEFAULTS: dict[str, object] = {
    "plan.moe_dispatcher": MoEDispatcher.ALLTOALL,
    "plan.moe_overlap": False,
    "plan.cuda_graphs": CudaGraphs.NONE,
    "job.moe_routing": MoERouting.DROPLESS,
}
"""paraplan's defaults (cost.Layout / cost.Job): what every framework runs."""


def _supports(s: Support, field: str, value: object) -> bool:
    if field == "plan.moe_dispatcher":
        return value in s.dispatchers
    if field == "plan.moe_overlap":
        return s.overlap or not value
    if field == "plan.cuda_graphs":
        return value in s.cuda_graphs
    return value in s.routings


def runs(field: str, value: object) -> tuple[str, ...]:
    """The frameworks (rules_of names) that run ``field`` = ``value``."""
    if field not in FIELDS:
        raise ValueError(f"no MoE software-state field {field!r}; known: {', '.join(FIELDS)}")
    return tuple(name for name, s in SUPPORT.items() if _supports(s, field, value))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))


def _refusal(framework: str, field: str, value: object, fixes: tuple[Fix, ...]) -> Refusal:
    s = SUPPORT[framework]
    others = ", ".join(runs(field, value)) or "none of paraplan's targets"
    why = s.why_not.get(field, "")
    return Refusal(
        f"{field}={_shown(value)}: {s.release} does not run it"
        + (f" ({why})" if why else "")
        + f"; run by: {others}",
        fixes,
    )


def state_rules(framework: str) -> tuple[Rule, Rule, Rule, Rule]:
    """The framework's dispatcher, EP-overlap, CUDA-graph and routing rules (SUPPORT)."""
    s = SUPPORT[framework]

    def check_moe_dispatcher(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if not ctx.spec.is_moe or p.moe_dispatcher in s.dispatchers:
            return None
        fix = repair("moe_dispatcher -> alltoall", draft, replace(p, moe_dispatcher=MoEDispatcher.ALLTOALL))
        return _refusal(framework, "plan.moe_dispatcher", p.moe_dispatcher, fix)

    def check_moe_overlap(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if not p.moe_overlap or s.overlap:
            return None
        fix = repair("moe_overlap -> false", draft, replace(p, moe_overlap=False))
        return _refusal(framework, "plan.moe_overlap", True, fix)

    def check_cuda_graphs(ctx: RuleContext, draft: Draft) -> Refusal | None:
        p = draft.plan
        if p.cuda_graphs in s.cuda_graphs:
            return None
        fix = repair("cuda_graphs -> none", draft, replace(p, cuda_graphs=CudaGraphs.NONE))
        return _refusal(framework, "plan.cuda_graphs", p.cuda_graphs, fix)

    return check_moe_dispatcher, check_moe_overlap, check_cuda_graphs, routing_rule(framework)


def routing_rule(framework: str) -> Rule:
    """The framework's routing rule (reads only the model and job: a MODEL_RULE)."""
    s = SUPPORT[framework]

    def check_moe_routing(ctx: RuleContext, draft: Draft) -> Refusal | None:
        routing = ctx.job.moe_routing
        if not ctx.spec.is_moe or routing in s.routings:
            return None
        return _refusal(framework, "job.moe_routing", routing, ())  # a job setting: no plan repair

    return check_moe_routing


# --------------------------------------------------------------------------- combinations


def _overlap_off(draft: Draft) -> tuple[Fix, ...]:
    return repair("moe_overlap -> false", draft, replace(draft.plan, moe_overlap=False))


def check_megatron_overlap(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """``--overlap-moe-expert-parallel-comm`` as megatron-core 0.19.2's TransformerConfig
    ``__post_init__`` (and Bridge's CommOverlapConfig) asserts it: ep > 1, the alltoall or flex
    dispatcher, virtual pipeline stages when pp > 1, no full recompute (Megatron's block
    recompute is full too), at most one MTP layer."""
    p = draft.plan
    if not p.moe_overlap:
        return None
    flag = "plan.moe_overlap=true (--overlap-moe-expert-parallel-comm)"
    if p.ep == 1:
        return Refusal(
            f"{flag} needs expert parallelism (plan.ep={p.ep}; TransformerConfig)", _overlap_off(draft)
        )
    if p.moe_dispatcher is MoEDispatcher.ALLGATHER:
        return Refusal(
            f"{flag} runs with the alltoall or flex dispatcher, not plan.moe_dispatcher=allgather "
            "(TransformerConfig)",
            repair("moe_dispatcher -> alltoall", draft, replace(p, moe_dispatcher=MoEDispatcher.ALLTOALL))
            + _overlap_off(draft),
        )
    if p.pp > 1 and p.vp == 1:
        return Refusal(
            f"{flag} with pp={p.pp} needs virtual pipeline stages (plan.vp > 1; TransformerConfig: "
            "virtual_pipeline_model_parallel_size must be specified when pp > 1)",
            _overlap_off(draft),
        )
    if Recompute.FULL in p.recompute:
        return Refusal(
            f"{flag} refuses full recompute (plan.recompute={[r.value for r in p.recompute]}; "
            "TransformerConfig: no recompute_granularity full, method or num layers)",
            repair("recompute -> selective", draft, p.with_recompute(Recompute.SELECTIVE))
            + _overlap_off(draft),
        )
    if mtp_layers(ctx.spec) > 1:
        return Refusal(
            f"{flag}: model {ctx.spec.name} has {mtp_layers(ctx.spec)} MTP layers; TransformerConfig "
            "allows at most one with EP overlap",
            _overlap_off(draft),
        )
    return None


def check_megatron_cuda_graphs(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Per-layer CUDA graphs (plan.cuda_graphs=partial: ``--cuda-graph-impl transformer_engine``
    over attn, moe_router, moe_preprocess) as megatron-core 0.19.2's TransformerConfig checks
    them: full recompute only with full-iteration graphs; no moe_preprocess graph under the
    alltoall dispatcher with token dropping (its preprocess syncs with the host); no graphed
    attention recompute with attention dropout."""
    p, s = draft.plan, ctx.spec
    if p.cuda_graphs is not CudaGraphs.PARTIAL:
        return None
    none = repair("cuda_graphs -> none", draft, replace(p, cuda_graphs=CudaGraphs.NONE))
    full = repair("cuda_graphs -> full", draft, replace(p, cuda_graphs=CudaGraphs.FULL))
    if Recompute.FULL in p.recompute:
        return Refusal(
            "plan.cuda_graphs=partial with full recompute: megatron-core runs full recompute only "
            "with full-iteration CUDA graphs (TransformerConfig)",
            full + repair("recompute -> selective", draft, p.with_recompute(Recompute.SELECTIVE)) + none,
        )
    capacity = ctx.job.moe_routing is MoERouting.CAPACITY
    if s.is_moe and capacity and p.moe_dispatcher is MoEDispatcher.ALLTOALL:
        return Refusal(
            "plan.cuda_graphs=partial captures the MoE preprocess, which megatron-core refuses "
            "under the alltoall dispatcher with job.moe_routing=capacity (device-to-host syncs in "
            "the preprocess step; TransformerConfig)",
            none + full,
        )
    if s.dropout and Recompute.SELECTIVE in p.recompute:
        return Refusal(
            f"plan.cuda_graphs=partial graphs attention, whose selective recompute megatron-core "
            f"refuses with attention dropout (model {s.name} has dropout; TransformerConfig)",
            none,
        )
    return None


MEGATRON_STATE_RULES = (*state_rules("megatron")[:3], check_megatron_overlap, check_megatron_cuda_graphs)
"""Megatron's (and Bridge's) family rules on the MoE software state; its routing rule is
``routing_rule("megatron")`` (a MODEL_RULE)."""


def check_torchtitan_cuda_graphs(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """torchtitan 0.3.0 ``Trainer.Config._validate_cuda_graphs``: no pipeline parallelism, and
    with ep > 1 only a dispatcher without host syncs (HybridEP with a non-blocking capacity,
    MinimalAsyncEP), which the standard all-to-all is not."""
    p = draft.plan
    if p.cuda_graphs is not CudaGraphs.FULL or (p.pp == 1 and p.ep == 1):
        return None
    why = (
        f"pp={p.pp}: CUDA graphs do not support pipeline parallelism yet"
        if p.pp > 1
        else f"ep={p.ep}: the standard all-to-all dispatcher synchronises with the host"
    )
    return Refusal(
        f"plan.cuda_graphs=full: torchtitan 0.3.0 refuses it with {why} "
        "(Trainer.Config._validate_cuda_graphs)",
        repair("cuda_graphs -> none", draft, replace(p, cuda_graphs=CudaGraphs.NONE)),
    )


TORCHTITAN_STATE_RULES = (*state_rules("torchtitan")[:3], check_torchtitan_cuda_graphs)
"""torchtitan's family rules on the MoE software state."""
