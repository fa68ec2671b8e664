"""Megatron-LM's rules (megatron-core 0.19.2): what a plan must satisfy to run as a
``pretrain_gpt.py`` launch, numbered as in docs/frameworks.md §2.3, plus one Megatron only hits at
run time: Megatron-FSDP (our ZeRO-2 and ZeRO-3) builds its DP x TP device mesh over the whole world
(``_get_dp_tp_mesh`` in ``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``), so it cannot run
with PP > 1. The exporter (paraplan/export/megatron.py) renders what passes."""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost import Axis, Plan
from paraplan.graph import ModelSpec
from paraplan.rules.base import (
    Draft,
    Fix,
    Refusal,
    RuleContext,
    SearchLimits,
    micro_batch_repairs,
    order_fixes,
    repair,
)
from paraplan.rules.checks import (
    context_split_rule,
    dense_model_rule,
    layer_kinds_rule,
    loss_chunks_rule,
    partial_recompute_rule,
    uniform_recompute_rule,
)
from paraplan.rules.megatron_layout import (
    HYBRID_SYMBOLS,
    compact_layout,
    hybrid_stage_pattern,
    layout_stages,
    stage_contents,
)
from paraplan.rules.moe_state import MEGATRON_STATE_RULES, routing_rule
from paraplan.rules.plans import order_matches, regroup
from paraplan.rules.pp_schedule import schedule_refusal_rule
from paraplan.rules.validity import (
    batch_splits,
    hybrid_pattern,
    mtp_layers,
    tp_splits_heads,
)

__all__ = [
    "RULES",
    "SEARCH",
    "MODEL_RULES",
    "LAYOUT_RULES",
    "ZERO_RULES",
    "ORDERS",
    "LLAMA3_ROPE_SCALING",
    "MLA_YARN_ORIGINAL_MAX_POSITIONS",
    "megatron_order",
    "tp_repairs",
    "HYBRID_SYMBOLS",
    "hybrid_pattern",
    "mtp_layers",
    "stage_contents",
    "layout_stages",
    "compact_layout",
    "mtp_placement_error",
    "hybrid_stage_pattern",
]


ORDERS: dict[str, tuple[Axis, ...]] = {
    "tp-cp-ep-dp-pp": (Axis.TP, Axis.CP, Axis.DP, Axis.PP),
    "tp-cp-ep-pp-dp": (Axis.TP, Axis.CP, Axis.PP, Axis.DP),
}
"""Megatron's rank orders (RankGenerator strings) as paraplan orders; the second needs a flag."""


LLAMA3_ROPE_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_positions": 8192}
"""The llama3 scaling megatron-core applies (``RotaryEmbedding._apply_scaling`` defaults in
megatron/core/models/common/embeddings/rotary_pos_embedding.py, 0.19.2); only the factor is a
flag."""
MLA_YARN_ORIGINAL_MAX_POSITIONS = 4096  # MLATransformerConfig.original_max_position_embeddings


# --------------------------------------------------------------------------- rules (§2.3)


def _divisors_below(n: int) -> list[int]:
    return [d for d in range(n - 1, 0, -1) if n % d == 0]


def _tp_ok(ctx: RuleContext, tp: int) -> bool:
    s = ctx.spec
    return tp_splits_heads(s, tp) and s.ffn_hidden % tp == 0 and s.moe_ffn_hidden % tp == 0


def tp_repairs(ctx: RuleContext, draft: Draft) -> tuple[Fix, ...]:
    """Repairs to the largest smaller tp that heads, query groups and ffn all accept."""
    for tp in _divisors_below(draft.plan.tp):
        if _tp_ok(ctx, tp):
            return repair(f"tp -> {tp}, dp absorbs the rest", draft, regroup(draft.plan, tp=tp))
    return ()


check_dense_model = dense_model_rule("rule: num_experts % expert-model-parallel-size == 0")
"""Rule 21: EP > 1 needs experts, and num_experts % ep == 0."""


def check_expert_data_parallel(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Rule 3: with tp-cp-ep-pp-dp and PP > 1, expert DP must equal dense DP (ep == cp)."""
    p = draft.plan
    if p.ep == 1 or p.pp == 1 or megatron_order(p) != "tp-cp-ep-pp-dp" or p.ep == p.cp:
        return None
    default = ORDERS["tp-cp-ep-dp-pp"]
    return Refusal(
        f"plan.ep={p.ep} under --use-tp-pp-dp-mapping with pp={p.pp}: Megatron needs the expert "
        f"data-parallel size (dp*cp/ep = {p.dp * p.cp // p.ep}) to equal dp={p.dp} when pp is "
        "not the outermost axis",
        order_fixes(draft, [("tp-cp-ep-dp-pp", default)]) + repair("ep -> 1", draft, replace(p, ep=1)),
    )


def check_batch_divides(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Rule 4: global batch % (micro-batch x dp) == 0 (micro-batch calculator)."""
    p, gb = draft.plan, ctx.job.global_batch
    if batch_splits(ctx.job, p):
        return None
    return Refusal(
        f"job.global_batch={gb} must be divisible by micro_batch*dp = "
        f"{p.micro_batch}*{p.dp} (global-batch-size rule)",
        micro_batch_repairs(draft, gb),
    )


def check_tensor_split(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Rules 5, 6, 8: heads % tp, query groups multiple or divisor of tp, ffn_hidden % tp."""
    tp, s = draft.plan.tp, ctx.spec
    if _tp_ok(ctx, tp):
        return None
    return Refusal(
        f"plan.tp={tp} must divide model heads={s.num_heads} and ffn_hidden={s.ffn_hidden}, and "
        f"kv_heads={s.num_kv_heads} must be a multiple or divisor of it (Megatron splits each "
        "across tensor ranks; ffn is only checked when the model is built)",
        tp_repairs(ctx, draft),
    )


check_context_split = context_split_rule("job.seq_len", "context-parallel load balancing")
"""Rule 20: seq_length % (2 x cp) == 0."""


def check_interleaving(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Rules 13, 17, 18: vp needs pp > 1, micro-batches % pp == 0 (a stage vp does not divide
    exports as account-for slots or a layout, pipeline_args)."""
    p = draft.plan
    if p.vp == 1:
        return None
    m = ctx.job.global_batch // (p.micro_batch * p.dp)
    if p.pp == 1:
        problem = f"plan.vp={p.vp} needs pipeline-model-parallel-size > 1"
    elif m % p.pp:
        problem = (
            f"the interleaved schedule needs the {m} micro-batches per step to be a multiple of pp={p.pp}"
        )
    else:
        return None
    return Refusal(problem, repair("vp -> 1", draft, replace(p, vp=1)))


check_uniform_recompute = uniform_recompute_rule(
    "--recompute-granularity, --recompute-method and --recompute-num-layers apply to every "
    "pipeline rank alike ('block' recomputes the first N layers of every stage, never none on "
    "some and full on others)"
)


check_recompute_layers = partial_recompute_rule(
    "--recompute-num-layers is one N for every pipeline rank (megatron/core/recompute.py "
    "checkpointed_forward, method 'block': the first N layers of each chunk); the stages need "
    "one N (a stage whose chunks hold at most N layers recomputes them all)",
    one_n=True,
)


def check_fsdp_without_pp(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Run-time rule: Megatron-FSDP (ZeRO-2/3) builds a DP x TP mesh over the whole world."""
    p = draft.plan
    if p.zero < 2 or p.pp == 1:
        return None
    return Refusal(
        f"plan.zero={p.zero} maps to --use-megatron-fsdp, whose DP x TP device mesh spans the "
        f"whole world and so fails at start-up with pp={p.pp} > 1 "
        "(mcore_fsdp_adapter._get_dp_tp_mesh)",
        repair("zero -> 1 (distributed optimizer)", draft, replace(p, zero=1))
        + repair("pp -> 1, dp absorbs it", draft, regroup(p, pp=1)),
    )


def megatron_order(plan: Plan) -> str | None:
    """The Megatron rank order that places ranks as ``plan`` does (default first), or None."""
    return next((name for name, order in ORDERS.items() if order_matches(plan, order)), None)


def check_rank_order(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """RankGenerator supports tp-cp-ep-dp-pp and (with a flag) tp-cp-ep-pp-dp only."""
    if megatron_order(draft.plan) is not None:
        return None
    order = "-".join(a.value for a in draft.plan.order)
    return Refusal(
        f"plan.order={order} is neither of Megatron's rank orders ({' nor '.join(ORDERS)})",
        order_fixes(draft, ORDERS.items()),
    )


def check_one_launch(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """Mixed-GPU pools: one torchrun job has one --nproc-per-node for every node."""
    pools = ctx.cluster.pools
    used = sorted({pools[p].devices_per_node for p in set(draft.plan.stage_pools)}) if pools else []
    if len(used) <= 1:
        return None
    return Refusal(
        f"plan.stage_pools={list(draft.plan.stage_pools)} uses pools with {used} GPUs "
        "per node, but one torchrun job takes one --nproc-per-node"
    )


def _architecture_gap(spec: ModelSpec) -> str | None:
    """What of ``spec`` megatron-core 0.19.2 cannot build, or None."""
    rope = spec.rope
    if spec.position_embedding == "alibi":
        return (
            "ALiBi position biases: megatron-core has no ALiBi (--position-embedding-type "
            "takes learned_absolute, rope, yarn, mrope, relative or none)"
        )
    if spec.parallel_residual:
        return (
            "a parallel attention + MLP residual: megatron-core's TransformerLayer runs "
            "attention, then the MLP on its output"
        )
    if spec.is_moe and spec.router.score == "sigmoid" and not spec.router.normalize_top_k:
        return (
            "sigmoid routing without normalising the top-k weights: megatron-core "
            "normalises sigmoid scores whenever top_k > 1"
        )
    if spec.position_embedding != "rope" or not rope.scaling:
        return None
    if spec.is_mla and rope.scaling != "yarn":
        return f"{rope.scaling} RoPE scaling under latent attention (MLA takes rope or yarn)"
    if spec.is_mla and rope.original_max_positions != MLA_YARN_ORIGINAL_MAX_POSITIONS:
        return (
            f"YaRN over {rope.original_max_positions} original positions under latent "
            f"attention: MLATransformerConfig fixes {MLA_YARN_ORIGINAL_MAX_POSITIONS} (no flag)"
        )
    if spec.is_mla and not rope.round_correction_range:
        return "YaRN without rounding the correction range under latent attention (no flag)"
    if spec.is_mla and rope.fraction != 1:
        return f"rotating {rope.fraction:g} of the head under latent attention"
    if rope.scaling == "llama3":
        ours = {k: getattr(rope, k) for k in LLAMA3_ROPE_SCALING}
        if ours != LLAMA3_ROPE_SCALING:
            return (
                f"llama3 RoPE scaling with {ours}: --use-rope-scaling fixes "
                f"{LLAMA3_ROPE_SCALING} (only the factor is a flag)"
            )
    return None


def check_architecture(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """The model's architecture is one megatron-core builds (positions, residual, RoPE)."""
    gap = _architecture_gap(ctx.spec)
    if gap is None:
        return None
    return Refusal(f"model {ctx.spec.name} has {gap}, so Megatron would train another model")


def check_moe_bias(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """megatron-core: biased linear layers in a MoE model need expert tensor parallel size 1."""
    p, s = draft.plan, ctx.spec
    if not (s.is_moe and s.linear_bias) or p.expert_tp == 1:
        return None
    return Refusal(
        f"model {s.name} has biased expert layers, which megatron-core supports only "
        f"with expert tensor parallel size 1 (plan: {p.expert_tp})",
        repair("expert tp -> 1", draft, replace(p, etp=1)),
    )


def mtp_placement_error(spec: ModelSpec, plan: Plan) -> str | None:
    """Why Megatron cannot place the plan's MTP layers, or None (``validate_layer_layout``,
    pipeline_parallel_layer_layout.py 0.19.2: all in one virtual stage, the last chunk of its
    pp rank; a hybrid model needs an MTP block pattern the model does not give)."""
    mtp = mtp_layers(spec)
    if not mtp:
        return None
    if hybrid_pattern(spec):
        return (
            f"model {spec.name} is a hybrid model with {mtp} MTP layers: --hybrid-layer-pattern "
            "needs each MTP depth's layer pattern after '/', which the model does not give"
        )
    if len(plan.layers_per_stage) != plan.pp:
        return None  # a layout before its split: nothing placed yet
    stages = [j for j, (_, m) in enumerate(stage_contents(spec, plan)) if m]
    where = [(j % plan.pp, j // plan.pp) for j in stages]
    if len(stages) == 1 and where[0][1] == plan.vp - 1:
        return None
    return (
        f"the plan puts the {mtp} MTP layers on virtual stages {stages} ((pp rank, chunk) "
        f"{where}); Megatron needs them all in one stage, the last chunk of its pp rank "
        "(PipelineParallelLayerLayout.validate_layer_layout)"
    )


def check_mtp_placement(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """MTP layers sit where Megatron can build them (``mtp_placement_error``)."""
    error = mtp_placement_error(ctx.spec, draft.plan)
    return None if error is None else Refusal(error)


def check_hybrid_pattern(ctx: RuleContext, draft: Draft) -> Refusal | None:
    """A hybrid model's pattern is one Megatron symbol (HYBRID_SYMBOLS) per layer, and attention
    is either standard ('*') or latent/sparse ('+', 'D'), not both (``_validate_pattern``)."""
    pattern, s = hybrid_pattern(ctx.spec), ctx.spec
    if pattern is None:
        return None
    bad = sorted(set(pattern) - HYBRID_SYMBOLS)
    if bad:
        return Refusal(
            f"model {s.name} layer_pattern has {bad}: --hybrid-layer-pattern takes one of "
            f"{''.join(sorted(HYBRID_SYMBOLS))} per layer"
        )
    if len(pattern) != s.num_layers:
        return Refusal(
            f"model {s.name} layer_pattern has {len(pattern)} layers but the model "
            f"{s.num_layers}: Megatron takes the layer count from the pattern"
        )
    if "*" in pattern and ("+" in pattern or "D" in pattern):
        return Refusal(f"model {s.name} mixes standard and latent/sparse attention layers")
    return None


check_moe_routing = routing_rule("megatron")
"""job.moe_routing: Megatron runs dropless, forced balance and capacity (rules/moe_state.py)."""

check_layer_kinds = layer_kinds_rule(
    "Megatron-LM's pretrain_gpt.py / pretrain_mamba.py as exported (no vision encoder, no "
    "chunked attention flag)",
    frozenset({"hybrid", "mtp", "window", "latent_moe"}),  # --moe-latent-size (megatron-core 0.19)
)

check_loss_chunks = loss_chunks_rule(
    "Megatron-Core (megatron, nemo)",
    "fuses the cross entropy (--cross-entropy-loss-fusion, megatron-core 0.19.2) but does not chunk it",
)
"""job.loss_chunks: torchtitan only (rules/checks.py)."""

check_pp_schedule = schedule_refusal_rule("megatron")
"""plan.pp_schedule: the schedules megatron runs (rules/pp_schedule.py)."""

RULES = (
    check_loss_chunks,
    check_architecture,
    check_layer_kinds,
    check_hybrid_pattern,
    check_mtp_placement,
    check_moe_bias,
    check_dense_model,
    check_batch_divides,
    check_tensor_split,
    check_context_split,
    check_interleaving,
    check_uniform_recompute,
    check_recompute_layers,
    check_fsdp_without_pp,
    check_rank_order,
    check_expert_data_parallel,
    check_one_launch,
    *MEGATRON_STATE_RULES,
    check_moe_routing,
    check_pp_schedule,
)

SEARCH = SearchLimits(partial_recompute=True)
"""solver.target=megatron: uneven stages through --pipeline-model-parallel-layout; one recompute
setting for every rank (with --recompute-method block, one number of layers)."""
MODEL_RULES = (
    check_loss_chunks,
    check_architecture,
    check_layer_kinds,
    check_hybrid_pattern,
    check_moe_routing,
)
"""The RULES that read only the model and job (solver.target checks them once, first)."""
LAYOUT_RULES = (check_fsdp_without_pp, check_rank_order, check_expert_data_parallel)
"""The RULES that read the ZeRO stage or the rank order, which the solver picks per layout; the
others give one verdict for a whole layout family (solver.target checks those once per family)."""
ZERO_RULES = (check_fsdp_without_pp,)
"""The LAYOUT_RULES that read the ZeRO stage but neither the rank order nor the slice shape: one
verdict for every placement of a family with its ZeRO stage (rules/filter.py asks them once per
such family, and the solver drops a family they refuse before bounding it)."""
