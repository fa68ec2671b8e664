"""Fuzz cases (issue 16, item 2): valid scenarios, malformed documents and odd API arguments.

One generator, two drivers: the hypothesis suite (``tests/property/``, shrinking, fixed seed in CI)
and the long-run driver (``benchmarks/fuzz.py``, worker processes) both draw through a ``Draw``
(pick one of, an integer in a range, a biased coin). Generators return a ``Case``: a scenario dict
or raw file text/bytes, the API arguments, the keys an error must name, and the Hugging Face
``config.json`` files to write beside it. The properties every answer must have are in
benchmarks/fuzz_checks.py.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from paraplan.graph import preset, preset_names
from paraplan.hardware import build_cluster, fabric_names, node_type_names
from paraplan.rules.frameworks import FRAMEWORKS

T = TypeVar("T")

__all__ = [
    "Draw",
    "RandomDraw",
    "Case",
    "valid_case",
    "evaluate_case",
    "malformed_case",
    "api_args",
    "serving_case",
    "choose_case",
    "sweep_case",
    "offload_case",
    "probs_case",
    "fusion_case",
    "divisors",
    "KNOWN_BAD_VARIANTS",
]

SMALL_PRESETS = (
    "gpt3-1.3b",
    "gpt3-2.7b",
    "llama3-8b",
    "mistral-7b",
    "qwen2.5-7b",
    "llama2-7b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
)
NODE_TYPES = tuple(node_type_names()) + tuple(fabric_names())
GPU_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
LARGE_GPU_COUNTS = (128, 256, 512, 96, 384, 1024, 2048)  # valid_case(large=True): the long run
SEQ_LENS = (128, 256, 512, 1000, 1024, 2048, 4096, 8192)
TARGETS = FRAMEWORKS


class Draw(Protocol):
    def choice(self, options: Sequence[T]) -> T: ...
    def integer(self, lo: int, hi: int) -> int: ...
    def chance(self, p: float) -> bool: ...


class RandomDraw:
    """``Draw`` over ``random.Random`` (the long-run driver)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


@dataclass
class Case:
    """A scenario (dict, or raw file text/bytes) with the API arguments to solve it with."""

    kind: str  # "valid" | "malformed" | "api-args"
    scenario: dict[str, Any] | str | bytes
    args: dict[str, Any]
    expect_keys: tuple[str, ...] = ()  # a ParaplanError must name one of these
    tag: str = ""
    files: dict[str, Any] | None = None  # hf config.json name -> JSON value (written next to it)
    api: str = "solve"  # "solve" | "evaluate"
    refuse: bool = False  # API arguments out of range: a ParaplanError is the only right answer
    strict_keys: bool = True  # any ParaplanError must name expect_keys (else only a ConfigError)


# ------------------------------------------------------------------------------- valid scenarios


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _explicit_model(d: Draw) -> dict[str, Any]:
    heads = d.choice((1, 2, 4, 8, 16))
    head_dim = d.choice((64, 32, 16, 128))
    hidden = max(64, min(1024, heads * head_dim))
    m: dict[str, Any] = {
        "layers": d.integer(2, 16),
        "hidden": hidden,
        "heads": heads,
        "vocab": d.choice((32000, 256, 1000, 50257)),
    }
    if d.chance(0.5):
        m["kv_heads"] = d.choice([k for k in (1, 2, 4, 8, 16) if heads % k == 0])
    if d.chance(0.3):
        m["activation"] = d.choice(("swiglu", "gelu", "relu", "relu2"))
    for key in ("tied_embeddings", "dropout"):
        if d.chance(0.2):
            m[key] = d.chance(0.5)
    if d.chance(0.15):
        m["norm"] = d.choice(("rmsnorm", "layernorm"))
    if d.chance(0.1):
        m["head_dim"] = head_dim
    if d.chance(0.2):  # mixture of experts
        m["experts"] = d.choice((2, 4, 8))
        m["top_k"] = d.integer(1, min(2, m["experts"]))
        m["moe_ffn_hidden"] = d.choice((hidden, hidden * 2, 128))
        if d.chance(0.3):
            m["shared_experts"] = 1
        if d.chance(0.3) and m["layers"] > 2:
            m["first_dense_layers"] = 1
            m["ffn_hidden"] = hidden * 4
        if d.chance(0.2):
            m["moe_layer_freq"] = 2
    else:
        m["ffn_hidden"] = hidden * d.choice((4, 1, 2, 3))
    if d.chance(0.05):  # latent attention (MLA)
        m.update(
            kv_lora_rank=64,
            q_lora_rank=d.choice((0, 96)),
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
        )
    return m


def _hf_config(d: Draw) -> dict[str, Any]:
    heads = d.choice((2, 4, 8, 16))
    hidden = heads * d.choice((64, 32))
    layers = d.integer(2, 12)
    vocab = d.choice((32000, 1000, 50257))
    style = d.choice(("llama", "gpt2", "neox", "mixtral", "qwen2_moe", "deepseek_v3"))
    if style == "gpt2":
        return {
            "model_type": "gpt2",
            "n_embd": hidden,
            "n_head": heads,
            "n_layer": layers,
            "vocab_size": vocab,
            "activation_function": "gelu_new",
        }
    cfg: dict[str, Any] = {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "intermediate_size": hidden * 4,
    }
    if style == "neox":
        cfg.update(model_type="gpt_neox", hidden_act="gelu")
        return cfg
    cfg.update(
        model_type=style,
        hidden_act="silu",
        num_key_value_heads=d.choice([k for k in (1, 2, 4) if heads % k == 0]),
    )
    if style == "mixtral":
        cfg.update(num_local_experts=d.choice((4, 8)), num_experts_per_tok=2)
    elif style == "qwen2_moe":
        cfg.update(
            num_experts=d.choice((4, 8)),
            num_experts_per_tok=2,
            moe_intermediate_size=hidden,
            decoder_sparse_step=d.choice((1, 2)),
        )
    elif style == "deepseek_v3":
        cfg.update(
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden // 2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            kv_lora_rank=64,
            q_lora_rank=0,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
        )
    return cfg


def _precisions(node_type: str) -> tuple[str, ...]:
    return ("bf16", "fp16") if node_type.startswith("dgx-a100") else ("bf16", "fp16", "fp8")


def _cluster(d: Draw, large: bool = False) -> tuple[dict[str, Any], int, tuple[str, ...]]:
    """(cluster section, device count, precisions every node type runs)."""
    if d.chance(0.15):  # mixed-GPU pools: 2-3 small pools (more is the known pool-subset blow-up)
        pools, total, precisions = [], 0, {"bf16", "fp16", "fp8"}
        for _ in range(d.integer(2, 3)):
            preset = d.choice(NODE_TYPES)
            gpus = d.choice((8, 4, 16, 2))
            pools.append({"preset": preset, "gpus": gpus})
            total += gpus
            precisions &= set(_precisions(preset))
        return {"pools": pools}, total, tuple(sorted(precisions))
    preset = d.choice(NODE_TYPES)
    per_node = build_cluster(preset, nodes=1).num_devices  # an NVL72 node is a 72-GPU rack
    if per_node == 8 and d.chance(0.3):
        nodes = d.integer(1, 8)
        return {"preset": preset, "nodes": nodes}, nodes * 8, _precisions(preset)
    if large:
        if per_node > 8:
            nodes = d.choice((2, 4, 8, 16, 32, 64))
            return {"preset": preset, "nodes": nodes}, nodes * per_node, _precisions(preset)
        gpus = d.choice(LARGE_GPU_COUNTS)
        return {"preset": preset, "gpus": gpus}, gpus, _precisions(preset)
    gpus = d.choice(GPU_COUNTS)
    return {"preset": preset, "gpus": gpus}, gpus, _precisions(preset)


def _composition(d: Draw, total: int, parts: int) -> list[int]:
    cuts = sorted(d.integer(1, total - 1) for _ in range(parts - 1)) if parts > 1 else []
    out = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return out if all(out) else [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _plan_knobs(
    d: Draw,
    devices: int,
    layers: int,
    batch: int,
    seq_len: int,
    is_moe: bool,
    experts: int,
    num_pools: int,
    consistent: bool = False,
) -> dict[str, Any]:
    """A subset of knobs, mostly consistent with the drawn sizes, sometimes not (``consistent``:
    tp and pp only from the divisors that fit)."""
    plan: dict[str, Any] = {}
    bad_tps = [] if consistent else [3, 5]  # 3, 5: often invalid
    tp = d.choice(divisors(devices) + bad_tps) if d.chance(0.3) else None
    if tp is not None:
        plan["tp"] = tp
    rest = max(1, devices // (tp or 1))
    if d.chance(0.2):
        plan["cp"] = d.choice((1, 2, 4))
    pp = None
    if d.chance(0.3) and not num_pools:
        pp = d.choice([p for p in divisors(rest) if p <= layers] + ([] if consistent else [layers + 1]))
        plan["pp"] = pp
    if d.chance(0.15):
        plan["dp"] = d.choice(divisors(rest))
    if d.chance(0.2):
        plan["micro_batch"] = d.choice(divisors(batch)[:6])
    if d.chance(0.2):
        plan["zero"] = d.integer(0, 3)
    if d.chance(0.15):
        plan["sequence_parallel"] = d.chance(0.5)
    if d.chance(0.15):
        plan["vp"] = d.integer(1, 3)
    if d.chance(0.25):
        if pp and d.chance(0.5):
            plan["recompute"] = [d.choice(("none", "selective", "full")) for _ in range(pp)]
        else:
            plan["recompute"] = d.choice(("none", "selective", "full"))
    if pp and d.chance(0.15) and layers >= pp:
        plan["layers_per_stage"] = _composition(d, layers, pp)
    if d.chance(0.1):
        order = ["tp", "cp", "dp", "pp"]
        plan["order"] = [order[i] for i in d.choice(list(itertools.permutations(range(4))))]
    if d.chance(0.1):
        plan["cp_comm"] = d.choice(("p2p", "all_gather"))
    if is_moe and d.chance(0.3):
        plan["ep"] = d.choice(divisors(experts))
    if is_moe and d.chance(0.15):
        plan["etp"] = d.choice((1, tp or 1))
    if d.chance(0.15):  # MoE software state (issue 22); any model takes it, dense ones ignore it
        plan["moe_dispatcher"] = d.choice(("alltoall", "allgather", "deepep", "hybridep"))
    if d.chance(0.1):
        plan["moe_overlap"] = d.chance(0.5)
    if d.chance(0.1):
        plan["cuda_graphs"] = d.choice(("none", "partial", "full"))
    return plan


def _solver_section(d: Draw) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if d.chance(0.2):
        s["allow_uneven_stages"] = d.chance(0.5)
    if d.chance(0.2):
        s["search_placement"] = d.chance(0.5)
    if d.chance(0.2):
        s["max_micro_batch"] = d.integer(1, 16)
    if d.chance(0.2):
        s["max_vp"] = d.integer(1, 6)
    if d.chance(0.15):
        s["uniform_recompute"] = d.chance(0.5)
    if d.chance(0.1):
        s["target"] = d.choice(TARGETS)
    if d.chance(0.15):  # issue 22: the MoE software state searched where the plan leaves it unset
        s["search_moe_state"] = d.chance(0.7)
    return s


def valid_case(d: Draw, *, time_limit_s: float = 5.0, large: bool = False, consistent: bool = False) -> Case:
    """A well-formed scenario of a small instance (it may still be infeasible or break a rule
    between fields: then a ParaplanError is the right answer). ``large``: presets on 96 to
    4,608 devices (the long run; the issue's wrong OPTIMALs were on such clusters).
    ``consistent``: no tp or pp the device or layer count rules out (``_plan_knobs``), for tests
    that need a scenario that plans; the default draws stay those of the fuzz record."""
    files: dict[str, Any] = {}
    source = "preset" if large else d.choice(("explicit", "preset", "hf"))
    if source == "preset":
        name = d.choice(SMALL_PRESETS) if d.chance(0.7) else d.choice(preset_names())
        model: dict[str, Any] = {"preset": name}
        spec = preset(name)
        layers, is_moe, experts = spec.num_layers, spec.is_moe, spec.num_experts
    elif source == "hf":
        cfg = _hf_config(d)
        files["config.json"] = cfg
        model = {"hf_config": "config.json"}
        layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
        experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
        is_moe = bool(experts)
    else:
        model = _explicit_model(d)
        layers, is_moe, experts = model["layers"], "experts" in model, model.get("experts", 0)
    cluster, devices, precisions = _cluster(d, large)
    seq_len = d.choice(SEQ_LENS)
    batch = d.choice((8, 16, 32, 64, 1, 2, 4, 12, 24, 48, 96, 128, 256, 7, 139))
    if large:
        batch = d.choice((128, 256, 512, 1024, 96, 139, 1118, 2048))
    job: dict[str, Any] = {"seq_len": seq_len, "global_batch": batch}
    if d.chance(0.6):
        job["precision"] = d.choice(precisions or ("bf16",))
    for key in ("flash_attention", "overlap_dp_comm", "fp32_grads"):
        if d.chance(0.05):
            job[key] = d.chance(0.5)
    if d.chance(0.05):
        job["expert_imbalance"] = d.choice((1.0, 1.5, 3.0))
    if d.chance(0.08):
        job["moe_routing"] = d.choice(("dropless", "force_balanced", {"capacity_factor": 1.25}))
    scenario: dict[str, Any] = {"model": model, "cluster": cluster, "job": job}
    if d.chance(0.6):
        num_pools = len(cluster.get("pools", ()))
        plan = _plan_knobs(d, devices, layers, batch, seq_len, is_moe, experts, num_pools, consistent)
        if plan:
            scenario["plan"] = plan
    if d.chance(0.4):
        solver = _solver_section(d)
        if solver:
            scenario["solver"] = solver
    args = {
        "time_limit_s": time_limit_s,
        "workers": d.choice((2, 1)),
        "top": d.choice((1, 3, 2)),
        "seed": d.choice((0, 1, 12345)),
    }
    # the memory knobs (issue 24), drawn last so that every earlier draw of a seed stays as it was
    if d.chance(0.1):
        job["allocator"] = d.choice(("default", "expandable_segments"))
        job["cross_entropy"] = d.choice(("fused", "upcast", "compiled"))
        job["optimizer_moments"] = d.choice(("fp32", "bf16"))
    if d.chance(0.1):
        scenario.setdefault("solver", {})["memory_headroom"] = d.choice((0.0, 0.05, 0.2))
    # folded expert parallelism (etp = 1 < tp: ep may exceed dp*cp), drawn after the memory knobs
    if is_moe and experts > 1 and d.chance(0.08):
        tps = [t for t in (2, 4, 8) if devices % t == 0] or [2]
        ep = d.choice([e for e in divisors(experts) if e > 1])
        scenario.setdefault("plan", {}).update(tp=d.choice(tps), etp=1, ep=ep)
    # the chunked loss (issue 24), drawn last for the same reason
    if d.chance(0.05):
        job["loss_chunks"] = d.choice((2, 8, 3, 4096))
        job["variable_seq_len"] = d.chance(0.5)
    return Case("valid", scenario, args, tag=f"valid:{'large' if large else source}", files=files or None)


def evaluate_case(d: Draw) -> Case:
    """A valid scenario whose ``plan:`` fixes every knob ``evaluate`` needs, drawn from the
    device count's divisors (so often consistent, sometimes not)."""
    case = valid_case(d)
    sc = case.scenario
    assert isinstance(sc, dict)
    cluster = sc["cluster"]
    devices = (
        sum(_pool_devices(p) for p in cluster["pools"]) if "pools" in cluster else _pool_devices(cluster)
    )
    plan = dict(sc.get("plan", {}))
    tp = plan.get("tp") or d.choice(divisors(devices))
    pp = plan.get("pp") or d.choice(divisors(devices // tp if devices % tp == 0 else devices))
    rest = devices // (tp * pp) if devices % (tp * pp) == 0 else 1
    plan.update(
        tp=tp,
        pp=pp,
        dp=plan.get("dp") or max(1, rest // plan.get("cp", 1)),
        micro_batch=plan.get("micro_batch") or 1,
        zero=plan.get("zero", d.integer(0, 3)),
        recompute=plan.get("recompute") or d.choice(("none", "selective", "full")),
    )
    if isinstance(plan["recompute"], list) and len(plan["recompute"]) != pp:
        plan["recompute"] = plan["recompute"][0]
    if "layers_per_stage" in plan and len(plan["layers_per_stage"]) != pp:
        del plan["layers_per_stage"]
    sc["plan"] = plan
    return replace(case, api="evaluate", tag=case.tag.replace("valid", "evaluate"))


def _pool_devices(section: dict[str, Any]) -> int:
    if "gpus" in section:
        return section["gpus"]
    return section["nodes"] * build_cluster(section["preset"], nodes=1).num_devices


# ------------------------------------------------------------------------------ malformed input

_SECTION_KEYS = {
    "model": (
        "preset",
        "layers",
        "hidden",
        "heads",
        "vocab",
        "ffn_hidden",
        "kv_heads",
        "activation",
        "experts",
        "top_k",
        "hf_config",
        "tied_embeddings",
    ),
    "cluster": ("preset", "nodes", "gpus", "pools"),
    "job": ("seq_len", "global_batch", "precision", "flash_attention", "expert_imbalance", "moe_routing"),
    "plan": (
        "dp",
        "tp",
        "pp",
        "cp",
        "vp",
        "micro_batch",
        "zero",
        "sequence_parallel",
        "recompute",
        "layers_per_stage",
        "order",
        "cp_comm",
        "ep",
        "etp",
        "stage_pools",
        "moe_dispatcher",
        "moe_overlap",
        "cuda_graphs",
    ),
    "solver": (
        "allow_uneven_stages",
        "search_placement",
        "max_micro_batch",
        "max_vp",
        "uniform_recompute",
        "target",
        "search_moe_state",
    ),
}
_BAD_VALUES: tuple[Any, ...] = (
    "abc",
    [1, 2],
    {"a": 1},
    -5,
    0,
    1.5,
    True,
    None,
    "nan",
    "",
    [],
    {},
    3,
    "1e3",
    float("inf"),
)


def _base(d: Draw) -> dict[str, Any]:
    heads = d.choice((4, 8))
    return {
        "model": {
            "layers": d.integer(2, 8),
            "hidden": heads * 64,
            "ffn_hidden": heads * 256,
            "heads": heads,
            "vocab": 1000,
        },
        "cluster": {"preset": d.choice(("dgx-h100", "dgx-a100-80gb")), "gpus": d.choice((4, 8))},
        "job": {"seq_len": 1024, "global_batch": 16},
    }


def _nested(depth: int, kind: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


KNOWN_BAD_VARIANTS = frozenset(
    {  # issue 16 reports these crashes; CI leaves them to xfail tests
        "text:utf16",
        "text:bad-utf8",
        "text:binary",
        "hf:list",
        "hf:string",
        "hf:number",
        "hf:null",
        "hf:act-list",
        "hf:size-dict",
        "hf:size-list",
        "hf:moe-no-topk",
        "hf:mla-missing",
        "hf:directory",
        "text:deep-list",
        "text:deep-map",
        "text:huge-int",
        "hf:size-str",
        "hf:size-neg",
    }
)  # found by this suite: the message names no scenario field


def malformed_case(
    d: Draw, *, extreme: bool = False, known_bad: bool = True, time_limit_s: float = 3.0
) -> Case:
    """A broken document: an unknown key, a wrong-typed value, a missing section, broken text,
    a broken Hugging Face config; given to ``solve`` or (one in four) ``evaluate``. ``extreme``:
    also huge, deep and alias-bomb documents (the long-run driver, under a memory cap);
    ``known_bad=False`` leaves out KNOWN_BAD_VARIANTS."""
    case = _malformed(d, extreme, known_bad, time_limit_s)
    if d.chance(0.25):  # evaluate may also (rightly) name the knobs the plan lacks
        case = replace(
            case, api="evaluate", expect_keys=case.expect_keys + ("plan.",) if case.expect_keys else ()
        )
    return case


def _malformed(d: Draw, extreme: bool, known_bad: bool, time_limit_s: float) -> Case:
    args = {"time_limit_s": time_limit_s, "workers": 1, "top": 1, "seed": 0}
    kinds = ["unknown-key", "bad-value", "missing", "text", "hf"]
    kind = d.choice(kinds)
    sc = _base(d)
    if kind == "unknown-key":
        section = d.choice(("", "model", "cluster", "job", "plan", "solver"))
        key = d.choice(("bogus_key", "tensor_parallel", "Tp", "layers2", "seq-len"))
        target = sc if not section else sc.setdefault(section, {})
        target[key] = d.choice((1, "x", True))
        return Case("malformed", sc, args, (key,), tag=f"unknown-key:{section or 'top'}")
    if kind == "bad-value":
        section = d.choice(tuple(_SECTION_KEYS))
        key = d.choice(_SECTION_KEYS[section])
        value, huge = d.choice(_BAD_VALUES), False
        if extreme and d.chance(0.3):
            value, huge = d.choice((10**30, 10**18, -(10**30), "9" * 200)), True
        sc.setdefault(section, {})
        if section == "model" and key not in ("preset", "hf_config"):
            sc["model"][key] = value
        elif section == "model":
            sc["model"] = {key: value}
        elif section == "cluster" and key == "pools":
            sc["cluster"] = {"pools": value}
        else:
            sc[section][key] = value
        # a value may happen to be valid (zero: 0, flags: True, ...): then a Result is fine; a
        # huge size may also be refused as infeasible (only a ConfigError must name the key)
        return Case(
            "malformed",
            sc,
            args,
            (key, section),
            tag=f"bad-value:{section}.{key}" + (":huge" if huge else ""),
            strict_keys=not huge,
        )
    if kind == "missing":
        path = d.choice(
            (
                ("model",),
                ("cluster",),
                ("job",),
                ("job", "seq_len"),
                ("job", "global_batch"),
                ("model", "heads"),
                ("model", "vocab"),
                ("cluster", "gpus"),
            )
        )
        target = sc
        for p in path[:-1]:
            target = target[p]
        del target[path[-1]]
        return Case("malformed", sc, args, (path[-1],), tag=f"missing:{'.'.join(path)}")
    if kind == "hf":
        return _malformed_hf(d, sc, args, known_bad)
    return _malformed_text(d, sc, args, extreme, known_bad)


def _variant(d: Draw, family: str, variants: Sequence[str], known_bad: bool) -> str:
    if not known_bad:
        variants = [v for v in variants if f"{family}:{v}" not in KNOWN_BAD_VARIANTS]
    return d.choice(variants)


def _malformed_hf(d: Draw, sc: dict[str, Any], args: dict[str, Any], known_bad: bool) -> Case:
    good = {
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 1000,
        "intermediate_size": 1024,
        "hidden_act": "silu",
    }
    variant = _variant(
        d,
        "hf",
        (
            "missing",
            "list",
            "string",
            "number",
            "act-list",
            "size-dict",
            "size-list",
            "size-str",
            "moe-no-topk",
            "mla-missing",
            "not-json",
            "no-file",
            "directory",
            "null",
            "size-neg",
            "size-float",
        ),
        known_bad,
    )
    cfg: Any = dict(good)
    if variant == "list":
        cfg = [good]
    elif variant == "string":
        cfg = "config"
    elif variant == "number":
        cfg = 42
    elif variant == "null":
        cfg = None
    elif variant == "missing":
        del cfg[d.choice(("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"))]
    elif variant == "act-list":
        cfg["hidden_act"] = ["silu"]
    elif variant.startswith("size-"):
        key = d.choice(
            (
                "hidden_size",
                "num_attention_heads",
                "num_hidden_layers",
                "vocab_size",
                "intermediate_size",
                "num_key_value_heads",
            )
        )
        cfg[key] = {
            "size-dict": {"a": 1},
            "size-list": [4],
            "size-str": "four",
            "size-neg": -4,
            "size-float": 4.5,
        }[variant]
    elif variant == "moe-no-topk":
        cfg["num_local_experts"] = 8
    elif variant == "mla-missing":
        cfg["kv_lora_rank"] = 64
    sc["model"] = {"hf_config": "config.json"}
    files: dict[str, Any] = {"config.json": cfg}
    if variant == "not-json":
        files = {"config.json": b"{not json"}
    elif variant == "no-file":
        files = {}
    elif variant == "directory":
        files = {"config.json": "<dir>"}
    return Case("malformed", sc, args, ("hf_config",), tag=f"hf:{variant}", files=files)


def _malformed_text(
    d: Draw, sc: dict[str, Any], args: dict[str, Any], extreme: bool, known_bad: bool
) -> Case:
    import yaml

    text = yaml.safe_dump(sc)
    variants = [
        "bad-yaml",
        "not-mapping",
        "utf16",
        "bad-utf8",
        "binary",
        "empty",
        "tabs",
        "json-broken",
        "bom",
        "dup-key",
        "deep-list-50",
        "long-string",
        "nul",
    ]
    if extreme:
        variants += ["deep-list", "deep-map", "huge-int", "alias-bomb", "huge-doc"]
    v = _variant(d, "text", variants, known_bad)
    out: str | bytes
    if v == "bad-yaml":
        out = text + "\n: - [unclosed\n"
    elif v == "not-mapping":
        out = d.choice(("- 1\n- 2\n", "just a string\n", "42\n", "null\n", "[]\n"))
    elif v == "utf16":
        out = text.encode("utf-16")
    elif v == "bad-utf8":
        out = text.encode() + b"\n# \xff\xfe\xc3\x28\n"
    elif v == "binary":
        out = bytes(range(256)) * 4
    elif v == "empty":
        out = ""
    elif v == "tabs":
        out = text.replace("  ", "\t")
    elif v == "json-broken":
        out = json.dumps(sc)[:-3]
    elif v == "bom":
        out = b"\xef\xbb\xbf" + text.encode()
    elif v == "dup-key":
        out = text + "job: {seq_len: 1, global_batch: 1}\n"
    elif v == "nul":
        out = text.encode() + b"\x00\x00"
    elif v == "deep-list-50":
        sc["plan"] = {"tp": _nested(50, "list")}
        out = json.dumps(sc)
    elif v == "long-string":
        sc["model"] = {"preset": "x" * 100_000}
        out = json.dumps(sc)
    elif v in ("deep-list", "deep-map"):
        depth = d.choice((1000, 5000, 20000))
        out = (
            "plan: "
            + ("[" * depth + "]" * depth if v == "deep-list" else "{a: " * depth + "1" + "}" * depth)
            + "\n"
        )
    elif v == "huge-int":
        sc["job"]["global_batch"] = 10**4999  # 5000 digits: past int-string limits
        out = text.replace("global_batch: 16", "global_batch: " + "9" * 5000)
    elif v == "alias-bomb":  # billion laughs: 9 levels of 9 aliases
        lines = ['a0: &a0 ["lol"]']
        for i in range(1, 9):
            lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
        out = "\n".join(lines) + f"\nmodel: {{preset: *a8}}\n{text}"
    else:  # huge-doc: 20 MB of keys
        out = text + "".join(f"k{i}: {i}\n" for i in range(1_000_000))
    return Case("malformed", out, args, (), tag=f"text:{v}")


# --------------------------------------------------------------------------------- API arguments

_TIME_LIMITS = (2.0, float("nan"), float("inf"), -1.0, 0.0, 1e-9, 0.001, -math.inf, 1e300, 0.5)
_WORKERS = (1, 2, 0, -1, 3)
_TOPS = (1, 0, -1, 3, 50)
_SEEDS = (0, -1, 2**31 - 1, 2**31, 2**40, 2**63, -(2**63), 2**70)


def api_args(d: Draw, *, known_bad: bool = True) -> Case:
    """A valid small scenario with odd API arguments. ``known_bad=False`` leaves out the values
    issue 16 already reports (NaN time limit, seeds past int32; infinite time limits print
    ``Infinity``, found by this suite) for a green CI until fixed."""
    sc = _base(d)
    limits = _TIME_LIMITS if known_bad else tuple(t for t in _TIME_LIMITS if math.isfinite(t))
    seeds = _SEEDS if known_bad else tuple(s for s in _SEEDS if -(2**31) <= s < 2**31)
    args = {
        "time_limit_s": d.choice(limits),
        "workers": d.choice(_WORKERS),
        "top": d.choice(_TOPS),
        "seed": d.choice(seeds),
    }
    t = args["time_limit_s"]
    must = [
        k
        for k, ok in (
            ("time_limit_s", t > 0),  # NaN too
            ("workers", args["workers"] >= 1),
            ("top", args["top"] >= 1),
            ("seed", -(2**31) <= args["seed"] < 2**31),
        )
        if not ok
    ]
    # may be refused (a documented upper limit) or accepted: then the result must be strict JSON
    may = [
        k
        for k, odd in (
            ("time_limit_s", t > 3600),
            ("seed", args["seed"] < 0),
            ("top", args["top"] > 10),
            ("workers", args["workers"] > 2),
        )
        if odd
    ]
    return Case(
        "api-args",
        sc,
        args,
        tuple(dict.fromkeys(must + may)),
        tag="api:" + ",".join(must or ["ok"]),
        refuse=bool(must),
    )


# ------------------------------------------------------------------------- serving (issue 23)

SERVING_PRESETS = ("llama3.1-8b", "qwen3-30b-a3b", "mistral-7b", "gpt-oss-120b", "qwen2.5-7b", "deepseek-v3")
SERVING_NODES = ("dgx-h100", "dgx-h200", "dgx-b200", "dgx-a100-80gb", "gb200-nvl72", "mi300x")
_BAD_SERVING = (
    ("workload", "isl", -5),
    ("workload", "osl", "long"),
    ("workload", "concurrency", 0),
    ("workload", "request_rate", float("inf")),
    ("workload", "weights_precision", "fp2"),
    ("workload", "slo", {"percentile": 99}),
    ("workload", "slo", {"ttft_ms": -1}),
    ("workload", "isl", {"mean": 100, "p90": 50}),
    ("workload", "burst", 3),
    ("engine", "name", "tgi"),
    ("plan", "tp", 0),
    ("plan", "mode", "split"),
    ("plan", "prefill", {"workers": True}),
    ("plan", "replicas", 10**9),
)


def serving_case(d: Draw, *, time_limit_s: float = 5.0) -> Case:
    """A serving scenario (``workload:``): usually well formed (a result or a ParaplanError is
    right: the plan may not fit, the SLO may be unmeetable, a fixed knob may break a rule),
    sometimes with one malformed key (a ConfigError naming it is the only right answer)."""
    node = d.choice(SERVING_NODES)
    gpus = d.choice((1, 2, 4, 8)) if node != "gb200-nvl72" else d.choice((4, 8, 72))
    workload: dict[str, Any] = {
        "isl": d.choice((128, 1000, 4096, {"mean": 2048, "p90": 6000})),
        "osl": d.choice((16, 256, 1024, {"mean": 500})),
    }
    if d.chance(0.5):
        workload["concurrency"] = d.choice((1, 8, 64, 512, 5000))
    else:
        workload["request_rate"] = d.choice((0.1, 2.0, 20.0, 400.0))
    slo = {
        k: v for k, v in (("ttft_ms", d.choice((None, 100, 2000))), ("tpot_ms", d.choice((None, 5, 50)))) if v
    }
    if d.chance(0.3):
        slo["percentile"] = d.choice((50, 90))
    if slo:
        workload["slo"] = slo
    if d.chance(0.5):
        workload["weights_precision"] = d.choice(("bf16", "fp8", "nvfp4", "int4"))
    if d.chance(0.3):
        workload["kv_precision"] = d.choice(("bf16", "fp8"))
    scenario: dict[str, Any] = {
        "model": {"preset": d.choice(SERVING_PRESETS)},
        "cluster": {"preset": node, "gpus": gpus},
        "workload": workload,
    }
    if d.chance(0.5):
        scenario["engine"] = {"name": d.choice(("vllm", "sglang", "trtllm"))}
    objectives = ["goodput_per_gpu", "min_ttft"] + (["min_gpus"] if "request_rate" in workload else [])
    if d.chance(0.4):
        scenario["objective"] = d.choice(objectives)
    api = "solve"
    plan: dict[str, Any] = {}
    if d.chance(0.5):
        plan["mode"] = d.choice(("aggregated", "disaggregated"))
    if d.chance(0.2):
        plan["max_batch"] = d.choice((1, 16, 256))
    if d.chance(0.25):  # a fully fixed plan: evaluate it
        api = "evaluate"
        if plan.get("mode") == "disaggregated":
            plan["prefill"] = {"tp": d.choice((1, 2)), "workers": d.choice((1, 2))}
            plan["decode"] = {"tp": d.choice((1, 2, 4)), "workers": 1, "dp_attention": d.chance(0.3)}
        else:
            plan.update(mode="aggregated", tp=d.choice((1, 2, 4, 8)), replicas=d.choice((1, 2)))
            if d.chance(0.3):
                plan["ep"] = d.choice((1, 2, 8))
    if plan:
        scenario["plan"] = plan
    expect: tuple[str, ...] = ()
    strict = False
    if d.chance(0.25):
        section, key, value = d.choice(_BAD_SERVING)
        scenario.setdefault(section, {})[key] = value
        expect, strict = (f"{section}.{key}", section, key), True
    args = {"time_limit_s": time_limit_s, "workers": d.choice((1, 2)), "top": d.choice((1, 2)), "seed": 0}
    if d.chance(0.25) and not strict:  # pipeline stages (the engine's host time under pp), drawn last
        pp = d.choice((1, 2, 4))
        pool = d.choice(("prefill", "decode"))
        if plan.get("mode") == "disaggregated":
            plan.setdefault(pool, {})["pp"] = pp
        else:
            plan["pp"] = pp
            if api == "evaluate":  # the fixed plan's GPUs (replicas x tp x pp) mostly the cluster's
                plan["replicas"] = max(1, gpus // (plan["tp"] * pp))
        scenario["plan"] = plan
    return Case(
        "serving",
        scenario,
        args,
        expect_keys=expect,
        tag="serving",
        api=api,
        strict_keys=strict,
        refuse=strict,
    )


# ------------------------------------------------------------------- capacity planning (issue 25)


def choose_case(d: Draw, *, time_limit_s: float = 10.0) -> Case:
    """A ``cluster.choose`` scenario, valid or with one broken field (benchmarks/fuzz_capacity.py)."""
    from benchmarks.fuzz_capacity import draw_choose_case

    return draw_choose_case(d, time_limit_s=time_limit_s)


def sweep_case(d: Draw, *, time_limit_s: float = 5.0) -> Case:
    """A sweep GRID document, valid or with one broken part (benchmarks/fuzz_capacity.py)."""
    from benchmarks.fuzz_capacity import draw_sweep_case

    return draw_sweep_case(d, time_limit_s=time_limit_s)


# ------------------------------------------------------------- activation offloading (issue 22)

OFFLOAD_CHOICES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
"""job.offload_modules' values (cost/offload.py); offload_case also draws Megatron's unpriced
fused_group_mlp and a made-up name."""


def offload_case(d: Draw, *, solve: bool = False, time_limit_s: float = 5.0) -> Case:
    """A valid (``solve``) or fully fixed (``evaluate_case``) scenario with ``job.offload_modules``
    drawn after it: a generator of its own, so the fuzz record's pinned seeds draw what they drew.
    A module list that breaks a rule (an unknown name, attn_proj without core_attn, expert_fc1 or
    moe_act beside recompute module moe) must be a ConfigError naming job.offload_modules."""
    base = valid_case(d, time_limit_s=time_limit_s, consistent=True) if solve else evaluate_case(d)
    sc = base.scenario
    assert isinstance(sc, dict)
    modules = sorted({d.choice(OFFLOAD_CHOICES) for _ in range(d.integer(1, 4))})
    broken = False
    if d.chance(0.1):
        modules.append(d.choice(("fused_group_mlp", "fc2")))
        broken = True
    job = sc["job"]
    job["offload_modules"] = modules
    if d.chance(0.15):
        job["recompute_modules"] = ["moe"]
        broken = broken or bool({"expert_fc1", "moe_act"} & set(modules))
    broken = broken or ("attn_proj" in modules and "core_attn" not in modules)
    keys = ("job.offload_modules",) if broken else base.expect_keys
    return replace(base, expect_keys=keys, refuse=broken, tag=f"{base.tag}:offload")


# ------------------------------------------------------ where the router's probabilities apply (issue 22)

PROBS_CHOICES = ("auto", "activation", "combine")
"""job.moe_probs_applied's values (rules/moe_probs.py); probs_case also draws a made-up one."""


def probs_case(d: Draw, *, solve: bool = False, time_limit_s: float = 5.0) -> Case:
    """A valid (``solve``) or fully fixed (``evaluate_case``) scenario with ``job.moe_probs_applied``
    drawn after it: a generator of its own, so the fuzz record's pinned seeds draw what they drew.
    A value outside the three must be a ConfigError naming job.moe_probs_applied; a framework that
    applies the probabilities elsewhere refuses the others by name (a ParaplanError the checks
    accept)."""
    base = valid_case(d, time_limit_s=time_limit_s, consistent=True) if solve else evaluate_case(d)
    sc = base.scenario
    assert isinstance(sc, dict)
    broken = d.chance(0.1)
    sc["job"]["moe_probs_applied"] = d.choice(("router", "expert")) if broken else d.choice(PROBS_CHOICES)
    keys = ("job.moe_probs_applied",) if broken else base.expect_keys
    return replace(base, expect_keys=keys, refuse=broken, tag=f"{base.tag}:probs")


# ------------------------------------------------------------- router and permute fusion (issue 22)

FUSION_FIELDS = ("moe_router_fusion", "moe_permute_fusion")
"""job.moe_router_fusion / job.moe_permute_fusion (cost/host.py, rules/moe_fusion.py)."""


def fusion_case(d: Draw, *, solve: bool = False, time_limit_s: float = 5.0) -> Case:
    """A valid (``solve``) or fully fixed (``evaluate_case``) scenario with the router and permute
    fusion drawn after it: a generator of its own, so the fuzz record's pinned seeds draw what
    they drew. A value that is no boolean must be a ConfigError naming the field; a framework
    without the fused kernels refuses true by name (a ParaplanError the checks accept)."""
    base = valid_case(d, time_limit_s=time_limit_s, consistent=True) if solve else evaluate_case(d)
    sc = base.scenario
    assert isinstance(sc, dict)
    for name in FUSION_FIELDS:
        sc["job"][name] = d.chance(0.5)
    broken = d.chance(0.1)
    if broken:
        sc["job"][d.choice(FUSION_FIELDS)] = d.choice(("sometimes", "fused"))
    keys = ("job.moe_",) if broken else base.expect_keys
    return replace(base, expect_keys=keys, refuse=broken, tag=f"{base.tag}:fusion")
