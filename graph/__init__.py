"""Models: architecture specs, presets, Hugging Face import and the layer graph (no devices)."""

from paraplan.graph.builder import from_layers
from paraplan.graph.hf_config import from_hf_config
from paraplan.graph.layer import Experts, Gemm, Layer, LayerKind
from paraplan.graph.layer_items import Attention, Block, Mlp, Moe, Mtp, repeat
from paraplan.graph.layers import LayerGraph, build_graph
from paraplan.graph.presets import from_fields, preset, preset_names, to_fields
from paraplan.graph.spec import PATTERN_SYMBOLS, Activation, Mamba, ModelSpec, Vision
from paraplan.graph.trace import (
    TracedModel,
    from_hf_trace,
    from_module,
    trace_hf_config,
    trace_module,
)

__all__ = [
    "Attention",
    "Block",
    "Mlp",
    "Moe",
    "Mtp",
    "from_layers",
    "repeat",
    "Activation",
    "Experts",
    "Gemm",
    "Layer",
    "LayerGraph",
    "LayerKind",
    "Mamba",
    "ModelSpec",
    "PATTERN_SYMBOLS",
    "Vision",
    "TracedModel",
    "build_graph",
    "from_fields",
    "from_hf_config",
    "from_hf_trace",
    "from_module",
    "preset",
    "preset_names",
    "to_fields",
    "trace_hf_config",
    "trace_module",
]
