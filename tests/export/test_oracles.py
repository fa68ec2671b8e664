"""Exports validated by the frameworks' own code (the ``oracles`` extra; skipped without it).

- DeepSpeed 0.19.8: our copy of its balanced partitioner agrees with its own
  (test_deepspeed_oracle.py runs ``deepspeed.initialize`` on every export in the full world).
- megatron-core 0.16.1: ``TransformerConfig`` accepts the model-parallel settings of every
  Megatron and NeMo/Megatron-Bridge export and builds the same layers per pipeline rank; its
  ``RankGenerator`` yields the same TP/CP/DP/PP groups as ``megatron.rank_groups``.
- Megatron-Bridge 0.6.2: every ``model.*`` override names a dataclass field of the model provider
  (Bridge's Hydra override parser refuses any other: ``OverridesError: Could not override``).
  Bridge is Python 3.12 only and not in the ``oracles`` extra, so without it the provider's fields
  are the installed megatron-core TransformerConfig's plus GPTModelProvider's own
  (``GPT_PROVIDER_FIELDS``, read from the 0.6.2 wheel); with it, the provider class's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path

import pytest
from paraplan.graph import build_graph

import paraplan
from paraplan.export import context
from paraplan.export.deepspeed import partition_balanced
from paraplan.export.megatron import megatron_args, megatron_order, rank_groups
from paraplan.export.nemo import render as render_nemo
from paraplan.result import Result

sys.path.insert(0, str(Path(__file__).parent))
from architecture_plans import MEGATRON_CASES, MOE_STATE_CASES, unmodelled_params  # noqa: E402
from architecture_plans import result as result_of  # noqa: E402

pytestmark = pytest.mark.oracle

LLAMA8B_2_NODES = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 2},
    "job": {"seq_len": 4096, "global_batch": 64, "precision": "bf16"},
}
GQA_30_LAYERS = {
    **LLAMA8B_2_NODES,
    "model": {"layers": 30, "hidden": 2048, "ffn_hidden": 5632, "heads": 16, "kv_heads": 4, "vocab": 32000},
}

MEGATRON_PLANS = {
    "uniform": {"dp": 4, "tp": 2, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "selective"},
    "block-recompute": {
        "dp": 4,
        "tp": 2,
        "pp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "recompute_layers": 3,
    },
    "first-last": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "layers_per_stage": [7, 9, 9, 7],
    },
    "layout": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "layers_per_stage": [8, 7, 9, 8],
    },
    "interleaved-uneven": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "vp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "none",
        "layers_per_stage": [6, 10, 10, 6],
    },
    "interleaved-layout": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "vp": 2,
        "micro_batch": 1,
        "zero": 0,
        "recompute": "none",
        "layers_per_stage": [8, 6, 10, 8],
    },
    "zero3-cp": {"dp": 4, "tp": 2, "pp": 1, "cp": 2, "micro_batch": 1, "zero": 3, "recompute": "none"},
    "tp-pp-dp": {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "micro_batch": 1,
        "zero": 1,
        "recompute": "full",
        "order": ["tp", "cp", "pp", "dp"],
    },
    "cp-pp": {"dp": 2, "tp": 2, "pp": 2, "cp": 2, "micro_batch": 2, "zero": 1, "recompute": "full"},
}

GQA_31_LAYERS = {**GQA_30_LAYERS, "model": {**GQA_30_LAYERS["model"], "layers": 31}}

UNEVEN_VP_PLANS = {  # issue 11 item 4: virtual stages of unequal size (plan.layers_per_chunk)
    "account-for-both": (
        {
            "dp": 2,
            "tp": 2,
            "pp": 4,
            "vp": 4,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_stage": [7, 8, 8, 7],
        },
        GQA_30_LAYERS,
    ),
    "account-for-embedding": (
        {
            "dp": 2,
            "tp": 2,
            "pp": 4,
            "vp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_stage": [7, 8, 8, 8],
        },
        GQA_31_LAYERS,
    ),
    "account-for-loss": (
        {
            "dp": 2,
            "tp": 2,
            "pp": 4,
            "vp": 2,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_chunk": [[4, 4], [4, 4], [4, 4], [4, 3]],
        },
        GQA_31_LAYERS,
    ),
    "chunk-layout": (
        {
            "dp": 2,
            "tp": 2,
            "pp": 4,
            "vp": 2,
            "micro_batch": 1,
            "zero": 0,
            "recompute": "none",
            "layers_per_chunk": [[2, 5], [4, 4], [3, 4], [4, 4]],
        },
        GQA_30_LAYERS,
    ),
}

TC_FIELDS = {
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels",
    "--tensor-model-parallel-size": "tensor_model_parallel_size",
    "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "--num-virtual-stages-per-pipeline-rank": "virtual_pipeline_model_parallel_size",
    "--pipeline-model-parallel-layout": "pipeline_model_parallel_layout",
    "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
    "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage",
    "--account-for-embedding-in-pipeline-split": "account_for_embedding_in_pipeline_split",
    "--account-for-loss-in-pipeline-split": "account_for_loss_in_pipeline_split",
    "--context-parallel-size": "context_parallel_size",
    "--sequence-parallel": "sequence_parallel",
    "--recompute-granularity": "recompute_granularity",
    "--recompute-method": "recompute_method",
    "--recompute-num-layers": "recompute_num_layers",
    "--recompute-modules": "recompute_modules",
    "--bf16": "bf16",
    "--fp16": "fp16",
}
"""Megatron-LM flag -> megatron-core TransformerConfig field, for the flags that reach it."""


@cache
def _result(plan_json: str, scenario_json: str) -> Result:
    return paraplan.evaluate({**json.loads(scenario_json), "plan": json.loads(plan_json)})


def result(plan: dict, scenario: dict = LLAMA8B_2_NODES) -> Result:
    return _result(json.dumps(plan, sort_keys=True), json.dumps(scenario, sort_keys=True))


# --------------------------------------------------------------------------- DeepSpeed


@pytest.mark.parametrize("num_layers,pp", [(32, 4), (30, 4), (126, 4), (80, 3), (10, 3), (61, 8), (7, 2)])
def test_balanced_partition_matches_deepspeed(num_layers: int, pp: int) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.utils import partition_balanced as deepspeed_partition

    weights = [0] + [1] * num_layers + [0, 0]
    assert partition_balanced(weights, pp) == [int(x) for x in deepspeed_partition(weights, pp)]


# --------------------------------------------------------------------------- megatron-core


@pytest.fixture(scope="module")
def mcore() -> object:
    pytest.importorskip("torch")
    return pytest.importorskip("megatron.core")


def _transformer_config_kwargs(argv: list[str]) -> dict[str, object]:
    kwargs: dict[str, object] = {}
    for i, token in enumerate(argv):
        if token not in TC_FIELDS:
            continue
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        if value is None:
            kwargs[TC_FIELDS[token]] = True
        elif token == "--recompute-modules":
            kwargs[TC_FIELDS[token]] = [value]
        else:
            kwargs[TC_FIELDS[token]] = int(value) if value.isdigit() else value
    return kwargs


def _transformer_config(kwargs: dict[str, object]) -> object:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.float16 if kwargs.get("fp16") else torch.bfloat16
    if kwargs.get("pipeline_model_parallel_size", 1) > 1:  # type: ignore[operator]
        kwargs = {**kwargs, "pipeline_dtype": dtype}  # the CLI fills it from the params dtype
    return TransformerConfig(**kwargs, params_dtype=dtype)


def _layers_per_rank(config: object, pp: int, vp: int) -> list[int]:
    """Decoder layers megatron-core builds on each pipeline rank (all its virtual stages)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    layout = config.pipeline_model_parallel_layout  # type: ignore[attr-defined]
    if layout is not None:
        return [sum(layout.layout[r][v].count(LayerType.decoder) for v in range(vp)) for r in range(pp)]
    return [
        sum(get_num_layers_to_build(config, vp_stage=v if vp > 1 else None, pp_rank=r) for v in range(vp))
        for r in range(pp)
    ]


@pytest.mark.parametrize("name", MEGATRON_PLANS)
def test_transformer_config_accepts_megatron_export(name: str, mcore: object) -> None:
    res = result(MEGATRON_PLANS[name])
    kwargs = _transformer_config_kwargs(megatron_args(context(res)))
    config = _transformer_config(kwargs)
    assert _layers_per_rank(config, res.plan.pp, res.plan.vp) == res.plan.layers_per_stage


GPT_MODEL_ARGS = (
    "vocab_size",
    "share_embeddings_and_output_weights",
    "position_embedding_type",
    "rotary_base",
    "rotary_percent",
    "rope_scaling",
    "rope_scaling_factor",
)
"""Bridge model.* fields that are GPTModel arguments (Megatron-Bridge GPTModelProvider), not
TransformerConfig fields."""


GPT_PROVIDER_FIELDS = frozenset(
    {
        "fp16_lm_cross_entropy", "parallel_output", "share_embeddings_and_output_weights",
        "make_vocab_size_divisible_by", "position_embedding_type", "rotary_base", "rotary_percent",
        "rope_scaling", "rope_scaling_factor", "rotary_scaling_factor", "seq_len_interpolation_factor",
        "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast",
        "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim", "yarn_correction_range_round_to_int",
        "seq_length", "attention_softmax_in_fp32", "deallocate_pipeline_outputs",
        "scatter_embedding_sequence_parallel", "tp_only_amax_red", "tp_comm_overlap_cfg",
        "use_transformer_engine_full_layer_spec", "use_transformer_engine_op_fuser", "dense_grouped_gemm",
        "transformer_layer_spec", "hf_model_id", "hf_model_revision", "vocab_size", "should_pad_vocab",
        "num_moe_experts", "moe_grouped_gemm", "qk_layernorm", "fp8", "normalization", "mtp_enabled",
        "init_model_with_meta_device", "use_te_rng_tracker", "virtual_pipeline_model_parallel_size",
        "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
        "masked_softmax_fusion", "cross_entropy_loss_fusion", "gradient_accumulation_fusion",
        "restore_modelopt_state", "use_arbitrary_attention_mask",
    }
)  # fmt: skip
"""GPTModelProvider's own dataclass fields beyond TransformerConfig's (Megatron-Bridge 0.6.2
megatron/bridge/models/gpt_provider.py; MLAModelProvider adds none to MLATransformerConfig's)."""
HYBRID_PROVIDER_FIELDS = frozenset(
    {
        "hybrid_layer_pattern", "hybrid_override_pattern", "hybrid_attention_ratio", "hybrid_mlp_ratio",
        "hybrid_stack_spec", "mtp_hybrid_override_pattern", "mamba_chunk_size", "mamba_num_groups",
        "keep_mtp_spec_in_bf16", "seq_length", "seq_len_interpolation_factor", "vocab_size",
        "should_pad_vocab", "make_vocab_size_divisible_by", "share_embeddings_and_output_weights",
        "position_embedding_type", "rotary_base", "rotary_percent", "fp16_lm_cross_entropy",
        "parallel_output", "hf_model_id", "hf_model_revision", "restore_modelopt_state",
    }
)  # fmt: skip
"""HybridModelProvider's own fields beyond TransformerConfig's (models/hybrid/hybrid_provider.py)."""


def provider_fields(model: dict[str, object]) -> frozenset[str]:
    """The dataclass fields of the Megatron-Bridge provider the model.* overrides ``model`` target:
    Bridge's own class when installed, else megatron-core's config plus the provider's fields."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    mla, hybrid = bool(model.get("multi_latent_attention")), "hybrid_layer_pattern" in model
    try:
        from megatron.bridge.models import gpt_provider, mla_provider
        from megatron.bridge.models.hybrid import hybrid_provider
    except ImportError:
        base = MLATransformerConfig if mla else TransformerConfig
        own = HYBRID_PROVIDER_FIELDS if hybrid else GPT_PROVIDER_FIELDS
        return frozenset(f.name for f in dataclasses.fields(base)) | own
    cls = (
        hybrid_provider.HybridModelProvider
        if hybrid
        else mla_provider.MLAModelProvider
        if mla
        else gpt_provider.GPTModelProvider
    )
    return frozenset(f.name for f in dataclasses.fields(cls))


def unknown_fields(overrides: dict[str, object]) -> list[str]:
    """The model.* overrides that name no field of the provider (Bridge refuses them)."""
    model = {k.removeprefix("model."): v for k, v in overrides.items() if k.startswith("model.")}
    known = provider_fields(model)
    return sorted(f"model.{k}" for k in model if k not in known)


def bridge_overrides_of(res: Result) -> dict[str, object]:
    """BRIDGE_OVERRIDES of the rendered nemo.py (executed, so functions are real)."""
    namespace: dict[str, object] = {}
    exec(compile(render_nemo(context(res)), "nemo.py", "exec"), namespace)  # noqa: S102
    return dict(namespace["BRIDGE_OVERRIDES"])  # type: ignore[call-overload]


def bridge_model(res: Result) -> dict[str, object]:
    """The model.* overrides of the rendered nemo.py, each a field of Bridge's model provider
    (as Bridge applies overrides: an unknown field is an error, not a new attribute)."""
    overrides = bridge_overrides_of(res)
    unknown = unknown_fields(overrides)
    assert not unknown, f"Megatron-Bridge 0.6.2's model provider has no field {unknown}"
    return {k.removeprefix("model."): v for k, v in overrides.items() if k.startswith("model.")}


def _bridge_config(res: Result, extra: dict[str, object] | None = None) -> object:
    """megatron-core's TransformerConfig (MLATransformerConfig under latent attention) from the
    Megatron-Bridge export's model.* overrides; yarn_* fields set as attributes, as
    Megatron-LM's _apply_yarn_config_from_args does."""
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    model = bridge_model(res) | (extra or {})
    fields = {
        k: v
        for k, v in model.items()
        if k not in GPT_MODEL_ARGS and k != "seq_length" and not k.startswith("yarn_")
    }
    cls = MLATransformerConfig if fields.get("multi_latent_attention") else TransformerConfig
    dtype = torch.bfloat16
    if fields.get("pipeline_model_parallel_size", 1) > 1:  # type: ignore[operator]
        fields["pipeline_dtype"] = dtype
    config = cls(**fields, params_dtype=dtype, bf16=True)
    for k, v in model.items():
        if k.startswith("yarn_"):
            setattr(config, k, v)
    return config


def bridge_num_params(res: Result) -> int:
    """Parameters of the GPTModel megatron-core 0.16.1 builds from the Bridge overrides: the
    whole model (tensor/pipeline/expert size 1) on the meta device with the local layer spec."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from torch.testing._internal.distributed.fake_pg import FakeStore

    model = bridge_model(res)
    one_device = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": 1,
        "sequence_parallel": False,
        "pipeline_model_parallel_layout": None,
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "recompute_granularity": None,
        "recompute_method": None,
        "recompute_num_layers": None,
        "recompute_modules": None,
        "moe_grouped_gemm": False,
        "moe_token_dispatcher_type": "allgather",
        "use_cpu_initialization": True,
        "perform_initialization": False,
        "apply_rope_fusion": False,
        "layernorm_zero_centered_gamma": False,  # TE-only kernel, same parameters
        "gradient_accumulation_fusion": False,
        "persist_layer_norm": False,
        "masked_softmax_fusion": False,
    }
    config = _bridge_config(res, one_device)
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    # the block spec (Megatron-LM's choice for MoE) honours moe_layer_freq's dense layers
    spec = get_gpt_decoder_block_spec(
        config, use_transformer_engine=False, normalization=str(model["normalization"])
    )
    # multi-token prediction (model.mtp_num_layers): Megatron-LM's pretrain_gpt.py builds its
    # block from the decoder's layer spec the same way
    mtp = (
        get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False) if config.mtp_num_layers else None
    )
    with torch.device("meta"):
        gpt = GPTModel(
            config=config,
            transformer_layer_spec=spec,
            mtp_block_spec=mtp,
            vocab_size=int(model["vocab_size"]),  # type: ignore[call-overload]
            max_sequence_length=int(model["seq_length"]),  # type: ignore  # GPTModelProvider.provide
            **{k: model[k] for k in GPT_MODEL_ARGS if k != "vocab_size" and k in model},
        )
    parallel_state.destroy_model_parallel()
    return sum(p.numel() for p in gpt.parameters())


@pytest.mark.parametrize("name", MEGATRON_PLANS)
def test_transformer_config_accepts_megatron_bridge_export(name: str, mcore: object) -> None:
    res = result(MEGATRON_PLANS[name])
    config = _bridge_config(res)
    assert _layers_per_rank(config, res.plan.pp, res.plan.vp) == res.plan.layers_per_stage


def test_transformer_config_takes_block_recompute(mcore: object) -> None:
    """Partial recompute (plan.recompute_layers) as megatron-core's TransformerConfig reads the
    Megatron-LM flags and the Megatron-Bridge overrides: full, block, 3 layers."""
    res = result(MEGATRON_PLANS["block-recompute"])
    for config in (
        _transformer_config(_transformer_config_kwargs(megatron_args(context(res)))),
        _bridge_config(res),
    ):
        assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == (
            "full",
            "block",
            3,
        )


@pytest.mark.parametrize("name", MEGATRON_PLANS)
def test_rank_generator_gives_paraplans_groups(name: str, mcore: object) -> None:
    from megatron.core.parallel_state import RankGenerator

    res = result(MEGATRON_PLANS[name])
    p = res.plan
    order = megatron_order(context(res).plan)
    assert order is not None
    generator = RankGenerator(tp=p.tp, ep=1, dp=p.dp, pp=p.pp, cp=p.cp, order=order)
    ours = rank_groups(p)
    for axis in ("tp", "cp", "dp", "pp"):
        assert sorted(generator.get_ranks(axis)) == sorted(ours[axis]), axis


def test_transformer_config_oracle_rejects_a_miscounted_layout(mcore: object) -> None:
    kwargs = _transformer_config_kwargs(megatron_args(context(result(MEGATRON_PLANS["layout"]))))
    kwargs["pipeline_model_parallel_layout"] = "E,t*8|t*7|t*8|t*8,L"  # 31 decoder layers, not 32
    with pytest.raises((AssertionError, ValueError)):
        _transformer_config(kwargs)


def _layers_per_chunk(config: object, pp: int, vp: int) -> list[list[int]]:
    """Decoder layers megatron-core builds on each (pipeline rank, virtual stage)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    layout = config.pipeline_model_parallel_layout  # type: ignore[attr-defined]
    if layout is not None:
        return [[layout.layout[r][v].count(LayerType.decoder) for v in range(vp)] for r in range(pp)]
    return [[get_num_layers_to_build(config, vp_stage=v, pp_rank=r) for v in range(vp)] for r in range(pp)]


def _chunks(res: Result) -> list[list[int]]:
    p = res.plan
    return p.layers_per_chunk or [[n // p.vp] * p.vp for n in p.layers_per_stage]


@pytest.mark.parametrize("name", UNEVEN_VP_PLANS)
def test_transformer_config_builds_the_unequal_virtual_stages(name: str, mcore: object) -> None:
    """Megatron's own layer assignment (get_num_layers_to_build per pp rank and vp stage) from
    the exported flags equals the plan's chunks."""
    res = result(*UNEVEN_VP_PLANS[name])
    assert res.plan.layers_per_chunk, "the plan's virtual stages are unequal"
    argv = megatron_args(context(res))
    config = _transformer_config(_transformer_config_kwargs(argv))
    assert _layers_per_chunk(config, res.plan.pp, res.plan.vp) == _chunks(res)
    uses_layout = "--pipeline-model-parallel-layout" in argv
    assert uses_layout == (name == "chunk-layout")


@pytest.mark.parametrize("name", UNEVEN_VP_PLANS)
def test_bridge_config_builds_the_unequal_virtual_stages(name: str, mcore: object) -> None:
    res = result(*UNEVEN_VP_PLANS[name])
    config = _bridge_config(res)
    assert _layers_per_chunk(config, res.plan.pp, res.plan.vp) == _chunks(res)


def test_megatron_rejects_account_for_slots_that_do_not_split() -> None:
    """The oracle is strict: 30 layers + embedding alone (31 slots) do not split over pp 4."""
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    res = result(*UNEVEN_VP_PLANS["account-for-both"])
    kwargs = _transformer_config_kwargs(megatron_args(context(res)))
    assert kwargs["account_for_embedding_in_pipeline_split"] is True
    kwargs.pop("account_for_loss_in_pipeline_split")
    with pytest.raises((AssertionError, ValueError)):
        config = _transformer_config(kwargs)
        _layers_per_chunk(config, res.plan.pp, res.plan.vp)


@pytest.mark.slow
@pytest.mark.parametrize("name", MEGATRON_CASES)
def test_bridge_export_builds_the_planned_model(
    name: str, mcore: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """megatron-core 0.16.1 builds the Megatron-Bridge export's model.* overrides into a
    GPTModel whose parameter count is the plan model's (plus what the graph does not model).

    Without a GPU: YaRN's frequency cache asks torch.cuda for the device (-> the CPU), and the
    local DotProductAttention does not take the k/v channel widths MLA passes (only Transformer
    Engine's does); it holds no parameters, so they are dropped. megatron-core 0.16.1's MLA sets
    HAVE_TE when its TE extension module imports, even with TE absent (TELinear is no class)."""
    import torch
    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    if importlib.util.find_spec("transformer_engine") is None:
        monkeypatch.setattr(multi_latent_attention, "HAVE_TE", False)

    init = DotProductAttention.__init__

    def without_mla_channels(self, *a, k_channels=None, v_channels=None, **kw):  # noqa: ARG001
        init(self, *a, **kw)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(DotProductAttention, "__init__", without_mla_channels)
    res = result_of(MEGATRON_CASES[name])
    spec = context(res).spec
    expected = build_graph(spec).num_params + unmodelled_params(
        spec, padded_vocab=spec.vocab, max_positions=MEGATRON_CASES[name][0]["job"]["seq_len"]
    )
    assert bridge_num_params(res) == expected


# --------------------------------------------------------------------------- Megatron-Bridge fields

BRIDGE_CASES = {**MEGATRON_CASES, **{n: c for n, (c, _) in MOE_STATE_CASES.items()}}


@pytest.mark.parametrize("name", BRIDGE_CASES)
def test_every_bridge_model_override_is_a_provider_field(name: str, mcore: object) -> None:
    """Issue 26: Bridge's Hydra parser refuses an override naming no field of the provider."""
    assert unknown_fields(bridge_overrides_of(result_of(BRIDGE_CASES[name]))) == []


def test_the_field_check_refuses_max_position_embeddings(mcore: object) -> None:
    """The override the export used to write (issue 26) is no provider field; seq_length is."""
    overrides = bridge_overrides_of(result_of(MEGATRON_CASES["llama3-8b-sp"]))
    assert overrides["model.seq_length"] == 4096
    assert "model.max_position_embeddings" not in overrides
    assert unknown_fields({**overrides, "model.max_position_embeddings": 4096}) == [
        "model.max_position_embeddings"
    ]
    assert unknown_fields({**overrides, "model.moe_token_dispatcher": "flex"}) == [
        "model.moe_token_dispatcher"
    ]


BRIDGE_STATE = {
    "qwen3-30b-a3b-deepep-overlap": {
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep",
        "overlap_moe_expert_parallel_comm": True,
        "cuda_graph_impl": "none",
    },
    "qwen3-30b-a3b-hybridep-partial-graphs-forced": {
        "moe_flex_dispatcher_backend": "hybridep",
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
        "moe_router_force_load_balancing": True,
        "moe_expert_capacity_factor": None,
    },
    "mixtral-8x7b-allgather-capacity-full-graphs": {
        "moe_token_dispatcher_type": "allgather",
        "cuda_graph_impl": "local",
        "cuda_graph_scope": ["full_iteration"],
        "moe_expert_capacity_factor": 1.25,
        "moe_token_drop_policy": "probs",
        "moe_pad_expert_input_to_capacity": False,
    },
    "deepseek-v3-pp8-vp2-alltoall-overlap": {
        "moe_token_dispatcher_type": "alltoall",
        "overlap_moe_expert_parallel_comm": True,
    },
    "llama3-8b-partial-graphs": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]},
}
"""What megatron-core 0.16.1's TransformerConfig holds after taking each Bridge export (the
scope as CudaGraphScope names)."""


@pytest.mark.parametrize("name", BRIDGE_STATE)
def test_bridge_config_takes_the_moe_software_state(name: str, mcore: object) -> None:
    """The MoE software state's model.* overrides, through TransformerConfig.__post_init__ at the
    plan's parallel sizes (EP overlap, dispatcher and CUDA-graph checks), read back."""
    res = result_of(MOE_STATE_CASES[name][0])
    config = _bridge_config(res)
    got = {k: getattr(config, k) for k in BRIDGE_STATE[name]}
    if "cuda_graph_scope" in got:
        got["cuda_graph_scope"] = [getattr(s, "name", s) for s in got["cuda_graph_scope"]]  # type: ignore[attr-defined]
    assert got == BRIDGE_STATE[name]
    full = BRIDGE_STATE[name].get("cuda_graph_scope") == ["full_iteration"]
    assert (bridge_overrides_of(res).get("rerun_state_machine.check_for_nan_in_loss") is False) == full


def test_the_bridge_values_are_megatron_core_choices(mcore: object) -> None:
    """The dispatcher, flex backend, CUDA-graph and drop-policy values the Bridge export writes
    are among megatron-core 0.16.1's TransformerConfig Literal choices."""
    import typing

    from megatron.core.transformer.transformer_config import TransformerConfig

    from paraplan.export.megatron_moe import BRIDGE_FULL_GRAPH, DISPATCHERS, DROP_POLICY

    hints = typing.get_type_hints(TransformerConfig)
    choices = {
        name: set(typing.get_args(hints[name]))
        for name in hints
        if typing.get_origin(hints[name]) is typing.Literal
    }
    assert {kind for kind, _ in DISPATCHERS.values()} <= choices["moe_token_dispatcher_type"]
    assert {b for _, b in DISPATCHERS.values() if b} <= choices["moe_flex_dispatcher_backend"]
    assert {"none", "transformer_engine", BRIDGE_FULL_GRAPH[0]} <= choices["cuda_graph_impl"]
    assert DROP_POLICY in choices["moe_token_drop_policy"]
