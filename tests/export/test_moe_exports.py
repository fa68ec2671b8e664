"""Mixture-of-experts exports: expert-parallel flags per framework, refusals naming the nearest
plan, Megatron's MoE/MLA model flags, and the expert groups megatron-core would build."""

from __future__ import annotations

import pytest
from paraplan.cost import Plan, Recompute

from paraplan.export import context, export_text
from paraplan.export.maxtext import maxtext_config
from paraplan.export.megatron import (
    ORDERS,
    expert_rank_groups,
    megatron_args,
    moe_layer_pattern,
)
from paraplan.export.nemo import bridge_overrides, nemo2_overrides
from paraplan.export.torchtitan import torchtitan_args
from tests.export.test_exporters import flags, refusal, result

QWEN_2_NODES = {
    "model": {"preset": "qwen3-30b-a3b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 256, "precision": "bf16"},
}
DEEPSEEK_32_NODES = {
    "model": {"preset": "deepseek-v3"},
    "cluster": {"preset": "hgx-h800", "nodes": 32},
    "job": {"seq_len": 4096, "global_batch": 1024, "precision": "fp8"},
}
EP8 = {"dp": 16, "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1, "zero": 1, "recompute": "full"}


def test_megatron_sets_expert_parallel_and_moe_model_flags() -> None:
    f = flags(megatron_args(context(result(QWEN_2_NODES, **EP8))))
    assert f["--expert-model-parallel-size"] == "8"
    assert f["--expert-tensor-parallel-size"] == "1"  # expert TP = TP
    assert f["--num-experts"] == "128" and f["--moe-router-topk"] == "8"
    assert f["--moe-ffn-hidden-size"] == "768"
    assert f["--moe-token-dispatcher-type"] == "alltoall" and "--moe-grouped-gemm" in f
    assert "--moe-layer-freq" not in f  # every layer is MoE
    assert "--multi-latent-attention" not in f


def test_megatron_deepseek_v3_has_mla_shared_experts_and_dense_first_layers() -> None:
    res = result(DEEPSEEK_32_NODES, dp=16, tp=1, pp=16, ep=8, micro_batch=1, zero=1, recompute="full")
    f = flags(megatron_args(context(res)))
    assert f["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert f["--moe-shared-expert-intermediate-size"] == "2048"
    assert f["--ffn-hidden-size"] == "18432"  # the dense layers
    assert "--multi-latent-attention" in f and "--kv-channels" not in f
    assert (
        f["--q-lora-rank"],
        f["--kv-lora-rank"],
        f["--qk-head-dim"],
        f["--qk-pos-emb-head-dim"],
        f["--v-head-dim"],
    ) == ("1536", "512", "128", "64", "128")
    assert moe_layer_pattern(context(result(QWEN_2_NODES, **EP8))) == 1


def test_megatron_expert_dp_must_equal_dp_under_tp_pp_dp_order() -> None:
    res = result(
        QWEN_2_NODES,
        dp=8,
        tp=1,
        pp=2,
        ep=4,
        micro_batch=1,
        zero=1,
        recompute="full",
        order=["tp", "cp", "pp", "dp"],
    )
    message = refusal(res, "megatron")
    assert "expert data-parallel size" in message and "nearest plan" in message


def test_nemo_and_bridge_set_expert_sizes() -> None:
    ctx = context(result(QWEN_2_NODES, **EP8))
    bridge, nemo2 = bridge_overrides(ctx), nemo2_overrides(ctx)
    assert bridge["model.expert_model_parallel_size"] == 8
    assert bridge["model.expert_tensor_parallel_size"] == 1
    assert nemo2["trainer.strategy.expert_model_parallel_size"] == 8


def test_torchtitan_sets_expert_parallel_degree() -> None:
    f = flags(torchtitan_args(context(result(QWEN_2_NODES, **EP8))))
    assert f["--parallelism.expert-parallel-degree"] == "8"
    assert f["--parallelism.data-parallel-shard-degree"] == "16"


def test_torchtitan_refuses_expert_parallel_with_tp_and_names_the_nearest_plan() -> None:
    res = result(QWEN_2_NODES, dp=8, tp=2, pp=1, ep=8, micro_batch=1, zero=1, recompute="full")
    message = refusal(res, "torchtitan")
    assert "carves ep out of dp_shard x cp x tp" in message and "nearest plan" in message


def test_maxtext_uses_the_expert_axis_and_model_config() -> None:
    config = maxtext_config(context(result(QWEN_2_NODES, **EP8)))
    assert config["ici_expert_parallelism"] == 8 and config["dcn_expert_parallelism"] == 1
    assert config["dcn_data_parallelism"] == 2 and config["ici_data_parallelism"] == 1
    assert config["model_name"] == "qwen3-30b-a3b"
    # micro_batch 4: one micro-batch per step (MaxText refuses FP8 with gradient accumulation)
    res = result(DEEPSEEK_32_NODES, dp=256, tp=1, pp=1, ep=8, micro_batch=4, zero=3, recompute="full")
    assert maxtext_config(context(res))["model_name"] == "deepseek3-671b"


def test_maxtext_refuses_experts_inside_tensor_parallel() -> None:
    res = result(QWEN_2_NODES, dp=8, tp=2, pp=1, ep=8, micro_batch=1, zero=1, recompute="full")
    assert "expert axis is innermost" in refusal(res, "maxtext")


def test_deepspeed_refuses_expert_parallel_and_names_ep_1() -> None:
    message = refusal(result(QWEN_2_NODES, **EP8), "deepspeed")
    assert "model code" in message and "(ep -> 1)" in message


def test_torch_target_refuses_moe_models() -> None:
    assert "dense Llama" in refusal(result(QWEN_2_NODES, **EP8), "torch")


def test_expert_groups_are_the_innermost_data_parallel_ranks() -> None:
    plan = context(result(QWEN_2_NODES, dp=8, tp=2, pp=1, ep=4, micro_batch=1, zero=1, recompute="full")).plan
    groups = expert_rank_groups(plan)
    assert groups[0] == [0, 2, 4, 6] and groups[1] == [1, 3, 5, 7]  # stride tp, inside dp
    assert sorted(r for g in groups for r in g) == list(range(16))


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("tp", "cp", "dp", "ep", "pp", "order"),
    [
        (2, 1, 8, 4, 1, "tp-cp-ep-dp-pp"),
        (1, 2, 8, 8, 1, "tp-cp-ep-dp-pp"),
        (1, 1, 8, 8, 2, "tp-cp-ep-dp-pp"),
        (1, 2, 4, 2, 2, "tp-cp-ep-pp-dp"),
    ],
)
def test_megatron_core_builds_the_same_expert_groups(
    tp: int, cp: int, dp: int, ep: int, pp: int, order: str
) -> None:
    pytest.importorskip("torch")
    ps = pytest.importorskip("megatron.core.parallel_state")
    plan = Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        recompute=(Recompute.NONE,) * pp,
        layers_per_stage=(1,) * pp,
        order=ORDERS[order],
    )
    generator = ps.RankGenerator(tp=tp, ep=ep, dp=dp * cp // ep, pp=pp, cp=1, order=order)
    assert sorted(generator.get_ranks("ep")) == sorted(expert_rank_groups(plan))


@pytest.mark.oracle
def test_transformer_config_accepts_the_moe_megatron_export() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    res = result(QWEN_2_NODES, dp=8, tp=2, pp=1, ep=4, micro_batch=1, zero=1, recompute="full")
    f = flags(megatron_args(context(res)))
    config = TransformerConfig(
        num_layers=int(f["--num-layers"]),
        hidden_size=int(f["--hidden-size"]),
        ffn_hidden_size=int(f["--ffn-hidden-size"]),
        num_attention_heads=int(f["--num-attention-heads"]),
        num_query_groups=int(f["--num-query-groups"]),
        kv_channels=int(f["--kv-channels"]),
        tensor_model_parallel_size=int(f["--tensor-model-parallel-size"]),
        sequence_parallel="--sequence-parallel" in f,
        num_moe_experts=int(f["--num-experts"]),
        moe_router_topk=int(f["--moe-router-topk"]),
        moe_ffn_hidden_size=int(f["--moe-ffn-hidden-size"]),
        expert_model_parallel_size=int(f["--expert-model-parallel-size"]),
        expert_tensor_parallel_size=int(f["--expert-tensor-parallel-size"]),
        moe_token_dispatcher_type=f["--moe-token-dispatcher-type"],
        add_bias_linear="--disable-bias-linear" not in f,
        bf16=True,
        params_dtype=torch.bfloat16,
    )
    assert config.num_moe_experts == 128 and config.expert_model_parallel_size == 4


ETP1 = {"dp": 8, "tp": 2, "pp": 1, "ep": 4, "etp": 1, "micro_batch": 1, "zero": 1, "recompute": "full"}
LLAMA_LONG = {
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 65536, "global_batch": 8, "precision": "bf16"},
}
CP8 = {"dp": 2, "tp": 1, "pp": 1, "cp": 8, "micro_batch": 1, "zero": 1, "recompute": "full"}


def test_megatron_and_nemo_set_expert_tensor_parallel_size() -> None:
    res = result(QWEN_2_NODES, **ETP1)
    assert res.plan.etp == 1
    f = flags(megatron_args(context(res)))
    assert f["--expert-tensor-parallel-size"] == "1" and f["--tensor-model-parallel-size"] == "2"
    assert bridge_overrides(context(res))["model.expert_tensor_parallel_size"] == 1
    assert nemo2_overrides(context(res))["model.config.expert_tensor_parallel_size"] == 1
    default = flags(megatron_args(context(result(QWEN_2_NODES, **{**ETP1, "etp": None}))))
    assert default["--expert-tensor-parallel-size"] == "2"  # unset etp = tp, written out


def test_torchtitan_and_maxtext_refuse_expert_tp_other_than_tp() -> None:
    res = result(QWEN_2_NODES, **ETP1)
    assert "plan.etp=1 with tp=2: torchtitan 0.3 has no expert tensor-parallel" in refusal(res, "torchtitan")
    assert "plan.etp=1 with tp=2: MaxText has no separate expert" in refusal(res, "maxtext")


@pytest.mark.parametrize(("mode", "flag"), [("p2p", "p2p"), ("all_gather", "allgather")])
def test_megatron_and_nemo_set_cp_comm_type(mode: str, flag: str) -> None:
    res = result(LLAMA_LONG, **CP8, cp_comm=mode)
    assert res.plan.cp_comm == mode
    f = flags(megatron_args(context(res)))
    assert f["--context-parallel-size"] == "8" and f["--cp-comm-type"] == flag
    assert bridge_overrides(context(res))["model.cp_comm_type"] == flag
    assert nemo2_overrides(context(res))["model.config.cp_comm_type"] == flag


def test_maxtext_sets_the_context_parallel_strategy() -> None:
    for mode, strategy in (("p2p", "ring"), ("all_gather", "all_gather")):
        res = result(LLAMA_LONG, **{**CP8, "dp": 1, "zero": 3, "cp": 16}, cp_comm=mode)
        assert maxtext_config(context(res))["context_parallel_strategy"] == strategy


def test_torchtitan_refuses_the_all_gather_exchange_and_names_the_ring() -> None:
    res = result(LLAMA_LONG, **CP8, cp_comm="all_gather")
    text = refusal(res, "torchtitan")
    assert "plan.cp_comm=all_gather: torchtitan 0.3 has no option" in text
    assert "cp_comm -> p2p" in text
    ring = torchtitan_args(context(result(LLAMA_LONG, **CP8, cp_comm="p2p")))
    assert "--parallelism.context-parallel-degree" in ring


# --------------------------------------------------------------------------- MoE software state

STATE = {**EP8, "recompute": "selective"}
CAPACITY = {**QWEN_2_NODES, "job": {**QWEN_2_NODES["job"], "moe_routing": {"capacity_factor": 1.5}}}
FORCED = {**QWEN_2_NODES, "job": {**QWEN_2_NODES["job"], "moe_routing": "force_balanced"}}


def argv_of(scenario: dict, **plan: object) -> list[str]:
    return megatron_args(context(result(scenario, **plan)))


@pytest.mark.parametrize(
    "dispatcher,kind,backend",
    [
        ("alltoall", "alltoall", None),
        ("allgather", "allgather", None),
        ("deepep", "flex", "deepep"),
        ("hybridep", "flex", "hybridep"),
    ],
)
def test_megatron_and_bridge_write_the_dispatcher(dispatcher: str, kind: str, backend: str | None) -> None:
    res = result(QWEN_2_NODES, **STATE, moe_dispatcher=dispatcher)
    f = flags(megatron_args(context(res)))
    assert f["--moe-token-dispatcher-type"] == kind
    assert f.get("--moe-flex-dispatcher-backend") == backend
    bridge, nemo2 = bridge_overrides(context(res)), nemo2_overrides(context(res))
    assert (
        bridge["model.moe_token_dispatcher_type"] == nemo2["model.config.moe_token_dispatcher_type"] == kind
    )
    assert bridge.get("model.moe_flex_dispatcher_backend") == backend


def test_megatron_writes_ep_overlap_and_bridge_notes_comm_overlap() -> None:
    f = flags(argv_of(QWEN_2_NODES, **STATE, moe_overlap=True))
    assert "--overlap-moe-expert-parallel-comm" in f and "--delay-wgrad-compute" not in f
    assert "--overlap-moe-expert-parallel-comm" not in flags(argv_of(QWEN_2_NODES, **STATE))
    res = result(QWEN_2_NODES, **STATE, moe_overlap=True)
    assert bridge_overrides(context(res))["model.overlap_moe_expert_parallel_comm"] is True
    assert bridge_overrides(context(res))["model.moe_shared_expert_overlap"] is False
    assert "cfg.comm_overlap.overlap_moe_expert_parallel_comm = True" in export_text(res, "nemo")
    off = bridge_overrides(context(result(QWEN_2_NODES, **STATE)))
    assert off["model.overlap_moe_expert_parallel_comm"] is False  # a recipe's True is overridden


def test_cuda_graphs_partial_and_full() -> None:
    argv = argv_of(QWEN_2_NODES, **STATE, cuda_graphs="partial")
    i = argv.index("--cuda-graph-modules")
    assert argv[i + 1 : i + 4] == ["attn", "moe_router", "moe_preprocess"]
    assert flags(argv)["--cuda-graph-impl"] == "transformer_engine"
    full = flags(argv_of(QWEN_2_NODES, **EP8, cuda_graphs="full"))
    assert full["--cuda-graph-impl"] == "full_iteration" and "--no-check-for-nan-in-loss-and-grad" in full
    assert "--cuda-graph-impl" not in flags(argv_of(QWEN_2_NODES, **STATE))
    bridge = bridge_overrides(context(result(QWEN_2_NODES, **EP8, cuda_graphs="full")))
    assert (bridge["model.cuda_graph_impl"], bridge["model.cuda_graph_scope"]) == (
        "local",
        ["full_iteration"],
    )
    assert bridge["rerun_state_machine.check_for_nan_in_loss"] is False
    none = bridge_overrides(context(result(QWEN_2_NODES, **STATE)))
    assert none["model.cuda_graph_impl"] == "none" and "model.cuda_graph_scope" not in none


def test_routing_flags_and_fields() -> None:
    f = flags(argv_of(CAPACITY, **STATE))
    assert (f["--moe-expert-capacity-factor"], f["--moe-token-drop-policy"]) == ("1.5", "probs")
    assert "--moe-pad-expert-input-to-capacity" not in f and "--moe-router-force-load-balancing" not in f
    assert "--moe-router-force-load-balancing" in flags(argv_of(FORCED, **STATE))
    dropless = flags(argv_of(QWEN_2_NODES, **STATE))
    assert (
        "--moe-expert-capacity-factor" not in dropless and "--moe-router-force-load-balancing" not in dropless
    )
    bridge = bridge_overrides(context(result(CAPACITY, **STATE)))
    assert bridge["model.moe_expert_capacity_factor"] == 1.5
    assert bridge["model.moe_router_force_load_balancing"] is False
    assert bridge_overrides(context(result(FORCED, **STATE)))["model.moe_expert_capacity_factor"] is None
    assert "--debug.moe-force-load-balance" in flags(torchtitan_args(context(result(FORCED, **STATE))))


def test_torchtitan_refuses_deepep_naming_who_runs_it() -> None:
    res = result(QWEN_2_NODES, **STATE, moe_dispatcher="deepep")
    text = refusal(res, "torchtitan")
    assert "plan.moe_dispatcher=deepep: torchtitan 0.3.0 does not run it" in text
    assert "run by: megatron, nemo" in text and "moe_dispatcher -> alltoall" in text


def test_recompute_modules_reach_megatron_and_bridge() -> None:
    """job.recompute_modules (Megatron's --recompute-modules) under recompute: selective; the
    default selective policy stays core_attn (its parse by megatron-core 0.19.2 itself:
    tests/export/test_megatron_lm_oracle.py)."""
    modules = {**QWEN_2_NODES, "job": {**QWEN_2_NODES["job"], "recompute_modules": ["moe_act", "layernorm"]}}
    plan = {**EP8, "recompute": "selective"}
    argv = megatron_args(context(result(modules, **plan)))
    at = argv.index("--recompute-modules")
    assert argv[at + 1 : at + 3] == ["layernorm", "moe_act"] and argv[at + 3].startswith("--")
    assert bridge_overrides(context(result(modules, **plan)))["model.recompute_modules"] == [
        "layernorm",
        "moe_act",
    ]
    default = flags(megatron_args(context(result(QWEN_2_NODES, **plan))))
    assert default["--recompute-modules"] == "core_attn"
