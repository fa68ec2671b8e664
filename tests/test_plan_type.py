"""Issue 12: one plan type. ``cost.Plan`` checks its own structure when built, ``PartialPlan`` has
its fields, the scenario's and the result's plan are I/O edges converted through ``fields(Plan)``,
and each validity rule is stated once (cost/validity.py) for check_plan, the search and the api."""

from dataclasses import fields

import pytest
from paraplan.cost import Axis, CPComm, Layout, PartialPlan, Plan, Recompute
from paraplan.cost.plan import LAYOUT_FIELDS, PLAN_FIELDS, plan_from_values, plan_key, plan_values
from paraplan.solver import Options
from paraplan.solver.space import divisors, families

import paraplan
from paraplan.api import fixed_knobs
from paraplan.errors import ConfigError
from paraplan.instance import build_instance, fixed_plan
from paraplan.scenario.plan_doc import DERIVED, PlanDoc
from paraplan.scenario.plan_knobs import fixed_knobs_of
from paraplan.scenario.schema import Scenario, load_scenario

LLAMA8B_8 = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "job": {"seq_len": 4096, "global_batch": 64},
}


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"dp": 0}, r"plan\.dp=0 must be at least 1"),
        ({"micro_batch": 0}, r"plan\.micro_batch=0 must be at least 1"),
        ({"zero": 4}, r"plan\.zero=4 must be 0, 1, 2 or 3"),
        ({"order": (Axis.TP, Axis.TP, Axis.DP, Axis.PP)}, r"must be a permutation of tp, cp, dp, pp"),
        ({"tp": 4, "etp": 2}, r"plan\.etp=2 must be 1 or tp=4"),
    ],
)
def test_a_plan_refuses_a_broken_structure_when_built(knobs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plan(**{"dp": 2, "tp": 1, "pp": 1, **knobs})


def test_partial_plan_has_plans_fields_and_reads_json_values() -> None:
    assert tuple(f.name for f in fields(PartialPlan)) == PLAN_FIELDS
    partial = PartialPlan.from_values(
        {"tp": 2, "order": ["tp", "dp", "cp", "pp"], "recompute": ["full", "none"], "cp_comm": "all_gather"}
    )
    assert partial.order == (Axis.TP, Axis.DP, Axis.CP, Axis.PP)
    assert partial.recompute == (Recompute.FULL, Recompute.NONE)
    assert partial.cp_comm is CPComm.ALL_GATHER and partial.dp is None
    with pytest.raises(ValueError, match="are not plan knobs"):
        PartialPlan.from_values({"tensor_parallel": 2})


def test_plan_values_round_trip_every_field() -> None:
    plan = Plan(
        dp=2,
        tp=4,
        pp=2,
        cp=2,
        ep=2,
        etp=1,
        cp_comm=CPComm.ALL_GATHER,
        vp=2,
        micro_batch=2,
        zero=3,
        sequence_parallel=True,
        recompute=(Recompute.FULL, Recompute.SELECTIVE),
        layers_per_stage=(5, 3),
        layers_per_chunk=((2, 3), (2, 1)),
        order=(Axis.DP, Axis.TP, Axis.CP, Axis.PP),
        stage_pools=(0, 1),
        torus_shape=(4, 4, 8),
    )
    values = plan_values(plan)
    assert values["recompute"] == ["full", "selective"] and values["layers_per_chunk"] == [[2, 3], [2, 1]]
    assert plan_from_values(values) == plan


def test_a_layout_is_a_plan_before_its_split() -> None:
    """The solver enumerates Layouts: Plan's fields less the per-stage ones, checked when built;
    ``Layout.plan`` adds a split and modes, ``Plan.layout`` drops them again."""
    per_stage = {"recompute", "recompute_layers", "layers_per_stage", "layers_per_chunk"}
    assert LAYOUT_FIELDS == tuple(n for n in PLAN_FIELDS if n not in per_stage)
    with pytest.raises(ValueError, match=r"plan\.zero=4 must be 0, 1, 2 or 3"):
        Layout(dp=2, tp=1, pp=1, zero=4)
    with pytest.raises(TypeError):
        Layout(dp=2, tp=1, pp=2, layers_per_stage=(1, 1))  # type: ignore[call-arg]
    layout = Layout(dp=2, tp=2, pp=2, vp=2, zero=3, order=(Axis.DP, Axis.TP, Axis.CP, Axis.PP))
    plan = layout.plan((5, 3), (Recompute.FULL, Recompute.NONE), ((2, 3), (2, 1)))
    assert plan == Plan(
        dp=2,
        tp=2,
        pp=2,
        vp=2,
        zero=3,
        order=(Axis.DP, Axis.TP, Axis.CP, Axis.PP),
        layers_per_stage=(5, 3),
        recompute=(Recompute.FULL, Recompute.NONE),
        layers_per_chunk=((2, 3), (2, 1)),
    )
    assert plan.layout == layout and type(plan.layout) is Layout and isinstance(plan, Layout)
    assert plan_key(layout, frozenset(per_stage)) == plan_key(plan, frozenset(per_stage))
    assert len(plan_key(plan, frozenset())) == len(plan_key(layout, frozenset())) + len(per_stage)


def test_the_solver_enumerates_layouts_not_placeholder_plans() -> None:
    inst = build_instance(load_scenario(LLAMA8B_8))
    space = families(inst.spec, inst.cluster, 4096, 64, PartialPlan(), Options())
    assert space and all(type(f) is Layout for f in space)


def test_one_plan_document_lists_plans_fields() -> None:
    """The scenario's plan, the result's plan and each alternative's plan are one document type
    whose keys are Plan's fields and the derived ones."""
    assert set(PlanDoc.model_fields) == set(PLAN_FIELDS) | DERIVED
    assert DERIVED == {"grad_accum", "num_devices", "recompute_per_stage"}
    r = paraplan.solve(LLAMA8B_8, time_limit_s=20, top=2)
    assert type(r.plan) is PlanDoc and type(r.alternatives[0].plan) is PlanDoc
    assert type(load_scenario({**LLAMA8B_8, "plan": {"tp": 2}}).plan) is PlanDoc
    assert all(v is not None for k, v in r.plan if k != "etp"), "a result fills every key"


def test_a_result_plan_object_is_a_scenario_plan() -> None:
    """Scenario(plan=result.plan), the result's object itself, re-scores to the same step time."""
    r = paraplan.solve(LLAMA8B_8, time_limit_s=20)
    sections = {k: v for k, v in r.scenario.items() if k != "plan"}
    again = paraplan.evaluate(Scenario(**sections, plan=r.plan))
    assert again.predicted.step_time_s == r.predicted.step_time_s
    assert again.plan == r.plan


def test_a_result_plans_empty_lists_mean_none() -> None:
    """fixed_knobs_of: a result's empty torus_shape (not a TPU slice), stage_pools (one node
    type), layers_per_chunk and recompute_layers read as unset, so solve takes the plan."""
    doc = PlanDoc.model_validate(
        {"torus_shape": [], "stage_pools": [], "layers_per_chunk": [], "recompute_layers": [], "tp": 2}
    )
    assert doc.torus_shape == []  # the document keeps what it was given
    inst = build_instance(load_scenario(LLAMA8B_8))
    knobs = fixed_knobs_of(doc, inst.spec, inst.cluster, inst.job)
    assert knobs == PartialPlan(tp=2)
    with pytest.raises(ValueError, match="torus_shape"):
        PlanDoc.model_validate({"torus_shape": [0, 4, 4, 4]})


def test_solve_and_evaluate_read_recompute_layers_alike() -> None:
    """One count N stands for every full-recompute stage in both: evaluate scores the plan with
    N on its full stages and 0 elsewhere, and solve with everything else fixed finds that plan."""
    plan = {
        "dp": 2,
        "tp": 2,
        "pp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": ["full", "none"],
        "recompute_layers": 3,
        "layers_per_stage": [16, 16],
        "order": ["tp", "cp", "dp", "pp"],
        "sequence_parallel": True,
        "vp": 1,
        "cp": 1,
        "cp_comm": "p2p",
    }
    inst = build_instance(load_scenario({**LLAMA8B_8, "plan": plan}))
    assert inst.fixed.recompute_layers == (3,)
    assert fixed_plan(inst).recompute_layers == (3, 0)
    scored = paraplan.evaluate({**LLAMA8B_8, "plan": plan})
    solved = paraplan.solve({**LLAMA8B_8, "plan": plan}, time_limit_s=20)
    assert solved.plan == scored.plan and scored.plan.recompute_layers == [3, 0]
    assert solved.predicted.step_time_s == scored.predicted.step_time_s
    with pytest.raises(ConfigError, match=r"plan\.recompute_per_stage=\['full', 'full'\] disagrees"):
        load_and_build({**LLAMA8B_8, "plan": {**plan, "recompute_per_stage": ["full", "full"]}})
    with pytest.raises(ConfigError, match=r"plan\.num_devices=4 but dp x tp x pp x cp = 8"):
        load_and_build({**LLAMA8B_8, "plan": {**plan, "num_devices": 4}})


def load_and_build(scenario: dict) -> object:
    return build_instance(load_scenario(scenario))


def test_fixed_knobs_carry_every_knob_of_a_full_plan() -> None:
    """The partial plan of a fully fixed scenario holds every field of the plan evaluate scores
    (fixed_knobs converts through fields(Plan), so a new knob cannot be left behind)."""
    plan = {
        "dp": 2,
        "tp": 2,
        "pp": 2,
        "vp": 2,
        "micro_batch": 1,
        "zero": 1,
        "recompute": ["full", "selective"],
        "layers_per_stage": [18, 14],
        "order": ["dp", "tp", "cp", "pp"],
        "cp_comm": "p2p",
        "sequence_parallel": True,
        "etp": 2,
    }
    inst = build_instance(load_scenario({**LLAMA8B_8, "plan": plan}))
    partial, full = fixed_knobs(inst), fixed_plan(inst)
    for name in PLAN_FIELDS:
        if name in plan:
            assert getattr(partial, name) == getattr(full, name), name


def test_the_api_refuses_fixed_knobs_by_the_cost_models_rules() -> None:
    moe = {**LLAMA8B_8, "model": {"preset": "qwen3-30b-a3b"}}
    with pytest.raises(
        ConfigError, match=r"plan\.ep=3 must divide the model's 128 experts; choose from 1, 2, 4"
    ):
        paraplan.solve({**moe, "plan": {"ep": 3}}, time_limit_s=5)
    with pytest.raises(ConfigError, match=r"plan\.ep=2: expert parallelism needs a mixture-of-experts model"):
        paraplan.solve({**LLAMA8B_8, "plan": {"ep": 2}}, time_limit_s=5)
    with pytest.raises(ConfigError, match=r"plan\.etp=1 needs a mixture-of-experts model"):
        paraplan.solve({**LLAMA8B_8, "plan": {"etp": 1, "tp": 2}}, time_limit_s=5)
    with pytest.raises(ConfigError, match=r"plan\.etp=2 must be 1 or tp=4"):
        paraplan.solve({**moe, "plan": {"etp": 2, "tp": 4}}, time_limit_s=5)
    with pytest.raises(ConfigError, match=r"plan\.order=\['tp', 'tp', 'dp', 'pp'\] must be a permutation"):
        paraplan.solve({**LLAMA8B_8, "plan": {"order": ["tp", "tp", "dp", "pp"]}}, time_limit_s=5)


def test_the_search_domains_are_check_plans_rules() -> None:
    """The tp the search tries are exactly those check_plan accepts (tp splits the heads), and
    an odd sequence length runs with cp = 1 (check_plan's cp rule; the search once refused every
    cp on it and found no plan)."""
    inst = build_instance(load_scenario({**LLAMA8B_8, "model": {"preset": "llama3-70b"}}))
    spec = inst.spec
    found = {f.tp for f in families(spec, inst.cluster, 4096, 64, PartialPlan(), Options())}
    assert found == {t for t in divisors(8) if spec.num_heads % t == 0 and spec.num_kv_heads % t == 0}
    odd = paraplan.solve({**LLAMA8B_8, "job": {"seq_len": 4095, "global_batch": 64}}, time_limit_s=20)
    assert odd.plan.cp == 1
    assert paraplan.evaluate(odd).predicted.step_time_s == odd.predicted.step_time_s


def test_a_result_file_lists_every_knob_and_older_ones_take_the_defaults() -> None:
    """A result's plan has every key: one read back without the keys added since the first
    version (e.g. the MoE software state) takes Plan's defaults; one without dp is no result."""
    from pydantic import ValidationError

    from paraplan.result import Result

    r = paraplan.solve(LLAMA8B_8, time_limit_s=20)
    data = r.model_dump(mode="json")
    older = {
        k: v for k, v in data["plan"].items() if k not in ("moe_dispatcher", "cuda_graphs", "torus_shape")
    }
    again = Result.model_validate({**data, "plan": older})
    assert again.plan == r.plan and again.plan.moe_dispatcher == "alltoall"
    with pytest.raises(ValidationError, match="missing dp"):
        Result.model_validate({**data, "plan": {k: v for k, v in data["plan"].items() if k != "dp"}})
