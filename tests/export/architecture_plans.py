"""Diverse plans of every preset family for the framework oracles (issue 15 item 2).

Each entry: a name -> (scenario, plan). Plans are written directly (paraplan.evaluate scores
them), one or more per family, covering tp / pp / vp / cp / ep, ZeRO 0-3, both rank orders,
uneven stages, recompute modes and sequence parallelism. ``unmodelled_params`` lists what the
layer graph does not count, so a framework's parameter count can be compared exactly.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

from paraplan.graph import ModelSpec, preset, to_fields

import paraplan
from paraplan.result import Result


def scenario(
    preset: str,
    nodes: int,
    *,
    seq_len: int = 4096,
    global_batch: int = 512,
    precision: str = "bf16",
    cluster: str = "dgx-h100",
) -> dict:
    return {
        "model": {"preset": preset},
        "cluster": {"preset": cluster, "nodes": nodes},
        "job": {"seq_len": seq_len, "global_batch": global_batch, "precision": precision},
    }


def explicit(spec: ModelSpec, nodes: int, **kw: Any) -> dict:
    """``scenario`` with ``spec`` written out field by field (a preset with a change)."""
    out = scenario(spec.name, nodes, **kw)
    out["model"] = to_fields(spec)
    return out


def plan(dp: int, tp: int = 1, pp: int = 1, **kw: object) -> dict:
    return {
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "micro_batch": kw.pop("micro_batch", 1),
        "zero": kw.pop("zero", 1),
        "recompute": kw.pop("recompute", "full"),
        **kw,
    }


MEGATRON_CASES: dict[str, tuple[dict, dict]] = {
    # block-scaled precisions: megatron-core's --fp8-recipe / --fp4-format recipes
    "mxfp8-b200": (scenario("llama3.1-8b", 1, precision="mxfp8", cluster="dgx-b200"), plan(4, 2)),
    "nvfp4-b200": (scenario("llama3.1-8b", 1, precision="nvfp4", cluster="dgx-b200"), plan(8)),
    "fp8-blockwise-h100": (scenario("llama3.1-8b", 1, precision="fp8_blockwise"), plan(4, 1, 2)),
    "gpt3-1.3b-tp2": (scenario("gpt3-1.3b", 1, seq_len=2048), plan(4, 2)),
    "gpt3-13b-tp4-pp2": (scenario("gpt3-13b", 2, seq_len=2048), plan(2, 4, 2)),
    "gpt3-175b-tp8-pp8": (scenario("gpt3-175b", 16, seq_len=2048), plan(2, 8, 8, recompute="selective")),
    "llama2-7b-ddp": (scenario("llama2-7b", 1), plan(8, zero=0)),
    "llama2-70b-interleaved": (scenario("llama2-70b", 8), plan(2, 8, 4, vp=2, recompute="none")),
    "llama3-8b-sp": (scenario("llama3-8b", 2), plan(4, 2, 2, sequence_parallel=True)),
    "llama3-70b-cp": (scenario("llama3-70b", 8), plan(2, 8, 2, cp=2)),
    "llama3-8b-block-recompute": (scenario("llama3-8b", 2), plan(4, 2, 2, recompute_layers=3)),
    "llama3.1-8b-zero3": (scenario("llama3.1-8b", 1), plan(4, 2, zero=3, recompute="none")),
    "llama3.1-405b-tp-pp-dp": (
        scenario("llama3.1-405b", 64, global_batch=1024),
        plan(8, 8, 8, order=["tp", "cp", "pp", "dp"], layers_per_stage=[15, 16, 16, 16, 16, 16, 16, 15]),
    ),
    "mistral-7b-tp4": (scenario("mistral-7b", 1), plan(2, 4, zero=2, recompute="selective")),
    "qwen2.5-7b-tp4": (scenario("qwen2.5-7b", 1), plan(2, 4)),
    "qwen2.5-72b-pp4": (scenario("qwen2.5-72b", 4), plan(1, 8, 4)),
    "qwen3-32b-tp8": (scenario("qwen3-32b", 2), plan(2, 8)),
    "nemotron4-340b": (scenario("nemotron4-340b", 16), plan(2, 8, 8)),
    "mixtral-8x7b-ep8": (scenario("mixtral-8x7b", 4), plan(16, 2, ep=8)),
    "qwen3-30b-a3b-ep8": (scenario("qwen3-30b-a3b", 2), plan(16, 1, ep=8)),
    "qwen3-235b-a22b": (
        scenario("qwen3-235b-a22b", 8, global_batch=1024),
        plan(4, 4, 4, ep=4, layers_per_stage=[23, 24, 24, 23]),
    ),
    "deepseek-v3-pp8-ep16": (
        scenario("deepseek-v3", 32, global_batch=1024),
        plan(16, 2, 8, ep=16, layers_per_stage=[7, 8, 8, 8, 8, 8, 8, 6]),
    ),
    "gpt-oss-120b-ep8-etp1": (scenario("gpt-oss-120b", 2), plan(16, 1, ep=8)),
    # issue 13 item 4: splits only --pipeline-model-parallel-layout expresses
    "llama3.1-405b-pp8-vp8-layout": (
        scenario("llama3.1-405b", 64, global_batch=1024),
        plan(8, 8, 8, vp=8, recompute="none", layers_per_stage=[14, 16, 16, 16, 16, 16, 16, 16]),
    ),
    "deepseek-v3-2048xh800-pp16-vp2-layout": (  # DeepSeek-V3's cluster: pp 16, ep 64 (arXiv 2412.19437)
        scenario("deepseek-v3", 256, global_batch=8192, cluster="hgx-h800"),
        plan(128, 1, 16, vp=2, ep=64, layers_per_chunk=[[1, 2]] + [[2, 2]] * 13 + [[2, 1], [2, 1]]),
    ),
    "deepseek-v3-pp8-vp2-layout": (
        scenario("deepseek-v3", 32, global_batch=1024),
        plan(
            16,
            2,
            8,
            vp=2,
            ep=16,
            layers_per_chunk=[[3, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 2]],
        ),
    ),
    "explicit-qwen2-moe-style": (  # an explicit model: QKV bias, un-normalised top-k, shared
        {
            "model": {
                "name": "qwen2-moe-like",
                "layers": 8,
                "hidden": 1024,
                "heads": 16,
                "kv_heads": 16,
                "vocab": 32000,
                "experts": 16,
                "top_k": 4,
                "moe_ffn_hidden": 512,
                "shared_experts": 1,
                "shared_ffn_hidden": 2048,
                "qkv_bias": True,
                "norm_eps": 1e-6,
                "rope": {"theta": 1000000},
                "router": {"normalize_top_k": False, "aux_loss_coeff": 0.001},
            },
            "cluster": {"preset": "dgx-h100", "nodes": 1},
            "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
        },
        plan(4, 2, ep=4),
    ),
}
"""Megatron-LM / Megatron-Bridge plans: every preset family megatron-core builds."""

REFUSED_BY_MEGATRON = {
    "bloom-176b": (scenario("bloom-176b", 14, seq_len=2048), plan(2, 8, 7), "ALiBi"),
    "gpt-neox-20b": (
        scenario("gpt-neox-20b", 2, seq_len=2048),
        plan(2, 4, 2),
        "parallel attention + MLP residual",
    ),
}
"""Families megatron-core cannot build: the export refuses, naming the architecture."""


def routed(case: tuple[dict, dict], routing: object) -> tuple[dict, dict]:
    """``case`` with ``job.moe_routing`` set."""
    scen, pl = case
    return {**scen, "job": {**scen["job"], "moe_routing": routing}}, pl


def recomputing(case: tuple[dict, dict], modules: list[str]) -> tuple[dict, dict]:
    """``case`` with ``job.recompute_modules`` set (Megatron's --recompute-modules)."""
    scen, pl = case
    return {**scen, "job": {**scen["job"], "recompute_modules": modules}}, pl


def offloading(case: tuple[dict, dict], modules: list[str]) -> tuple[dict, dict]:
    """``case`` with ``job.offload_modules`` set (Megatron's --offload-modules)."""
    scen, pl = case
    return {**scen, "job": {**scen["job"], "offload_modules": modules}}, pl


def fusing(case: tuple[dict, dict], **fusions: bool) -> tuple[dict, dict]:
    """``case`` with ``job.moe_router_fusion`` / ``job.moe_permute_fusion`` set."""
    scen, pl = case
    return {**scen, "job": {**scen["job"], **fusions}}, pl


MOE_STATE_CASES: dict[str, tuple[tuple[dict, dict], dict[str, object]]] = {
    "qwen3-30b-a3b-router-permute-fusion": (
        fusing(
            (scenario("qwen3-30b-a3b", 2), plan(16, ep=8, recompute="selective")),
            moe_router_fusion=True,
            moe_permute_fusion=True,
        ),
        {"moe_router_fusion": True, "moe_permute_fusion": True},
    ),
    "qwen3-30b-a3b-deepep-overlap": (
        (
            scenario("qwen3-30b-a3b", 2),
            plan(16, ep=8, recompute="selective", moe_dispatcher="deepep", moe_overlap=True),
        ),
        {
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "deepep",
            "overlap_moe_expert_parallel_comm": True,
        },
    ),
    "qwen3-30b-a3b-hybridep-partial-graphs-forced": (
        routed(
            (
                scenario("qwen3-30b-a3b", 2),
                plan(16, ep=8, recompute="none", moe_dispatcher="hybridep", cuda_graphs="partial"),
            ),
            "force_balanced",
        ),
        {
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
            "moe_router_force_load_balancing": True,
        },
    ),
    "mixtral-8x7b-allgather-capacity-full-graphs": (
        routed(
            (scenario("mixtral-8x7b", 4), plan(16, 2, ep=8, moe_dispatcher="allgather", cuda_graphs="full")),
            {"capacity_factor": 1.25},
        ),
        {
            "moe_token_dispatcher_type": "allgather",
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_modules": [],
            "check_for_nan_in_loss_and_grad": False,
            "moe_expert_capacity_factor": 1.25,
            "moe_token_drop_policy": "probs",
            "moe_pad_expert_input_to_capacity": False,
        },
    ),
    "deepseek-v3-pp8-vp2-alltoall-overlap": (
        (
            scenario("deepseek-v3", 32, global_batch=1024),
            plan(
                16,
                2,
                8,
                vp=2,
                ep=16,
                recompute="selective",
                moe_overlap=True,
                layers_per_chunk=[[3, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 4], [4, 2]],
            ),
        ),
        {"moe_token_dispatcher_type": "alltoall", "overlap_moe_expert_parallel_comm": True},
    ),
    "llama3-8b-partial-graphs": (
        (scenario("llama3-8b", 1), plan(4, 2, recompute="selective", cuda_graphs="partial")),
        {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"]},
    ),
    "qwen3-30b-a3b-recompute-modules": (
        recomputing(
            (scenario("qwen3-30b-a3b", 2), plan(16, ep=8, recompute="selective")), ["moe_act", "layernorm"]
        ),
        {},  # the MoE state at its defaults; the modules are checked as parsed
    ),
    "qwen3-30b-a3b-offload-expert-fc1-moe-act": (  # the ModelZoo's Qwen3 MXFP8 recipe (row 2058)
        offloading(
            recomputing(
                (scenario("qwen3-30b-a3b", 2), plan(16, ep=8, recompute="selective")),
                ["moe_act", "layernorm"],
            ),
            ["expert_fc1", "moe_act"],
        ),
        {"fine_grained_activation_offloading": True, "offload_modules": ["expert_fc1", "moe_act"]},
    ),
    "llama3-8b-offload-attention": (
        offloading(
            (scenario("llama3-8b", 1), plan(4, 2, recompute="selective")),
            ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"],
        ),
        {
            "fine_grained_activation_offloading": True,
            "offload_modules": ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"],
        },
    ),
}
"""Plans with a MoE software state (dispatcher, EP overlap, CUDA graphs, routing) and what
megatron-core's TransformerConfig must hold after parsing the export (the keys given; the others
at megatron-core's defaults: tests/export/test_megatron_lm_oracle.py)."""


@cache
def _result(scenario_json: str, plan_json: str) -> Result:
    return paraplan.evaluate({**json.loads(scenario_json), "plan": json.loads(plan_json)})


def result(case: tuple[dict, dict] | tuple[dict, dict, str]) -> Result:
    """The evaluated Result of a (scenario, plan) case (cached)."""
    return _result(json.dumps(case[0], sort_keys=True), json.dumps(case[1], sort_keys=True))


def unmodelled_params(spec: ModelSpec, *, padded_vocab: int, max_positions: int) -> int:
    """Parameters a framework builds that the layer graph does not count.

    Per layer: linear biases (QKV q + 2 kv, projection h, MLP fc1 (2f gated) + fc2 h, each
    routed and shared expert alike, one router logit per expert), QKV-only biases (q + 2 kv),
    QK-norm weights (RMSNorm on q and k: 2 head_dim), attention sinks (one logit per head).
    Once: the learned position table (max_positions x h) and the rows the framework pads the
    vocabulary with (x h, twice untied).
    """
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
    gate = 2 if spec.activation.is_gated else 1
    per_layer = 0
    if spec.linear_bias:
        per_layer += q + 2 * kv + h
    elif spec.qkv_bias:
        per_layer += q + 2 * kv
    if spec.qk_norm:
        per_layer += 2 * spec.head_dim
    if spec.attention_sinks:
        per_layer += spec.num_heads
    total = per_layer * spec.num_layers
    if spec.linear_bias:
        for i in range(spec.num_layers):
            if spec.is_moe_layer(i):
                total += spec.num_experts * (gate * spec.moe_ffn_hidden + h + 1)  # +router
                if spec.shared_ffn_hidden:
                    total += gate * spec.shared_ffn_hidden + h
            else:
                total += gate * spec.ffn_hidden + h
    if spec.position_embedding == "learned":
        total += max_positions * h
    return total + (padded_vocab - spec.vocab) * h * (1 if spec.tied_embeddings else 2)


TORCHTITAN_CASES: dict[str, tuple[dict, dict]] = {
    "llama3.1-8b-fsdp": (scenario("llama3.1-8b", 1), plan(8, zero=3, recompute="none")),
    "llama3.1-8b-ddp": (scenario("llama3.1-8b", 1), plan(8, zero=0)),
    "llama3.1-8b-tp2-sp": (
        scenario("llama3.1-8b", 1),
        plan(4, 2, zero=2, sequence_parallel=True, recompute="selective"),
    ),
    "llama3.1-8b-pp2": (scenario("llama3.1-8b", 2), plan(4, 2, 2)),
    "llama3.1-8b-cp2": (scenario("llama3.1-8b", 1), plan(2, 2, cp=2, zero=3)),
    "llama3.1-70b-tp8-pp4": (scenario("llama3.1-70b", 8), plan(2, 8, 4)),
    "llama3.1-70b-interleaved": (scenario("llama3.1-70b", 8), plan(2, 8, 4, vp=2, recompute="none")),
    "llama3.1-70b-uneven": (scenario("llama3.1-70b", 8), plan(4, 8, 2, layers_per_stage=[39, 41])),
    "qwen3-32b-tp8": (scenario("qwen3-32b", 2), plan(2, 8, zero=3)),
    "qwen3-32b-pp2": (scenario("qwen3-32b", 4), plan(4, 4, 2)),
    "qwen3-30b-a3b-ep8": (scenario("qwen3-30b-a3b", 2), plan(16, ep=8)),
    "qwen3-30b-a3b-cp2-ep4": (scenario("qwen3-30b-a3b", 2), plan(8, cp=2, ep=4, zero=3)),
    # torchtitan's DeepSeek-V3 has no multi-token prediction: the model without its MTP module
    "deepseek-v3-pp8-ep32": (
        explicit(
            replace(preset("deepseek-v3"), name="deepseek-v3-no-mtp", mtp_layers=0), 32, global_batch=1024
        ),
        plan(32, 1, 8, ep=32, layers_per_stage=[7, 8, 8, 8, 8, 8, 8, 6]),
    ),
    "gpt-oss-120b-ep8": (scenario("gpt-oss-120b", 2), plan(16, ep=8, zero=3)),
    "gpt-oss-120b-pp2-ep8": (scenario("gpt-oss-120b", 2), plan(8, 1, 2, ep=8)),
}
"""torchtitan plans: every model its config functions build (llama3_405b needs torchao's float8,
so it is left out), over FSDP/HSDP/DDP, tp, pp (1F1B, interleaved, uneven), cp and ep."""

LLAMA3_ON_TORCHTITAN = (scenario("llama3-70b", 8), plan(2, 8, 4))
"""Llama 3 (no RoPE scaling) on torchtitan's llama3_70b (Llama 3.1's scaling): exported with a note."""

REFUSED_BY_TORCHTITAN = {
    "mixtral-8x7b": (scenario("mixtral-8x7b", 4), plan(32, ep=8), "none of the models"),
    "llama3.1-405b-bf16": (
        scenario("llama3.1-405b", 64, global_batch=1024),
        plan(8, 8, 8, layers_per_stage=[15, 16, 16, 16, 16, 16, 16, 15]),
        "float8",
    ),
}


GQA_30_LAYERS = {
    "model": {"layers": 30, "hidden": 2048, "ffn_hidden": 5632, "heads": 16, "kv_heads": 4, "vocab": 32000},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
}

DEEPSPEED_CASES: dict[str, tuple[dict, dict]] = {
    "ddp": (scenario("llama3.1-8b", 2), plan(16, zero=0)),
    "zero1-mb2": (scenario("llama3.1-8b", 2), plan(16, micro_batch=2)),
    "zero2": (scenario("llama3.1-8b", 2), plan(16, zero=2, recompute="none")),
    "zero3": (scenario("llama3.1-8b", 1), plan(8, zero=3)),
    "autotp2-zero1": (scenario("llama3.1-8b", 2), plan(8, 2, sequence_parallel=False)),
    "autotp8-zero3": (scenario("llama3-70b", 8), plan(8, 8, zero=3, sequence_parallel=False)),
    "autotp4-zero2": (scenario("qwen2.5-7b", 2), plan(4, 4, zero=2, sequence_parallel=False)),
    "ulysses4-zero3": (scenario("llama3.1-8b", 2), plan(4, cp=4, zero=3, recompute="none")),
    "ulysses8-zero1": (scenario("llama3.1-8b", 2), plan(2, cp=8)),
    "pp2-zero1": (scenario("llama3.1-8b", 2), plan(8, 1, 2)),
    "pp4-ddp": (scenario("llama3.1-8b", 2), plan(4, 1, 4, zero=0, recompute="none")),
    "pp4-30-layers": (GQA_30_LAYERS, plan(4, 1, 4, zero=0, recompute="none", layers_per_stage=[8, 8, 7, 7])),
    "pp8-70b": (scenario("llama3-70b", 8), plan(8, 1, 8)),
    "fp16-gpt3": (scenario("gpt3-1.3b", 1, seq_len=2048, precision="fp16"), plan(8)),
    "mistral-zero2-mb2": (scenario("mistral-7b", 1), plan(8, zero=2, micro_batch=2)),
    "pp16-405b": (
        scenario("llama3.1-405b", 32, global_batch=1024),
        plan(16, 1, 16, layers_per_stage=[8] * 14 + [7, 7]),
    ),
}
"""DeepSpeed plans: ZeRO 0-3, AutoTP 2/4/8, Ulysses 4/8, PipelineModule 2-16 stages (one of
them over 30 layers, where the balanced split is uneven), fp16 and bf16."""

REFUSED_BY_DEEPSPEED = {
    "autotp-with-pipeline": (
        scenario("llama3.1-8b", 2),
        plan(4, 2, 2, sequence_parallel=False),
        "PipelineModule",
    ),
}
