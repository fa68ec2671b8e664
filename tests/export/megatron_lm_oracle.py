"""Megatron-LM's own code judges paraplan's Megatron exports (run under Python 3.12).

megatron-core 0.19.2 (Python >= 3.12 only) ships Megatron-LM's ``megatron/training``: this
script feeds each exported argument vector to its ``parse_and_validate_args``, builds the process
groups with ``parallel_state.initialize_model_parallel`` on torch's fake backend in a world of
the plan's size, and builds the GPT model (``gpt_config_from_args`` + ``GPTModelBuilder``, the
path ``pretrain_gpt.py`` takes) on the meta device at tensor/pipeline size 1 to count its
parameters. It imports nothing of paraplan, so its venv needs only torch and megatron-core.

Input (stdin): a JSON list of ``{"name", "argv", "num_devices"}``. Output (stdout, last line):
a JSON object name -> ``{"ok": true, "params", "padded_vocab", "groups": {axis: size},
"layout_chunks", "recompute", "precision", "moe_state"}`` (decoder layers per pp rank and virtual
stage of the parsed ``--pipeline-model-parallel-layout``, null without one) or
``{"ok": false, "error"}``. ``moe_state`` is the MoE software state (dispatcher, EP overlap, CUDA
graphs, routing) of the TransformerConfig megatron-core builds from the parsed arguments at the
plan's own parallel sizes, so its ``__post_init__`` checks run on them (``STATE_FIELDS``). Used by
tests/export/test_megatron_lm_oracle.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state as mpu  # noqa: E402
from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.training import arguments as megatron_arguments  # noqa: E402
from megatron.training import global_vars  # noqa: E402
from megatron.training.argument_utils import core_transformer_config_from_args, gpt_config_from_args  # noqa: E402
from megatron.training.arguments import parse_and_validate_args  # noqa: E402
from megatron.training.models.gpt import GPTModelBuilder  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

ONE_DEVICE = {  # settings that make the argument namespace describe the whole model on one rank
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "pipeline_model_parallel_layout": None,
    "decoder_first_pipeline_num_layers": None,
    "decoder_last_pipeline_num_layers": None,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "context_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "expert_tensor_parallel_size": 1,
    "sequence_parallel": False,
    "recompute_granularity": None,
    "recompute_method": None,
    "recompute_num_layers": None,
    "use_cpu_initialization": True,
    "perform_initialization": False,
    # kernels that need Transformer Engine or CUDA -> megatron-core's local PyTorch modules, with
    # the same parameters (the zero-centred LayerNorm stores the same weight and bias; the
    # alltoall dispatcher opens a CUDA stream)
    "transformer_impl": "local",
    "apply_rope_fusion": False,
    "gradient_accumulation_fusion": False,
    "moe_grouped_gemm": False,
    "moe_token_dispatcher_type": "allgather",
    "overlap_moe_expert_parallel_comm": False,  # needs ep > 1 (checked at the plan's sizes: _moe_state)
    "delay_wgrad_compute": False,
    "cuda_graph_impl": "none",  # graphs capture kernels; they change no parameter
    "cuda_graph_modules": [],
    "moe_permute_fusion": False,
    "moe_router_fusion": False,
    "no_persist_layer_norm": True,
    "layernorm_zero_centered_gamma": False,
    "masked_softmax_fusion": False,
    "cross_entropy_loss_fusion": False,
    # low-precision recipes run Transformer Engine kernels; they change no parameter
    "fp8": None,
    "fp4": None,
}


KERNELS = (
    "transformer_impl",
    "apply_rope_fusion",
    "gradient_accumulation_fusion",
    "moe_grouped_gemm",
    "moe_permute_fusion",
    "moe_router_fusion",
    "no_persist_layer_norm",
    "layernorm_zero_centered_gamma",
    "masked_softmax_fusion",
    "cross_entropy_loss_fusion",
    "fp8",
    "fp4",
)
"""The ONE_DEVICE settings that only swap kernels (no Transformer Engine or CUDA here)."""

STATE_FIELDS = (
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "overlap_moe_expert_parallel_comm",
    "cuda_graph_impl",
    "cuda_graph_modules",
    "moe_router_force_load_balancing",
    "moe_expert_capacity_factor",
    "moe_token_drop_policy",
    "moe_pad_expert_input_to_capacity",
    "check_for_nan_in_loss_and_grad",  # an argument, not a TransformerConfig field
    "fine_grained_activation_offloading",  # job.offload_modules (cost/offload.py)
    "offload_modules",
)


PARSED_KERNEL_FIELDS = ("moe_router_fusion", "moe_permute_fusion")
"""Kernel switches of the MoE software state (job.moe_router_fusion / moe_permute_fusion): read
as parsed, before ONE_DEVICE swaps them off (their fused kernels need Transformer Engine)."""

_INSTALLED_TE_MIN_VERSION = megatron_arguments.is_te_min_version


def _plain(value: object) -> object:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return getattr(value, "name", value) if not isinstance(value, (bool, int, float, str)) else value


def _moe_state(args: object) -> dict[str, object]:
    """The TransformerConfig of the parsed arguments at the plan's parallel sizes (kernels
    swapped as in ONE_DEVICE): its __post_init__ runs megatron-core's EP-overlap, dispatcher,
    CUDA-graph and capacity checks; the MoE software state it holds."""
    real = argparse.Namespace(**vars(args))
    for key in KERNELS:
        if key != "moe_grouped_gemm":  # kept as parsed: the config's own check of moe_act
            setattr(real, key, ONE_DEVICE[key])  # recompute reads it; no kernel is built here
    config = core_transformer_config_from_args(real)
    state = {name: _plain(getattr(config, name, getattr(args, name, None))) for name in STATE_FIELDS}
    return state | {name: getattr(args, name) for name in PARSED_KERNEL_FIELDS}  # as parsed


def _fake_world(num_devices: int) -> None:
    if dist.is_initialized():
        mpu.destroy_model_parallel()
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=num_devices)


def _parallel_groups(args: object, num_devices: int) -> dict[str, int]:
    """initialize_model_parallel as megatron/training/initialize.py calls it; group sizes."""
    _fake_world(num_devices)
    mpu.initialize_model_parallel(
        args.tensor_model_parallel_size,
        args.pipeline_model_parallel_size,
        args.virtual_pipeline_model_parallel_size,
        context_parallel_size=args.context_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
        expert_tensor_parallel_size=args.expert_tensor_parallel_size,
        order="tp-cp-ep-dp-pp" if not args.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
        create_gloo_process_groups=False,
    )
    return {
        "tp": mpu.get_tensor_model_parallel_world_size(),
        "pp": mpu.get_pipeline_model_parallel_world_size(),
        "dp": mpu.get_data_parallel_world_size(),
        "cp": mpu.get_context_parallel_world_size(),
        "ep": mpu.get_expert_model_parallel_world_size(),
    }


def _local_mla_core_attention() -> None:
    """megatron-core's local DotProductAttention (used without Transformer Engine) does not take
    the k_channels / v_channels MLA passes (only TE's does); it holds no parameters, so the count
    drops them."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    init = DotProductAttention.__init__
    if getattr(init, "drops_mla_channels", False):
        return

    def drop_channels(self, *a, k_channels=None, v_channels=None, **kw):  # noqa: ARG001
        init(self, *a, **kw)

    drop_channels.drops_mla_channels = True
    DotProductAttention.__init__ = drop_channels


def _num_params(args: object) -> tuple[int, int]:
    """Parameters of the whole model (tensor/pipeline size 1) on the meta device, and the
    padded vocabulary the embedding holds."""
    for key, value in ONE_DEVICE.items():
        setattr(args, key, value)
    _fake_world(1)
    mpu.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    config = gpt_config_from_args(args)
    torch.cuda.current_device = lambda: "cpu"  # YaRN's frequency cache asks for the GPU
    _local_mla_core_attention()
    with torch.device("meta"):
        model = GPTModelBuilder(config).build_model(
            ProcessGroupCollection.use_mpu_process_groups(), pre_process=True, post_process=True
        )
    vocab = model.embedding.word_embeddings.weight.shape[0]
    return sum(p.numel() for p in model.parameters()), int(vocab)


def _layout_chunks(args: object) -> list[list[int]] | None:
    """Decoder layers per [pp rank][virtual stage] of the parsed --pipeline-model-parallel-layout
    (validated against the model's layer and MTP counts as TransformerConfig does), or None."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    text = args.pipeline_model_parallel_layout
    if text is None:
        return None
    layout = (
        text
        if isinstance(text, PipelineParallelLayerLayout)
        else PipelineParallelLayerLayout(text, args.pipeline_model_parallel_size)
    )
    layout.validate_layer_layout(args.num_layers, args.mtp_num_layers)
    return [[stage.count(LayerType.decoder) for stage in row] for row in layout.layout]


def judge(case: dict) -> dict:
    """Parse, validate, build the groups and the model of one export; never raises."""
    os.environ.update(WORLD_SIZE=str(case["num_devices"]), RANK="0", LOCAL_RANK="0")
    for key, value in case.get("env", {}).items():  # the export's environment (megatron_env)
        os.environ.pop(key, None) if value is None else os.environ.update({key: value})
    # the simulated GPU: validate_args asks CUDA for the compute capability's major version
    major = case.get("arch_major", 9)  # Hopper unless the case says otherwise
    megatron_arguments.get_device_arch_version = lambda: major
    torch.cuda.get_device_capability = lambda *_, **__: (major, 0)
    # the simulated machine's Transformer Engine: validate_args asks the installed one (this venv
    # has none) for >= 2.7 before it takes --fp4-format (NVFP4BlockScaling)
    megatron_arguments.is_te_min_version = (
        (lambda *_, **__: True) if "--fp4-format" in case["argv"] else _INSTALLED_TE_MIN_VERSION
    )
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    global_vars.unset_global_variables()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = parse_and_validate_args()
            recompute = [
                args.recompute_granularity,
                args.recompute_method,
                args.recompute_num_layers,
                args.recompute_modules,
            ]
            precision = {
                "bf16": args.bf16,
                "fp8": args.fp8,
                "fp8_recipe": args.fp8_recipe if args.fp8 else None,
                "fp4": args.fp4,
                "fp4_recipe": args.fp4_recipe if args.fp4 else None,
            }
            groups = _parallel_groups(args, case["num_devices"])
            moe_state = _moe_state(args)
            chunks = _layout_chunks(args)
            params, vocab = _num_params(args)
    except BaseException as e:  # SystemExit from argparse, AssertionError from validate_args
        import traceback

        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000], "tb": traceback.format_exc()[-3000:]}
    return {
        "ok": True,
        "params": params,
        "padded_vocab": vocab,
        "groups": groups,
        "layout_chunks": chunks,
        "recompute": recompute,
        "precision": precision,
        "moe_state": moe_state,
    }


def main() -> None:
    cases = json.load(sys.stdin)
    out = {case["name"]: judge(case) for case in cases}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
