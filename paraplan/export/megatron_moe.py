"""The MoE software state as Megatron-LM flags and as megatron-core TransformerConfig fields.

``plan.moe_dispatcher``, ``plan.moe_overlap``, ``plan.cuda_graphs`` and ``job.moe_routing``
(rules/moe_state.py says which framework runs which) as (concept, value) pairs: ``megatron.FLAGS``
names the Megatron-LM flags, and nemo.py writes the field pairs as Megatron-Bridge / NeMo 2
``model.*`` overrides. Values are megatron-core 0.19.2's (arguments built from TransformerConfig):

- dispatcher: ``--moe-token-dispatcher-type alltoall | allgather``, or ``flex`` with
  ``--moe-flex-dispatcher-backend deepep | hybridep``;
- EP overlap: ``--overlap-moe-expert-parallel-comm`` (``--delay-wgrad-compute`` is optional and
  needs Transformer Engine >= 2.10, so it is left to the user);
- CUDA graphs: partial = ``--cuda-graph-impl transformer_engine --cuda-graph-modules attn
  moe_router moe_preprocess`` (attention only for a dense model), the experts outside the graph;
  full = ``--cuda-graph-impl full_iteration`` with ``--no-check-for-nan-in-loss-and-grad``
  (validate_args requires it). Megatron-Bridge 0.6.2 pairs with megatron-core releases whose field
  is ``cuda_graph_scope`` (0.19.2 still takes it, deprecated) and whose full-iteration graph is
  impl ``local`` with scope ``full_iteration`` (0.19.2 migrates it to impl ``full_iteration``;
  Bridge's ``is_full_iteration_cuda_graph`` reads both), and asserts
  ``rerun_state_machine.check_for_nan_in_loss`` off with it (ConfigContainer.validate);
- router and permute fusion (``job.moe_router_fusion``, ``job.moe_permute_fusion``):
  ``--moe-router-fusion``, ``--moe-permute-fusion`` (store_true flags of TransformerConfig's
  ``moe_router_fusion`` / ``moe_permute_fusion``, default False), written when set; Bridge's
  fields always on a MoE model;
- routing: ``--moe-router-force-load-balancing``, or ``--moe-expert-capacity-factor F`` with
  megatron-core's drop policy ``probs`` written out (tokens of the lowest router probability go
  first), inputs not padded to capacity.

Bridge's fields are written whatever their value (a recipe may set others); Megatron-LM's flags
only when they differ from megatron-core's defaults (the dispatcher always: its default is
allgather).
"""

from __future__ import annotations

from paraplan.cost import CudaGraphs, Job, MoEDispatcher, MoERouting
from paraplan.export.context import ExportContext
from paraplan.graph import ModelSpec

__all__ = [
    "DISPATCHERS",
    "PARTIAL_GRAPH_MODULES",
    "DROP_POLICY",
    "graph_modules",
    "dispatcher_args",
    "state_args",
    "state_fields",
    "BRIDGE_FULL_GRAPH_PATHS",
]

DISPATCHERS: dict[MoEDispatcher, tuple[str, str | None]] = {
    MoEDispatcher.ALLTOALL: ("alltoall", None),
    MoEDispatcher.ALLGATHER: ("allgather", None),
    MoEDispatcher.DEEPEP: ("flex", "deepep"),
    MoEDispatcher.HYBRIDEP: ("flex", "hybridep"),
}
"""plan.moe_dispatcher -> (moe_token_dispatcher_type, moe_flex_dispatcher_backend or None)."""

PARTIAL_GRAPH_MODULES = ("attn", "moe_router", "moe_preprocess")
"""plan.cuda_graphs=partial on a MoE model: attention, the router (with unoverlapped shared
experts) and the MoE preprocess captured per layer; the routed experts run eagerly."""
DROP_POLICY = "probs"  # TransformerConfig.moe_token_drop_policy's default, written out
FULL_GRAPH_IMPL = "full_iteration"  # megatron-core 0.19.2 --cuda-graph-impl
BRIDGE_FULL_GRAPH = ("local", ["full_iteration"])  # (cuda_graph_impl, cuda_graph_scope) for Bridge
BRIDGE_FULL_GRAPH_PATHS = {"rerun_state_machine.check_for_nan_in_loss": False}
"""ConfigContainer paths Bridge asserts with a full-iteration CUDA graph (config.py validate)."""


def graph_modules(spec: ModelSpec) -> tuple[str, ...]:
    """The per-layer CUDA-graph modules of plan.cuda_graphs=partial: attention, and on a MoE model
    the router and preprocess (megatron-core refuses moe_router graphs on a dense model)."""
    return PARTIAL_GRAPH_MODULES if spec.is_moe else PARTIAL_GRAPH_MODULES[:1]


def _fusions(job: Job) -> list[tuple[str, bool]]:
    """(megatron.FLAGS key, on) of the router and permute fusion (TransformerConfig moe_<key>)."""
    return [("router_fusion", job.moe_router_fusion), ("permute_fusion", job.moe_permute_fusion)]


def dispatcher_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """``--moe-token-dispatcher-type`` (and the flex backend) of the plan's dispatcher."""
    kind, backend = DISPATCHERS[ctx.plan.moe_dispatcher]
    return [("dispatcher", kind)] + ([("flex_backend", backend)] if backend else [])


def state_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """Megatron-LM flags (megatron.FLAGS keys) for EP overlap, CUDA graphs and routing; a tuple
    value is several arguments of one flag."""
    p, job, s = ctx.plan, ctx.inst.job, ctx.spec
    args: list[tuple[str, object]] = []
    if p.moe_overlap:
        args.append(("moe_overlap", None))
    if p.cuda_graphs is CudaGraphs.PARTIAL:
        args += [("cuda_graph_impl", "transformer_engine"), ("cuda_graph_modules", graph_modules(s))]
    elif p.cuda_graphs is CudaGraphs.FULL:
        args += [("cuda_graph_impl", FULL_GRAPH_IMPL), ("no_nan_check", None)]
    if s.is_moe:
        args += [(k, None) for k, on in _fusions(job) if on]
    if s.is_moe and job.moe_routing is MoERouting.FORCE_BALANCED:
        args.append(("force_balance", None))
    elif s.is_moe and job.moe_routing is MoERouting.CAPACITY:
        args += [("capacity_factor", job.moe_capacity_factor), ("drop_policy", DROP_POLICY)]
    return args


def state_fields(ctx: ExportContext) -> list[tuple[str, object]]:
    """The same state as megatron-core TransformerConfig / ModelParallelConfig fields, the names
    Megatron-Bridge 0.6.2's GPTModelProvider (a TransformerConfig) takes: every MoE field written
    (a recipe may set others), and the CUDA-graph fields on any model."""
    p, job, s = ctx.plan, ctx.inst.job, ctx.spec
    out: list[tuple[str, object]] = []
    if s.is_moe:
        kind, backend = DISPATCHERS[p.moe_dispatcher]
        out.append(("moe_token_dispatcher_type", kind))
        if backend:
            out.append(("moe_flex_dispatcher_backend", backend))
        capacity = job.moe_capacity_factor if job.moe_routing is MoERouting.CAPACITY else None
        out += [(f"moe_{k}", on) for k, on in _fusions(job)]
        out += [
            ("overlap_moe_expert_parallel_comm", p.moe_overlap),
            ("moe_router_force_load_balancing", job.moe_routing is MoERouting.FORCE_BALANCED),
            ("moe_expert_capacity_factor", capacity),
            ("moe_pad_expert_input_to_capacity", False),
        ]
        if capacity is not None:
            out.append(("moe_token_drop_policy", DROP_POLICY))
        if p.moe_overlap:  # TransformerConfig refuses shared-expert overlap with EP overlap
            out.append(("moe_shared_expert_overlap", False))
    if p.cuda_graphs is CudaGraphs.PARTIAL:
        out += [("cuda_graph_impl", "transformer_engine"), ("cuda_graph_scope", list(graph_modules(s)))]
    elif p.cuda_graphs is CudaGraphs.FULL:
        impl, scope = BRIDGE_FULL_GRAPH
        out += [("cuda_graph_impl", impl), ("cuda_graph_scope", scope)]
    else:
        out.append(("cuda_graph_impl", "none"))
    return out
