"""torchtitan 0.3.0's own code accepts every torchtitan export and builds the planned model.

For 15 plans over every model torchtitan's config functions build (architecture_plans.py):
``ConfigManager.parse_args`` parses the exported command line; the model of the parsed config,
built on the meta device, has the plan model's parameter count (plus what the graph does not
model); ``ParallelDims`` builds the device mesh on torch's fake backend in a world of the plan's
size and its tp/cp/pp groups of rank 0 are the plan's; with pp > 1 the pipeline split
(``_pipeline_module_split``) takes the exported ``module_fqns_per_model_part`` and the schedule
(``_build_pipeline_schedule``) accepts the micro-batches, and the stage parts hold every
parameter once.
"""

from __future__ import annotations

import re
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest
from paraplan.graph import build_graph

from paraplan.export import ExportError, context, export_text
from paraplan.export.megatron import rank_groups
from paraplan.export.torchtitan import torchtitan_args

sys.path.insert(0, str(Path(__file__).parent))
from architecture_plans import (  # noqa: E402
    LLAMA3_ON_TORCHTITAN,
    REFUSED_BY_TORCHTITAN,
    TORCHTITAN_CASES,
    result,
    unmodelled_params,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]


@pytest.fixture(scope="module")
def titan() -> object:
    pytest.importorskip("torch")
    pytest.importorskip("triton")  # torchtitan's MoE kernels import it at module load
    return pytest.importorskip("torchtitan")


def _parse(argv: list[str]) -> object:
    from torchtitan.config.manager import ConfigManager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConfigManager().parse_args(argv)


@cache
def _whole_model(module: str, function: str) -> tuple[object, int]:
    """The model of a config function on the meta device, and its parameter count."""
    import torch

    config = _parse(["--module", module, "--config", function])
    with torch.device("meta"):
        model = config.model_spec.model.build()  # type: ignore[attr-defined]
    return model, sum(p.numel() for p in model.parameters())


def _fake_world(num_devices: int) -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=num_devices)


@pytest.mark.parametrize("name", TORCHTITAN_CASES)
def test_torchtitan_accepts_the_export_and_builds_the_planned_model(name: str, titan: object) -> None:
    import torch
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.pipeline_parallel import (
        _build_pipeline_schedule,
        _pipeline_module_split,
        _split_module,
    )

    res = result(TORCHTITAN_CASES[name])
    p, spec = res.plan, context(res).spec
    argv = torchtitan_args(context(res))
    config = _parse(argv)
    par = config.parallelism  # type: ignore[attr-defined]
    assert (
        par.data_parallel_replicate_degree * par.data_parallel_shard_degree,
        par.tensor_parallel_degree,
        par.pipeline_parallel_degree,
        par.context_parallel_degree,
        par.expert_parallel_degree,
    ) == (p.dp, p.tp, p.pp, p.cp, p.ep)
    assert not config.compile.enable and not config.compile.enable_async_tensor_parallel  # type: ignore[attr-defined]

    model, num_params = _whole_model(argv[1], argv[3])
    assert num_params == build_graph(spec).num_params + unmodelled_params(
        spec, padded_vocab=spec.vocab, max_positions=0
    )

    _fake_world(p.num_devices)
    dims = ParallelDims.from_config(par, world_size=p.num_devices)
    dims.build_mesh()
    ours = rank_groups(p)
    for axis in ("tp", "cp", "pp"):
        if getattr(p, axis) > 1:
            assert sorted(dims.get_mesh(axis).mesh.flatten().tolist()) == ours[axis][0], axis
    if p.pp == 1:
        return
    parts = par.module_fqns_per_model_part
    stages, _ = _pipeline_module_split(
        model, dims.get_mesh("pp"), par.pipeline_parallel_schedule, torch.device("meta"), parts
    )
    _build_pipeline_schedule(
        parallelism=par,
        local_batch_size=config.training.local_batch_size,  # type: ignore[attr-defined]
        stages=stages,
        loss_fn=lambda *a, **k: (None, None),
    )
    held = sum(sum(t.numel() for t in _split_module(model, part).parameters()) for part in parts)
    assert held == num_params


def test_the_torchtitan_plans_are_diverse() -> None:
    plans = [result(case).plan for case in TORCHTITAN_CASES.values()]
    assert len(plans) >= 15
    assert {p.zero for p in plans} == {0, 1, 2, 3}
    for axis in ("tp", "pp", "vp", "cp", "ep"):
        assert any(getattr(p, axis) > 1 for p in plans), axis


@pytest.mark.parametrize("name", REFUSED_BY_TORCHTITAN)
def test_torchtitan_refuses_a_model_no_config_function_builds(name: str) -> None:
    scenario, plan, what = REFUSED_BY_TORCHTITAN[name]
    with pytest.raises(ExportError, match=re.escape(what)):
        torchtitan_args(context(result((scenario, plan))))


def test_llama3_exports_on_the_llama31_config_with_a_rope_note() -> None:
    """Same shapes, parameters and cost; only the RoPE frequency scaling differs, and the export
    says so instead of refusing (a user training Llama 3 from scratch runs torchtitan's llama3)."""
    ctx = context(result(LLAMA3_ON_TORCHTITAN))
    args = torchtitan_args(ctx)
    assert "llama3_70b" in args
    assert "RoPE frequency scaling" in export_text(ctx.result, "torchtitan")


def _with(case: tuple[dict, dict], routing: object = None, **plan: object) -> tuple[dict, dict]:
    scen, pl = case
    job = {**scen["job"], **({"moe_routing": routing} if routing else {})}
    return {**scen, "job": job}, {**pl, **plan}


def test_torchtitan_parses_the_moe_software_state(titan: object) -> None:
    """Forced balance reaches debug.moe_force_load_balance; plan.cuda_graphs none turns the
    default forward + backward graph off, full leaves it on and passes _validate_cuda_graphs."""
    forced = _parse(
        torchtitan_args(context(result(_with(TORCHTITAN_CASES["qwen3-30b-a3b-ep8"], "force_balanced"))))
    )
    assert forced.debug.moe_force_load_balance is True  # type: ignore[attr-defined]
    assert forced.training.disable_cuda_graphs is True  # type: ignore[attr-defined]
    dense = next(c for c in TORCHTITAN_CASES.values() if c[1].get("pp", 1) == 1 and not c[1].get("ep"))
    graphs = _parse(torchtitan_args(context(result(_with(dense, cuda_graphs="full")))))
    assert graphs.training.disable_cuda_graphs is False  # type: ignore[attr-defined]
    assert graphs.debug.moe_force_load_balance is False  # type: ignore[attr-defined]
    graphs._validate_cuda_graphs()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("schedule", "cls"), [("zb1p", "ScheduleInterleavedZeroBubble"), ("dualpipev", "ScheduleDualPipeV")]
)
def test_torchtitan_parses_the_pipeline_schedule(titan: object, schedule: str, cls: str) -> None:
    """plan.pp_schedule (issue 22 item 2) reaches parallelism.pipeline_parallel_schedule as a
    name torch 2.13's get_schedule_class maps to the schedule's class."""
    from torch.distributed.pipelining.schedules import get_schedule_class

    case = _with(TORCHTITAN_CASES["llama3.1-70b-interleaved"], pp_schedule=schedule)
    config = _parse(torchtitan_args(context(result(case))))
    name = config.parallelism.pipeline_parallel_schedule  # type: ignore[attr-defined]
    assert get_schedule_class(name).__name__ == cls
