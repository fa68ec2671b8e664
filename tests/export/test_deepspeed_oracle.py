"""DeepSpeed 0.19.8's ``deepspeed.initialize`` accepts every DeepSpeed export in a world of the
plan's full size.

Each of 16 plans (architecture_plans.DEEPSPEED_CASES) runs in a child forked from a fork server,
with torch's fake process-group backend at the plan's device count (rank 0): the exported JSON goes to
``deepspeed.initialize`` with the model the export's notes ask for, a small stand-in of the
right kind, since the JSON carries no architecture: a Hugging Face Llama for AutoTP (which
shards only models it has a policy for), a ``PipelineModule`` of the plan's blocks with
``partition_method="type:Block"`` for pipelines, and for Ulysses the sequence-parallel ``mpu``
(``parallel_state_sp``). The engine must report the plan's micro-batch, accumulation steps,
data-parallel and sequence-parallel sizes, ZeRO stage and AutoTP size, shard the attention
over tp, and a pipeline's blocks per stage must be the plan's.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import traceback
import warnings
from pathlib import Path

import pytest

from paraplan.export import ExportError, context
from paraplan.export.deepspeed import deepspeed_config

sys.path.insert(0, str(Path(__file__).parent))
from architecture_plans import DEEPSPEED_CASES, REFUSED_BY_DEEPSPEED, result  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

TINY = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 512,
    "num_hidden_layers": 2,
}
"""The stand-in Llama: AutoTP needs kv heads >= tp (up to 8 here)."""


def _stand_in(plan: dict, config: dict) -> tuple[object, dict]:
    """The model the export asks for, small; and deepspeed.initialize's extra arguments."""
    import torch

    if plan["pp"] > 1:
        from deepspeed.pipe import LayerSpec, PipelineModule

        class Block(torch.nn.Linear):  # a transformer block: partition_method "type:Block"
            pass

        layers = [
            LayerSpec(torch.nn.Identity),
            *[LayerSpec(Block, 8, 8)] * plan["num_layers"],
            LayerSpec(torch.nn.Identity),
            LayerSpec(torch.nn.Identity),
        ]
        interval = config["pipeline"]["activation_checkpoint_interval"]
        return PipelineModule(
            layers=layers,
            num_stages=plan["pp"],
            partition_method="type:Block",
            activation_checkpoint_interval=interval,
            loss_fn=torch.nn.MSELoss(),
        ), {}
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY))
    if plan["cp"] == 1:
        return model, {}
    from deepspeed.runtime.sequence_parallel import parallel_state_sp

    parallel_state_sp.initialize_sequence_parallel(plan["cp"])
    return model, {"mpu": parallel_state_sp}


def _initialize(plan: dict, config: dict) -> dict:
    """deepspeed.initialize in a fake world of the plan's size; what the engine reports."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    warnings.filterwarnings("ignore")
    os.environ.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE=str(plan["num_devices"]),
        MASTER_ADDR="localhost",
        MASTER_PORT="29500",
    )
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan["num_devices"])
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    deepspeed.init_distributed()  # deepspeed.comm over the fake process group
    get_accelerator().is_fp16_supported = lambda: True  # the simulated GPU (the CPU has none)
    model, extra = _stand_in(plan, config)
    engine, *_ = deepspeed.initialize(
        model=model, config=config, **extra, optimizer=torch.optim.AdamW(model.parameters())
    )
    out = {
        "micro_batch": engine.train_micro_batch_size_per_gpu(),
        "grad_accum": engine.gradient_accumulation_steps(),
        "train_batch_size": engine.train_batch_size(),
        "zero": engine.zero_optimization_stage(),
        # Ulysses' mpu has no data-parallel size: the batch rule's world size is dp
        "dp": engine.dp_world_size or int(engine._config.world_size),
        "seq_dp": engine.seq_dp_world_size,
        "cp": engine.sequence_parallel_size,
        "tp": max(1, engine.autotp_size()),
    }
    if plan["pp"] > 1:
        parts = engine.module.parts  # indices into [embedding, *blocks, norm, head]
        out["blocks_per_stage"] = [
            sum(1 <= i <= plan["num_layers"] for i in range(a, b))
            for a, b in zip(parts, parts[1:], strict=False)
        ]
        out["stages"] = engine.num_stages
    if plan["tp"] > 1:
        weight = engine.module.model.layers[0].self_attn.q_proj.weight
        out["q_proj_out"] = (weight.ds_shape if hasattr(weight, "ds_shape") else weight.shape)[0]
    return out


def _child(plan: dict, config: dict, conn: object) -> None:
    try:
        conn.send({"ok": True, **_initialize(plan, config)})  # type: ignore[attr-defined]
    except BaseException as e:  # noqa: BLE001 - any rejection is the verdict
        conn.send(
            {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",  # type: ignore[attr-defined]
                "tb": traceback.format_exc()[-2000:],
            }
        )


def judge(plan: dict, config: dict) -> dict:
    """Run _initialize in a child process (DeepSpeed keeps process-wide group state), forked
    from a fork server that imported deepspeed: warm, and with none of this process's state
    (another test module's process group, its threads)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["deepspeed", "transformers"])
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(plan, config, child))
    proc.start()
    verdict = parent.recv() if parent.poll(600) else {"ok": False, "error": "timed out"}
    proc.join(30)
    return verdict


@pytest.fixture(scope="module")
def ds() -> object:
    pytest.importorskip("transformers")
    return pytest.importorskip("deepspeed")  # imported before forking: each child starts warm


@pytest.mark.parametrize("name", DEEPSPEED_CASES)
def test_deepspeed_initialize_accepts_the_export_in_the_full_world(name: str, ds: object) -> None:
    res = result(DEEPSPEED_CASES[name])
    p = res.plan
    config = deepspeed_config(context(res))
    plan = {
        "num_devices": p.num_devices,
        "pp": p.pp,
        "tp": p.tp,
        "cp": p.cp,
        "num_layers": sum(p.layers_per_stage),
    }
    verdict = judge(plan, config)
    assert verdict["ok"], verdict.get("tb")
    assert (verdict["micro_batch"], verdict["grad_accum"], verdict["zero"]) == (
        p.micro_batch,
        p.grad_accum,
        p.zero,
    )
    assert (verdict["dp"], verdict["cp"], verdict["tp"]) == (p.dp, p.cp, p.tp)
    assert verdict["seq_dp"] == p.dp * p.cp  # gradients reduce over the dp x Ulysses ranks
    global_batch = DEEPSPEED_CASES[name][0]["job"]["global_batch"]
    assert p.micro_batch * verdict["grad_accum"] * verdict["dp"] == global_batch
    assert verdict["train_batch_size"] == global_batch * (p.tp if p.tp > 1 else 1)
    if p.pp > 1:
        assert verdict["stages"] == p.pp
        assert verdict["blocks_per_stage"] == list(p.layers_per_stage)
    if p.tp > 1:
        assert verdict["q_proj_out"] == TINY["hidden_size"] // p.tp


def test_the_deepspeed_plans_are_diverse() -> None:
    plans = [result(case).plan for case in DEEPSPEED_CASES.values()]
    assert len(plans) >= 15
    assert {p.zero for p in plans} == {0, 1, 2, 3}
    for axis in ("tp", "pp", "cp"):
        assert any(getattr(p, axis) > 1 for p in plans), axis


@pytest.mark.parametrize("factor", [1, 2])
def test_deepspeed_rejects_any_fixed_train_batch_size_under_autotp_zero3(factor: int, ds: object) -> None:
    """Why the AutoTP export leaves train_batch_size out: the engine's check counts every rank
    (global batch x tp), ZeRO-3's zero.Init only the data-parallel ones (the global batch)."""
    name = "autotp8-zero3"
    res = result(DEEPSPEED_CASES[name])
    p = res.plan
    config = deepspeed_config(context(res))
    assert "train_batch_size" not in config
    gb = DEEPSPEED_CASES[name][0]["job"]["global_batch"]
    config = {**config, "train_batch_size": gb * (p.tp if factor == 2 else 1)}
    verdict = judge({"num_devices": p.num_devices, "pp": 1, "tp": p.tp, "cp": 1, "num_layers": 80}, config)
    assert not verdict["ok"] and "train_batch_size" in verdict["error"]


@pytest.mark.parametrize("name", REFUSED_BY_DEEPSPEED)
def test_deepspeed_refuses_autotp_with_a_pipeline(name: str) -> None:
    scenario, plan, what = REFUSED_BY_DEEPSPEED[name]
    with pytest.raises(ExportError, match=re.escape(what)):
        deepspeed_config(context(result((scenario, plan))))
