"""One transformer block's (or an end's) cost for one micro-batch: compute, activations, params,
and the communication its placement implies (TP, CP, EP, ZeRO-2/3 traffic), per recompute mode.

``block_work`` is the placement-free part (compute, stored activations, parameters per device);
``block_costs`` adds the traffic on the layout's spans (cost/spans.py). cost/stage.py combines
blocks into stages.

Size: one module because a block's work, the traffic its placement adds and the ends' costs share
``Work`` and ``Exchange`` term for term (each formula lives in its own module: ep, cp, tp, dp,
host, recompute, offload); splitting them would pass those records between modules unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from paraplan.cost.compute import LayerTime, layer_forward, layer_tokens
from paraplan.cost.cp import CPCost, cp_layer_comm
from paraplan.cost.dispatch import dispatcher_sm_fraction
from paraplan.cost.dp import micro_batch_reduce_s, reduces_across_micro_batches, zero3_gather_s
from paraplan.cost.ep import (
    EPComm,
    ep_comm_overlapped,
    ep_exposed_s,
    ep_layer_comm,
    expert_forward,
    moe_tp_collectives,
    steady_fraction,
)
from paraplan.cost.host import fusion_launch_s, moe_launch_s, moe_pass_s
from paraplan.cost.offload import block_offload_bytes, offload_exposed_s
from paraplan.cost.plan import Job, Layout, Recompute
from paraplan.cost.pp_schedule import hides_ep_comm, paired_share
from paraplan.cost.recompute import block_input_bytes, recompute_forward_s, stored_activation_bytes
from paraplan.cost.recompute_modules import modules_recompute_s, recomputes_moe_layer
from paraplan.cost.spans import Spans
from paraplan.cost.torus import collective_matmul_exposed_s
from paraplan.cost.tp import TPComm, tp_comm
from paraplan.graph import Layer, LayerGraph, LayerKind
from paraplan.hardware import Accelerator, Cluster, Efficiency

__all__ = [
    "LOGITS_BYTES_PER_ELEMENT",
    "BlockCost",
    "EndCost",
    "Exchange",
    "Work",
    "layer_exchange",
    "ZERO_BLOCK",
    "block_costs",
    "block_params_per_device",
    "block_work",
    "end_cost",
    "end_work",
    "layer_time",
    "zero_exposed_s",
]

LOGITS_BYTES_PER_ELEMENT = 6  # bf16 logits + fp32 softmax for the fused cross-entropy


@dataclass(frozen=True, slots=True)
class BlockCost:
    """One transformer block, one micro-batch, one recompute mode. Units: seconds, bytes."""

    forward_s: float
    backward_s: float  # includes the recompute forward
    compute_s: float  # forward + backward + recompute, compute only
    comm_s: float  # exposed communication: TP, CP, ZeRO-3 gathers
    activation_bytes: float  # kept per in-flight micro-batch
    working_bytes: float  # transient peak while this block's backward runs

    @property
    def time_s(self) -> float:
        return self.compute_s + self.comm_s

    def minus(self, other: BlockCost, times: float = 1.0) -> BlockCost:
        """times x (self - other), field by field (a correction, may be negative)."""
        return BlockCost(
            *(
                times * (getattr(self, f) - getattr(other, f))
                for f in (
                    "forward_s",
                    "backward_s",
                    "compute_s",
                    "comm_s",
                    "activation_bytes",
                    "working_bytes",
                )
            )
        )


ZERO_BLOCK = BlockCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class EndCost:
    """The embedding (first stage) or final norm + LM head + loss (last stage)."""

    compute_s: float
    comm_s: float
    backward_s: float
    params: float  # per device
    activation_bytes: float  # transient (logits) + stored_bytes once (memory.py multiplies the
    # stored part by the stage's in-flight micro-batches, like the blocks')
    expert_params: float = 0.0  # per device (the first stage's dense-layer correction; MTP experts)
    stored_bytes: float = 0.0  # the part of activation_bytes kept per in-flight micro-batch
    # (vision encoder, MTP block): a stage holding k micro-batches keeps k x this


def layer_time(ly: Layer, plan: Layout, job: Job, accel: Accelerator, eff: Efficiency) -> LayerTime:
    """Forward time of a layer, routed experts (ep.expert_forward) included."""
    t = layer_forward(ly, plan, job, accel, eff)
    if ly.experts is None:
        return t
    e = expert_forward(ly.experts, plan, job, accel, eff)
    return replace(
        t,
        gemm_s=t.gemm_s + e.gemm_s,
        attention_s=t.attention_s + e.attention_s,
        elementwise_s=t.elementwise_s + e.elementwise_s,
    )


def block_params_per_device(layers: list[Layer], plan: Layout) -> tuple[float, float]:
    """(params, expert params) one device holds of a block: TP-sharded weights / tp plus the
    replicated ones; routed experts / (ep x etp) (plan.expert_tp: etp, or tp when unset)."""
    params = sum(ly.tp_params / plan.tp + ly.replicated_params for ly in layers)
    experts = sum(ly.expert_params for ly in layers) / (plan.ep * plan.expert_tp)
    return params, experts


@dataclass(frozen=True, slots=True)
class Exchange:
    """The communication one layer implies, before placement: ``tp_collectives`` TP all-reduce
    pairs (one per row-parallel output projection: attention, Mamba, dense MLP, a ViT block's
    two; MoE: ep.moe_tp_collectives) of ``tokens`` x ``hidden`` activations; a cp K/V exchange
    of width ``kv_dim`` (0: none) hidden behind ``attention``; an EP all-to-all of ``top_k``
    routed copies (0: none) of ``dispatch_hidden`` activations (0: ``hidden``; LatentMoE: the
    latent width)."""

    hidden: int
    tokens: float
    tp_collectives: float
    kv_dim: int = 0
    attention: LayerTime | None = None
    top_k: int = 0
    dispatch_hidden: int = 0


def layer_exchange(layer: Layer, graph: LayerGraph, time: LayerTime, plan: Layout, job: Job) -> Exchange:
    """The Exchange of ``layer`` (see Exchange): embedding, norms and LM heads exchange nothing
    here (their vocab-parallel reductions are not counted); Mamba layers have no cp exchange
    (cost.plan.check_layer_kinds refuses cp > 1 for them); vision layers none (images are not
    split by cp)."""
    spec = graph.spec
    n = layer_tokens(layer, plan, job)
    kind = layer.kind
    if kind is LayerKind.ATTENTION:
        return Exchange(spec.hidden, n, 1.0, spec.kv_dim, time)
    if kind is LayerKind.MOE and layer.experts is not None:
        top_k = layer.experts.top_k
        shared = any(g.name.startswith("shared") for g in layer.gemms)
        width = layer.experts.gemms[0].in_dim  # the routed copies' width: hidden, or LatentMoE's
        collectives = moe_tp_collectives(top_k, shared, plan, job, routed_width=width / spec.hidden)
        return Exchange(spec.hidden, n, collectives, top_k=top_k, dispatch_hidden=width)
    if kind in (LayerKind.MLP, LayerKind.MAMBA, LayerKind.MTP):
        return Exchange(spec.hidden, n, 1.0)  # MTP: eh_proj's all-gather, counted as one pair
    if kind is LayerKind.VISION and layer.attn_core_flops_per_token_per_seq:
        return Exchange(spec.vision.hidden, n, 2.0)  # attention and MLP
    if kind is LayerKind.PROJECTOR:
        return Exchange(spec.hidden, n, 1.0)
    return Exchange(spec.hidden, n, 0.0)


@dataclass(frozen=True, slots=True)
class Work:
    """The placement-free part of a block's (or an end's) cost: compute, activations, params.
    Depends on tp, cp, cp_comm (the attention kernels, compute.attention_shape), ep, micro-batch
    and SP only."""

    times: tuple[LayerTime, ...]
    attention: LayerTime | None
    forward_s: float
    backward_s: float
    recompute_s: dict[Recompute, float]
    stored_bytes: dict[Recompute, float]
    working_bytes: float  # FULL recompute's re-materialised block
    params: float
    expert_params: float
    top_k: int  # 0: no routed experts
    exchanges: tuple[Exchange, ...] = ()
    # per mode, the part of stored_bytes job.offload_modules move to host memory (cost/offload.py)
    offload_bytes: dict[Recompute, float] = field(default_factory=dict)


def block_work(graph: LayerGraph, index: int, plan: Layout, job: Job, cluster: Cluster) -> Work:
    accel = cluster.accelerator
    eff = cluster.efficiency
    layers = graph.block_layers(index)
    params, expert_params = block_params_per_device(layers, plan)
    times = tuple(layer_time(ly, plan, job, accel, eff) for ly in layers)
    moe = next((ly.experts for ly in layers if ly.experts), None)
    stored_none = sum(stored_activation_bytes(ly, plan, job, Recompute.NONE) for ly in layers)
    forward_s = sum(t.total_s for t in times)
    backward_s = sum(t.backward_s() for t in times)
    recompute_s = {r: sum(recompute_forward_s(t, r) for t in times) for r in Recompute}
    if job.recompute_modules:  # Megatron's module-level selective recompute
        recompute_s[Recompute.SELECTIVE] = sum(
            modules_recompute_s(ly, t, plan, job, accel, eff, job.recompute_modules)
            for ly, t in zip(layers, times, strict=True)
        )
    if moe:  # host launches and the dispatcher's sync (cost/host.py), once per pass
        fused = fusion_launch_s(job, graph.spec.router, moe.top_k, plan.cuda_graphs)
        base = moe_launch_s(plan, max(1, moe.num_experts // plan.ep), eff, job.precision)
        launch, backward_launch = base + fused.forward_s, 2 * base + fused.backward_s
        forward_s, backward_s = (
            moe_pass_s(forward_s, launch, plan),
            moe_pass_s(backward_s, backward_launch, plan),
        )
        recompute_s[Recompute.FULL] = moe_pass_s(recompute_s[Recompute.FULL], launch, plan)
        if recomputes_moe_layer(job.recompute_modules):
            recompute_s[Recompute.SELECTIVE] = moe_pass_s(recompute_s[Recompute.SELECTIVE], launch, plan)
    work = Work(
        times=times,
        attention=next(
            (t for t, ly in zip(times, layers, strict=True) if ly.kind is LayerKind.ATTENTION), None
        ),
        forward_s=forward_s,
        backward_s=backward_s,
        recompute_s=recompute_s,
        stored_bytes={
            Recompute.NONE: stored_none,
            Recompute.SELECTIVE: sum(
                stored_activation_bytes(ly, plan, job, Recompute.SELECTIVE, is_tpu=accel.is_tpu)
                for ly in layers
            ),
            Recompute.FULL: block_input_bytes(graph.spec.hidden, plan, job),
        },
        working_bytes=stored_none,
        params=params,
        expert_params=expert_params,
        top_k=moe.top_k if moe else 0,
        exchanges=tuple(layer_exchange(ly, graph, t, plan, job) for ly, t in zip(layers, times, strict=True)),
    )
    return replace(work, offload_bytes=block_offload_bytes(layers, plan, job, work.stored_bytes))


def zero_exposed_s(
    gather_s: float,
    reduce_s: float,
    forward_s: float,
    backward_s: float,
    overlap: bool,
    into_next_forward: bool = False,
) -> float:
    """Exposed ZeRO-2/3 traffic of one block, one micro-batch. Formula: max(0, gather - forward)
    + max(0, gather + reduce - backward - spill) when gradient communication overlaps backward
    (job.overlap_dp_comm), spill = max(0, forward - gather), the next micro-batch's forward's
    idle link, when the reduce-scatter runs on into it (``into_next_forward``: cost/dp.py
    reduces_across_micro_batches), else 0; else the reduce-scatter is exposed whole: max(0,
    gather - forward) + max(0, gather - backward) + reduce (the parameter prefetch still overlaps:
    DeepSpeed ZeRO-3 ``overlap_comm`` defaults to false and governs the gradient reduction only;
    DeepSpeed docs, ZeRO configuration). Units: seconds."""
    if overlap:
        spill = max(0.0, forward_s - gather_s) if into_next_forward else 0.0
        return max(0.0, gather_s - forward_s) + max(0.0, gather_s + reduce_s - backward_s - spill)
    return max(0.0, gather_s - forward_s) + max(0.0, gather_s - backward_s) + reduce_s


def _exchange_comm(
    exchanges: tuple[Exchange, ...], plan: Layout, job: Job, cluster: Cluster, spans: Spans
) -> tuple[TPComm, list[CPCost], EPComm]:
    """TP, CP (one per attention layer) and EP traffic of ``exchanges`` on the layout's spans."""
    tp_f = tp_b = ep_f = ep_b = 0.0
    for e in exchanges:
        tp = tp_comm(e.hidden, e.tp_collectives, plan, job, cluster, span=spans.tp, tokens=e.tokens)
        tp_f, tp_b = tp_f + tp.forward_s, tp_b + tp.backward_s
        if e.top_k:
            ep = ep_layer_comm(e.dispatch_hidden or e.hidden, e.top_k, plan, job, cluster, span=spans.ep)
            ep_f, ep_b = ep_f + ep.forward_s, ep_b + ep.backward_s
    cps = [
        cp_layer_comm(e.kv_dim, e.attention, plan, job, cluster, span=spans.cp)
        for e in exchanges
        if e.kv_dim and e.attention is not None
    ]
    return TPComm(tp_f, tp_b), cps, EPComm(ep_f, ep_b)


def _overlapped_ep_s(work: Work, ep: EPComm, rec_s: float, plan: Layout, job: Job, cluster: Cluster) -> float:
    """The block's exposed all-to-all under the 1F1B EP overlap (ep.ep_exposed_s): its MoE
    layers' compute is the experts side, the rest (attention, norms) the attention side; the
    recompute forward runs with the backward."""
    moe_f = sum(t.total_s for t, e in zip(work.times, work.exchanges, strict=True) if e.top_k)
    moe_b = sum(t.backward_s() for t, e in zip(work.times, work.exchanges, strict=True) if e.top_k)
    other_f = sum(t.total_s for t in work.times) - moe_f
    other_b = sum(t.backward_s() for t in work.times) - moe_b + rec_s
    sm = dispatcher_sm_fraction(plan.moe_dispatcher, cluster.accelerator)
    return ep_exposed_s(ep, other_f, other_b, moe_f, moe_b, _paired(plan, job), sm)


def _paired(plan: Layout, job: Job) -> float:
    """Share of passes run beside another micro-batch's: DualPipe's pairs (pp_schedule.py
    paired_share) or Megatron's 1F1B EP overlap (ep.steady_fraction)."""
    if hides_ep_comm(plan.pp_schedule):
        return paired_share(plan.pp, plan.num_micro_batches(job))
    return steady_fraction(plan, job)


ExchangeComm = tuple[TPComm, list[CPCost], EPComm]
"""A block's TP, CP (one per attention layer) and EP traffic (``exchange_comm``)."""


def exchange_comm(work: Work, plan: Layout, job: Job, cluster: Cluster, spans: Spans) -> ExchangeComm:
    """The TP, CP and EP traffic of ``work``'s layers on the layout's spans: reads the TP, CP and
    EP spans, the work and, of the layout, tp, cp, ep, micro-batch, SP, cp_comm and the
    dispatcher (cost/tp.py ``tp_comm``, cost/cp.py ``cp_layer_comm``, cost/ep.py
    ``ep_layer_comm``), none of dp, pp, vp, ZeRO or the schedule."""
    return _exchange_comm(work.exchanges, plan, job, cluster, spans)


def block_costs(
    work: Work,
    graph: LayerGraph,
    plan: Layout,
    job: Job,
    cluster: Cluster,
    spans: Spans,
    comm: ExchangeComm | None = None,
) -> dict[Recompute, BlockCost]:
    """A block's cost under each recompute mode: its work plus the communication the plan's
    placement implies (TP, CP, EP, ZeRO-2/3 traffic). ``comm``: ``exchange_comm`` of the block,
    when the caller has it."""
    tp, cps, ep = comm if comm is not None else _exchange_comm(work.exchanges, plan, job, cluster, spans)
    dp, edp = spans.dp, spans.edp
    gather = zero3_gather_s(work.params, plan, cluster, span=dp) + zero3_gather_s(
        work.expert_params, plan, cluster, expert=True, span=edp
    )
    reduce = micro_batch_reduce_s(work.params, plan, job, cluster, span=dp) + micro_batch_reduce_s(
        work.expert_params, plan, job, cluster, expert=True, span=edp
    )
    fwd, bwd = work.forward_s, work.backward_s
    spill = reduces_across_micro_batches(plan)  # the reduce-scatter runs on into the next forward
    cp_working = max((c.working_bytes for c in cps), default=0.0)
    out: dict[Recompute, BlockCost] = {}
    for recompute in Recompute:
        is_full = recompute is Recompute.FULL
        # the forward all-to-all runs again where whole MoE layers are recomputed
        again = is_full or (recompute is Recompute.SELECTIVE and recomputes_moe_layer(job.recompute_modules))
        rec = work.recompute_s[recompute]
        tp_s = tp.forward_s + tp.backward_s + (tp.forward_s if is_full else 0.0)
        if cluster.torus is not None:  # XLA's collective matmul (cost/torus.py)
            tp_s = collective_matmul_exposed_s(tp.forward_s, fwd) * (
                2 if is_full else 1
            ) + collective_matmul_exposed_s(tp.backward_s, bwd + rec)
        cp_s = sum(c.exposed_forward_s * (2 if is_full else 1) + c.exposed_backward_s for c in cps)
        ep_s = ep.forward_s * (2 if again else 1) + ep.backward_s
        if ep_comm_overlapped(plan) and ep_s > 0:
            ep_s = (ep.forward_s if again else 0.0) + _overlapped_ep_s(work, ep, rec, plan, job, cluster)
        zero_s = zero_exposed_s(gather, reduce, fwd, bwd + rec, job.overlap_dp_comm, spill)
        moved = work.offload_bytes.get(recompute, 0.0)  # to host and back, one layer's kept (offload.py)
        off_s = offload_exposed_s(moved, fwd, bwd + rec, cluster.accelerator)
        out[recompute] = BlockCost(
            forward_s=fwd,
            backward_s=bwd + rec,
            compute_s=fwd + bwd + rec,
            comm_s=tp_s + cp_s + ep_s + zero_s + off_s,
            activation_bytes=work.stored_bytes[recompute] - moved,
            working_bytes=(work.working_bytes if is_full else 0.0) + cp_working + moved,
        )
    return out


_END_ONLY = (LayerKind.EMBEDDING, LayerKind.FINAL_NORM, LayerKind.LM_HEAD)


def end_work(graph: LayerGraph, names: tuple[str, ...], plan: Layout, job: Job, cluster: Cluster) -> Work:
    """The head's or tail's work: its layers' compute (routed experts included), parameters per
    device (routed experts / (ep x etp)), the logits of each LM head (the MTP heads' too) as a
    transient buffer, and the activations its vision / MTP layers keep per micro-batch (they
    are not recomputed)."""
    accel = cluster.accelerator
    eff = cluster.efficiency
    layers = [graph.layer(n) for n in names]
    times = tuple(layer_time(ly, plan, job, accel, eff) for ly in layers)
    heads = sum(ly.kind is LayerKind.LM_HEAD for ly in layers)
    n = plan.micro_batch * job.seq_len / plan.cp
    act = heads * n * graph.spec.vocab / plan.tp * LOGITS_BYTES_PER_ELEMENT
    stored = sum(
        stored_activation_bytes(ly, plan, job, Recompute.NONE) for ly in layers if ly.kind not in _END_ONLY
    )
    params, expert_params = block_params_per_device(layers, plan)
    moe = next((ly.experts for ly in layers if ly.experts), None)
    return Work(
        times=times,
        attention=None,
        forward_s=sum(t.total_s for t in times),
        backward_s=sum(t.backward_s() for t in times),
        recompute_s={},
        stored_bytes=dict.fromkeys(Recompute, stored),
        working_bytes=act,
        params=params,
        expert_params=expert_params,
        top_k=moe.top_k if moe else 0,
        exchanges=tuple(layer_exchange(ly, graph, t, plan, job) for ly, t in zip(layers, times, strict=True)),
    )


def end_cost(work: Work, plan: Layout, job: Job, cluster: Cluster, spans: Spans) -> EndCost:
    """An end's cost: compute, its ZeRO-3 gathers and gradient reduction, and the TP / CP / EP
    traffic of its vision or MTP layers (exposed as in block_costs, no recompute)."""
    gather = zero3_gather_s(work.params, plan, cluster, span=spans.dp) + zero3_gather_s(
        work.expert_params, plan, cluster, expert=True, span=spans.edp
    )
    reduce = micro_batch_reduce_s(work.params, plan, job, cluster, span=spans.dp) + micro_batch_reduce_s(
        work.expert_params, plan, job, cluster, expert=True, span=spans.edp
    )
    tp, cps, ep = _exchange_comm(work.exchanges, plan, job, cluster, spans)
    comm = 2 * gather + reduce + tp.forward_s + tp.backward_s + ep.forward_s + ep.backward_s
    comm += sum(c.exposed_forward_s + c.exposed_backward_s for c in cps)
    stored = work.stored_bytes.get(Recompute.NONE, 0.0)
    return EndCost(
        compute_s=work.forward_s + work.backward_s,
        comm_s=comm,
        backward_s=work.backward_s,
        params=work.params,
        activation_bytes=work.working_bytes + stored + max((c.working_bytes for c in cps), default=0.0),
        expert_params=work.expert_params,
        stored_bytes=stored,
    )


# What each cache's value does not depend on (plan_key keeps every other field). The stage split,
