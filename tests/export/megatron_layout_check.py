"""megatron-core's own layout code reads paraplan's pipeline layouts and hybrid patterns.

Imports nothing of paraplan (it runs under the Python 3.12 venv with megatron-core 0.19.2, and
in-process where megatron-core is installed):

- ``--pipeline-model-parallel-layout``: ``PipelineParallelLayerLayout`` parses the string
  (``parse_str_to_list``), ``validate_layer_layout(num_layers, mtp_num_layers)`` checks it, and
  ``get_num_layers_to_build`` / ``get_layer_offset`` say which decoder and MTP layers each
  (pp rank, virtual stage) builds.
- ``--hybrid-layer-pattern`` (0.19.2 only): ``get_hybrid_total_layer_count``,
  ``get_hybrid_total_pipeline_segment_count`` and ``select_pipeline_segment`` (segment j of the
  pattern, asked as virtual stage j of a one-rank pipeline: index = vp_stage * 1 + 0).

Input (stdin): a JSON list of ``{"name", "layout", "pp", "num_layers", "mtp"}`` or
``{"name", "hybrid", "pp"}``. Output (stdout, last line): name -> verdict (``judge``).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings

warnings.filterwarnings("ignore")


def judge_layout(case: dict) -> dict:
    """Decoder/MTP layers and their offsets per [pp rank][vp stage], where E and L sit."""
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    layout = PipelineParallelLayerLayout(case["layout"], case["pp"])
    layout.validate_layer_layout(case["num_layers"], case["mtp"] or None)
    pp, vp = layout.pipeline_model_parallel_size, layout.virtual_pipeline_model_parallel_size
    # as initialize_model_parallel sets it: the stage lookups read vp_stage only when it is set
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)

    def per_stage(fn, kind):  # noqa: ANN001, ANN202
        return [[fn(layer_type=kind, vp_stage=v, pp_rank=r) for v in range(vp)] for r in range(pp)]

    where = {
        kind.name: [[r, v] for r in range(pp) for v in range(vp) if kind in layout.layout[r][v]]
        for kind in (LayerType.embedding, LayerType.loss)
    }
    return {
        "ok": True,
        "vp": vp,
        "decoder": per_stage(layout.get_num_layers_to_build, LayerType.decoder),
        "offset": per_stage(layout.get_layer_offset, LayerType.decoder),
        "mtp": per_stage(layout.get_num_layers_to_build, LayerType.mtp),
        **where,
    }


def judge_hybrid(case: dict) -> dict:
    """The pattern's layer count, segment count and each segment's layers and offset."""
    import torch.distributed as dist
    from megatron.core.models.hybrid.hybrid_layer_allocation import (
        get_hybrid_total_layer_count,
        get_hybrid_total_pipeline_segment_count,
        parse_hybrid_pattern,
        select_pipeline_segment,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():  # the segment selection logs on each pipeline stage
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    pattern = case["hybrid"]
    main = parse_hybrid_pattern(pattern).main_pattern or ""
    count = get_hybrid_total_pipeline_segment_count(pattern)
    world = dist.group.WORLD  # one rank: tensor and data groups for the per-stage log line
    segments = [
        select_pipeline_segment(main, None, j if count > 1 else None, tp_group=world, dp_cp_group=world)
        for j in range(count)
    ]
    return {
        "ok": True,
        "layers": get_hybrid_total_layer_count(pattern),
        "segments": ["".join(layers) for layers, _ in segments],
        "offsets": [offset for _, offset in segments],
    }


def judge(case: dict) -> dict:
    """One case's verdict; never raises."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return judge_hybrid(case) if "hybrid" in case else judge_layout(case)
    except Exception as exc:  # noqa: BLE001 - the verdict carries any refusal
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    from megatron.core import __version__

    verdicts = {case["name"]: judge(case) for case in json.load(sys.stdin)}
    print(json.dumps({"version": __version__, "verdicts": verdicts}))
