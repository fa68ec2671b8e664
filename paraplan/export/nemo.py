"""NeMo 2 / Megatron-Bridge 0.6.2 export: a Python file of recipe overrides (frameworks.md §6).

Megatron-Bridge's ``ConfigContainer`` keeps parallelism on the model provider (a megatron-core
``TransformerConfig``), batch sizes on ``train``, sharding on ``ddp``; NeMo 2 recipes keep
parallel degrees on ``trainer.strategy`` and batch sizes on ``data``. Both build megatron-core
configs, so Megatron's rules apply unchanged (rules/nemo.py reuses rules/megatron.py), plus
Bridge's own: ``dist.use_tp_pp_dp_mapping`` cannot be combined with Megatron-FSDP. Mixture-of-
experts plans set the expert-parallel and expert-tensor-parallel sizes. The pipeline split is
Megatron's (``megatron.pipeline_args``): the same ``pipeline_model_parallel_layout`` string, or
for a hybrid model its stages as '|' segments of ``hybrid_layer_pattern`` (Bridge's
HybridModelProvider; it builds no virtual stages, rules/nemo.py). The planned model goes in
as ``model.*`` TransformerConfig / GPTModelProvider fields (nemo_model.py: shape, positions,
norms, biases, QK-norm, windows, router, MLA), so whatever recipe the user starts from builds it;
megatron-core 0.16.1 builds them into the plan model's parameter count in
tests/export/test_oracles.py.

The generated ``nemo.py`` holds ``BRIDGE_OVERRIDES`` and ``NEMO2_OVERRIDES`` (dotted path ->
value), ``apply(config, overrides)`` to set them on a recipe object, and prints the Bridge
overrides as Hydra-style ``key=value`` lines when run. The Bridge paths are from the 0.6.2 wheel;
the NeMo 2 paths follow NVIDIA's NeMo 2 docs and were not executed here.
"""

from __future__ import annotations

from paraplan.cost import CudaGraphs, Precision
from paraplan.export import ExportContext, enforce, header_lines
from paraplan.export import megatron as mg
from paraplan.export.megatron_moe import BRIDGE_FULL_GRAPH_PATHS, state_fields
from paraplan.export.nemo_model import model_fields
from paraplan.rules import rules_of
from paraplan.rules.launch_env import megatron_job_env
from paraplan.rules.megatron import hybrid_pattern

__all__ = ["BRIDGE_PATHS", "NEMO2_PATHS", "render", "settings", "bridge_overrides", "nemo2_overrides"]

FRAMEWORK = "NeMo 2 / Megatron-Bridge 0.6.2"

BRIDGE_PATHS: dict[str, str] = {
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vp": "model.virtual_pipeline_model_parallel_size",
    "layout": "model.pipeline_model_parallel_layout",
    "hybrid_pattern": "model.hybrid_layer_pattern",  # HybridModelProvider (hybrid_provider.py)
    "first_stage_layers": "model.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.num_layers_in_last_pipeline_stage",
    "account_for_embedding": "model.account_for_embedding_in_pipeline_split",
    "account_for_loss": "model.account_for_loss_in_pipeline_split",
    "cp": "model.context_parallel_size",
    "cp_comm": "model.cp_comm_type",
    "sp": "model.sequence_parallel",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "recompute": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
    "activation_offloading": "model.fine_grained_activation_offloading",
    "offload_modules": "model.offload_modules",
    "seq_len": "model.seq_length",
    "micro_batch": "train.micro_batch_size",
    "global_batch": "train.global_batch_size",
    "distributed_optimizer": "ddp.use_distributed_optimizer",
    "fsdp": "ddp.use_megatron_fsdp",
    "fsdp_strategy": "ddp.data_parallel_sharding_strategy",
    "overlap_grad_reduce": "ddp.overlap_grad_reduce",
    "overlap_param_gather": "ddp.overlap_param_gather",
    "fp32_grads": "ddp.grad_reduce_in_fp32",
    "ckpt_format": "checkpoint.ckpt_format",
    "tp_pp_dp_order": "dist.use_tp_pp_dp_mapping",
    "mixed_precision": "mixed_precision",
}
"""paraplan concept -> Megatron-Bridge ConfigContainer path."""

NEMO2_PATHS: dict[str, str] = {
    "tp": "trainer.strategy.tensor_model_parallel_size",
    "pp": "trainer.strategy.pipeline_model_parallel_size",
    "vp": "trainer.strategy.virtual_pipeline_model_parallel_size",
    "layout": "model.config.pipeline_model_parallel_layout",
    "hybrid_pattern": "model.config.hybrid_override_pattern",  # SSMConfig (nemo_toolkit 2.4.0 ssm.py)
    "first_stage_layers": "model.config.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.config.num_layers_in_last_pipeline_stage",
    "account_for_embedding": "model.config.account_for_embedding_in_pipeline_split",
    "account_for_loss": "model.config.account_for_loss_in_pipeline_split",
    "cp": "trainer.strategy.context_parallel_size",
    "cp_comm": "model.config.cp_comm_type",
    "sp": "trainer.strategy.sequence_parallel",
    "ep": "trainer.strategy.expert_model_parallel_size",
    "etp": "model.config.expert_tensor_parallel_size",
    "recompute": "model.config.recompute_granularity",
    "recompute_method": "model.config.recompute_method",
    "recompute_layers": "model.config.recompute_num_layers",
    "recompute_modules": "model.config.recompute_modules",
    "activation_offloading": "model.config.fine_grained_activation_offloading",
    "offload_modules": "model.config.offload_modules",
    "seq_len": "model.config.seq_length",
    "micro_batch": "data.micro_batch_size",
    "global_batch": "data.global_batch_size",
    "distributed_optimizer": "optim.config.use_distributed_optimizer",
    "fsdp": "trainer.strategy.ddp.use_megatron_fsdp",
    "fsdp_strategy": "trainer.strategy.ddp.data_parallel_sharding_strategy",
    "overlap_grad_reduce": "trainer.strategy.ddp.overlap_grad_reduce",
    "overlap_param_gather": "trainer.strategy.ddp.overlap_param_gather",
    "fp32_grads": "trainer.strategy.ddp.grad_reduce_in_fp32",
    "tp_pp_dp_order": "trainer.strategy.use_tp_pp_dp_mapping",
}
"""paraplan concept -> NeMo 2 recipe path (precision is a trainer plugin: see the notes)."""


MIXED_PRECISION = {
    Precision.BF16: "bf16_mixed",
    Precision.FP16: "fp16_mixed",
    Precision.FP8: "bf16_with_fp8_delayed_scaling_mixed",
    Precision.FP8_BLOCKWISE: "bf16_with_fp8_subchannel_scaling_mixed",
    Precision.MXFP8: "bf16_with_mxfp8_mixed",
    Precision.NVFP4: "bf16_with_nvfp4_mixed",
}
"""Megatron-Bridge 0.6.2 mixed-precision recipes (training/mixed_precision.py)."""
NEMO2_PRECISION = {
    Precision.BF16: "bf16_mixed()",
    Precision.FP16: "fp16_mixed()",
    Precision.FP8: "bf16_with_fp8_mixed()",
    Precision.FP8_BLOCKWISE: "bf16_with_fp8_subchannel_scaling_mixed()",
    Precision.MXFP8: "bf16_with_mxfp8_mixed()",
}
"""NeMo 2.4.0 precision plugins (nemo/collections/llm/recipes/precision/mixed_precision.py); it
has none for NVFP4."""


def settings(ctx: ExportContext) -> list[tuple[str, object]]:
    """(concept, value) pairs of the plan in megatron-core terms (rules enforced first)."""
    enforce(ctx, FRAMEWORK, rules_of("nemo").rules)  # its launch rules first
    p, job = ctx.plan, ctx.inst.job
    out: list[tuple[str, object]] = [
        ("tp", p.tp),
        ("pp", p.pp),
        ("cp", p.cp),
        ("sp", p.sequence_parallel and p.tp > 1),
    ]
    for key, value in mg.pipeline_args(p, ctx.spec):
        if key != "pp":
            out.append((key, True if value is None else value))  # store_true flags: True
    if p.cp > 1:
        out.append(("cp_comm", mg.CP_COMM_TYPES[p.cp_comm]))
    if ctx.spec.is_moe:
        out += [("ep", p.ep), ("etp", p.expert_tp)]
    for key, value in mg.recompute_settings(p, job.recompute_modules):  # partial: method block, N layers
        if key == "recompute_modules":
            value = list(value) if isinstance(value, tuple) else [value]
        out.append((key, int(value) if key == "recompute_layers" else value))
    for key, value in mg.offload_settings(job.offload_modules):  # TransformerConfig fields
        out.append((key, True if value is None else list(value) if isinstance(value, tuple) else value))
    out += [
        ("seq_len", job.seq_len),
        ("micro_batch", p.micro_batch),
        ("global_batch", job.global_batch),
        ("distributed_optimizer", p.zero >= 1),
    ]
    if p.zero >= 2:
        out += [
            ("fsdp", True),
            ("fsdp_strategy", mg.FSDP_STRATEGIES[p.zero]),
            ("ckpt_format", mg.FSDP_CKPT_FORMAT),
        ]
    overlap = job.overlap_dp_comm and p.dp * p.cp > 1
    out += [
        ("overlap_grad_reduce", overlap),
        ("overlap_param_gather", overlap and p.zero >= 1),
        ("fp32_grads", job.fp32_grads),
    ]
    if mg.megatron_order(p) == "tp-cp-ep-pp-dp":
        out.append(("tp_pp_dp_order", True))
    out.append(("mixed_precision", MIXED_PRECISION[ctx.precision]))
    return out


def bridge_overrides(ctx: ExportContext) -> dict[str, object]:
    """Megatron-Bridge ConfigContainer path -> value: the plan's settings, then the model."""
    out = {BRIDGE_PATHS[k]: v for k, v in settings(ctx)}
    out |= {f"model.{k}": v for k, v in model_fields(ctx) + state_fields(ctx)}
    return out | (BRIDGE_FULL_GRAPH_PATHS if ctx.plan.cuda_graphs is CudaGraphs.FULL else {})


def nemo2_overrides(ctx: ExportContext) -> dict[str, object]:
    """NeMo 2 recipe path -> value (precision goes in a trainer plugin instead). NeMo 2's
    SSMConfig.hybrid_override_pattern takes no '|' (its MambaStack splits the layers evenly).
    ``cuda_graph_impl`` is written only when the plan captures graphs (NeMo 2.4's megatron-core
    may predate the field; its default is no graphs)."""
    out = {
        NEMO2_PATHS[k]: str(v).replace("|", "") if k == "hybrid_pattern" else v
        for k, v in settings(ctx)
        if k in NEMO2_PATHS
    }
    state = [(k, v) for k, v in state_fields(ctx) if (k, v) != ("cuda_graph_impl", "none")]
    return out | {f"model.config.{k}": v for k, v in model_fields(ctx) + state}


def _dict_literal(name: str, values: dict[str, object]) -> str:
    rows = "".join(f"    {k!r}: {v!r},\n" for k, v in values.items())
    return f"{name} = {{\n{rows}}}\n"


_IMPORTS = "import megatron.core.activations  # noqa: F401\nimport torch\n\n"

_RUNTIME = '''

def apply(config, overrides=BRIDGE_OVERRIDES):
    """Set each dotted path of ``overrides`` on ``config`` (a ConfigContainer or a recipe)."""
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        target = config
        for name in parents:
            target = getattr(target, name)
        setattr(target, leaf, value)
    return config


def _hydra(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if isinstance(value, str):
        return "'" + value + "'"
    return str(value)


def hydra_overrides(overrides=BRIDGE_OVERRIDES):
    """Hydra-style ``key=value`` strings (Megatron-Bridge ``parse_hydra_overrides``); functions
    (model.activation_func) are no Hydra values: ``apply`` sets them."""
    return [f"{path}={_hydra(value)}" for path, value in overrides.items() if not callable(value)]


if __name__ == "__main__":
    print("\\n".join(hydra_overrides()))
'''


def render(ctx: ExportContext) -> str:
    """``nemo.py``: docstring header, the two override tables, ``apply`` and Hydra printing."""
    bridge = bridge_overrides(ctx)
    nemo2 = nemo2_overrides(ctx)
    notes = [
        "Megatron-Bridge: cfg = apply(recipe_config, BRIDGE_OVERRIDES); or pass the lines "
        "`python nemo.py` prints as overrides.",
        "NeMo 2: apply(recipe, NEMO2_OVERRIDES) on a nemo.collections.llm recipe; "
        + (
            f"set precision with recipe.trainer.plugins = {NEMO2_PRECISION[ctx.precision]}."
            if ctx.precision in NEMO2_PRECISION
            else f"NeMo 2.4 has no precision plugin for {ctx.precision.value}: run it with Megatron-Bridge."
        ),
        "The model.* overrides set the planned architecture on whatever recipe you start "
        "from"
        + (
            " (latent attention: start from a DeepSeek recipe, whose provider is an MLATransformerConfig)"
            if ctx.spec.is_mla
            else ""
        )
        + ".",
        f"World size {ctx.cluster.num_devices} ({ctx.cluster.num_nodes} nodes x "
        f"{ctx.cluster.devices_per_node}); data-parallel size {ctx.plan.dp} follows from it.",
    ]
    if hybrid_pattern(ctx.spec) and ctx.plan.pp > 1:
        notes.append(
            "Hybrid stages: Megatron-Bridge builds the plan's stages from the '|' segments of "
            "model.hybrid_layer_pattern; NeMo 2's SSMConfig.hybrid_override_pattern has none and "
            "its MambaStack splits the layers evenly over pp."
        )
    if ctx.plan.moe_overlap:
        notes.append(
            "EP overlap: if the recipe sets cfg.comm_overlap, also set "
            "cfg.comm_overlap.overlap_moe_expert_parallel_comm = True (CommOverlapConfig.setup "
            "writes its own value, False by default, over model.overlap_moe_expert_parallel_comm)."
        )
    if ctx.plan.cuda_graphs is CudaGraphs.FULL:
        notes.append(
            "NeMo 2: turn off the NaN check in loss with full-iteration CUDA graphs "
            "(Bridge: rerun_state_machine.check_for_nan_in_loss = False, set above)."
        )
    for var, value in megatron_job_env(ctx.inst.job).items():
        notes.append(
            f"Launch with {var}={value} in the environment (job.allocator / job.offload_modules; NeMo-Run: "
            f"executor.env_vars[{var!r}] = {value!r})."
        )
    if ctx.plan.zero >= 2:
        notes.append(f"Megatron-FSDP: leave {mg.CUDA_CONNECTIONS_VAR} unset (or > 1).")
    elif ctx.plan.tp > 1 or ctx.plan.cp > 1:
        notes.append(f"Set {mg.CUDA_CONNECTIONS_VAR}=1 (TP/CP on pre-Blackwell GPUs).")
    doc = "\n".join(header_lines(ctx, FRAMEWORK) + [""] + notes)
    return (
        f'"""{doc}\n"""\n\n'
        + _IMPORTS
        + _dict_literal("BRIDGE_OVERRIDES", bridge)
        + "\n"
        + _dict_literal("NEMO2_OVERRIDES", nemo2)
        + _RUNTIME
    )
