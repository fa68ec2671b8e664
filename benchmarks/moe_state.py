"""The MoE software state of a published run, read from its row (``notes``, ``source_key``).

Rows 2000 and up (docs/published_runs.md Sec. 5) state the dispatcher, EP overlap, CUDA graphs
and routing in ``notes``; the rules below read them. Where a row states nothing, the default is
listed in the case's defaults:

- dispatcher: "HybridEP" -> hybridep, "DeepEP" -> deepep (the last one a note names wins for a
  ladder row: "Enable DeepEP" rows name DeepEP), "alltoall" / "A2A" -> alltoall; else alltoall
  (Megatron-Bridge's performance recipes: ``moe_token_dispatcher_type: alltoall``;
  moe_physics.md Sec. 2: the Qwen3-235B 256 x H100 recipe is "standard alltoall plus overlap");
- EP overlap: "A2A_OVERLAP=1", "EP overlap ON", "+1f1b overlap" -> on; "overlap off",
  "A2A_OVERLAP=0", "no EP A2A overlap" -> off; else off, except Megatron-Bridge's Qwen3-235B
  on 256 H100 (on, the recipe note above);
- CUDA graphs: "CUDA graphs disabled" -> none; TE scopes named (attn, moe_router,
  moe_preprocess) or a DeepSeek-V3 ladder step at or after "CUDA Graphs" -> partial; else partial
  on Blackwell for Megatron-Bridge's performance rows (their recipes capture the TE scopes on
  GB200/GB300/B200, as rows 2057-2060 of the same team state) and none elsewhere;
- expert TP: "ETP=1" -> etp 1; the Megatron-MoE-ModelZoo's Qwen3 rows that do not say it take
  etp 1 too (its Qwen3 best-practice scripts run --expert-tensor-parallel-size 1 with EP folded
  over TP, "intra-node EP strategy");
- Megatron-Bridge performance rows of the 26.06 and later containers that state none of the three
  above take what Megatron-Bridge 0.6.2's performance recipe of the same model, GPU and layout
  sets (``perf_recipes/``, read in the 0.6.2 wheel; ``_BRIDGE_RECIPES`` below): the rows of
  26.06-26.08 run those recipes' layouts (tp, pp, vp, ep, micro-batch, global batch; DeepSeek-V3
  on B300, row 125, pp 8 mb 2 against the recipe's pp 8 vp 2 mb 1, does not, and keeps the
  defaults), and the recipes name the kernels those rows ran (the gpt-oss MXFP8 recipe's TE
  op-fuser grouped MLP is the cuDNN ``grouped_gemm_dglu`` kernel whose regression the 26.06.01
  page footnotes), while the
  containers before 26.06 reproduce at the defaults (the Qwen3-235B GB300 rows 184 / 230 of
  26.04 within 3%, one layout 1.27x slower than 26.06's). That 0.6.2 is the release of the
  26.06-26.08 containers is inferred from this, not read in a release note (Bridge 0.6.0's README
  reads that Bridge is "the packaging layer for the NeMo 26.06 training stack");
- the Megatron-Bridge release of each NeMo container (``_BRIDGE_RELEASES``) is assumed from the
  PyPI wheels' dates; no wheel before 0.6.0 holds the performance configs, so the rows of
  26.02-26.04.01 (Bridge 0.3.0-0.4.1) take only what the release's base recipe and every
  non-full-iteration 0.6.0 performance recipe of the row's model and GPU agree on: no CUDA graphs
  for gpt-oss-120b on GB200 / B200 and Qwen3-235B-A22B on B300 (``_NO_GRAPHS``);
- routing: "forced load balancing", "force-balanced", "fake balanced gate" -> force_balanced;
  "dropless, natural routing" -> dropless; the ladder rows' reproduce guide forces balance;
  "(tokendrop)" models -> capacity factor 1.0 (the token-drop recipes' factor); the Megatron-Bridge
  skill page's NCCL runs that do not state it -> force_balanced (its other runs of the same
  recipe force balance); the Megatron-MoE-ModelZoo's 4K Qwen3 rows on H100 (2043-2048), which do
  not state it -> force_balanced too: every other Qwen3 table of that repository states forced
  balance (its long-context table prints the forced figure first, "295 (forced balance) / 237
  (dropless)"; its GB200 / GB300 rows 2057-2060 "forced load balancing"), as do the DeepSeek-V3
  GB200 guide's reproduce scripts and the Megatron-Bridge performance pages; else dropless;
- router and permute fusion (``job.moe_router_fusion``, ``job.moe_permute_fusion``; cost/host.py
  ``fusion_launch_s``): a DeepSeek-V3 GB200 ladder row runs the permute fused from step 2 ("Fuse
  torch.zeros ... & Permute kernel Optimization", read as turning on ``--moe-permute-fusion``: an
  assumption, the guide's table names no flag) and the router fused from step 3 ("Router fusion",
  ``--moe-router-fusion``); "moe_permute_fusion=false" -> permute unfused, "permute fusion" ->
  fused; any other run of a Megatron framework -> both fused: Megatron-Bridge 0.6.2's performance
  recipes set ``moe_router_fusion = True`` (perf_recipes/deepseek/common.py, qwen/{h100,b200,
  gb200}/qwen3_moe.py) and its model bridges ``moe_permute_fusion = True`` (deepseek_v3_bridge.py,
  qwen3_moe_bridge.py), and the ModelZoo's runs are the same team's after the ladder's fusion
  steps; a run of another framework keeps the defaults (false: its own PyTorch router);
- probabilities (``job.moe_probs_applied``, rules/moe_probs.py): a run whose ``framework`` names
  Megatron (Megatron-LM, Megatron-Core, Megatron-Bridge / NeMo) -> activation; any other (NeMo
  AutoModel's own MoE layers, not read) -> auto, which with no framework named is combine.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["bridge_release", "bridge_recipe", "moe_state", "probs_applied", "release_graphs"]

_BLACKWELL = ("B200", "B300", "GB200", "GB300")

# Sources whose rows that do not state the routing take forced balance: each source's other runs
# of the same recipes state it (module docstring).
_FORCED_UNLESS_STATED = {
    "mbridge_skill_qwen3_30b_h100": "as the page's other runs",
    "mcore_modelzoo_qwen3": "as the ModelZoo's other Qwen3 tables",
}


# Megatron-Bridge 0.6.2 perf_recipes/ by (model, GPU, tp, pp, vp, ep, micro-batch, global batch):
# (dispatcher, EP overlap, CUDA graphs, the recipe). HybridEP is ``moe_token_dispatcher_type: flex``
# with ``moe_flex_dispatcher_backend: hybridep``; "full" is ``cuda_graph_impl: full_iteration``;
# EP overlap is ``overlap_moe_expert_parallel_comm``. The Qwen3 recipe sets them in
# qwen/common.py ``_enable_hybridep_full_iteration_mxfp8``, the gpt-oss ones in gpt_oss/common.py
# ``_apply_gpt_oss_120b_full_iter_fp8mx_configs`` ("legacy ... full-iteration CUDA graph
# settings"); Kimi K2's keeps its base recipe's ``cuda_graph_impl: none`` and no EP overlap.
_BRIDGE_RECIPES: dict[tuple[str, str, int, int, int, int, int, int], tuple[str, bool, str, str]] = {
    ("Qwen3-235B-A22B", "GB300", 1, 4, 12, 32, 2, 8192): (
        "hybridep",
        True,
        "full",
        "qwen/gb300 qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config",
    ),
    ("gpt-oss-120b", "GB200", 1, 1, 1, 64, 4, 1280): (
        "hybridep",
        True,
        "full",
        "gpt_oss/gb200 gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config",
    ),
    ("gpt-oss-120b", "GB300", 1, 1, 1, 16, 4, 1280): (
        "hybridep",
        True,
        "full",
        "gpt_oss/gb300 gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config",
    ),
    ("Kimi K2", "GB300", 1, 4, 4, 64, 2, 4096): (
        "hybridep",
        False,
        "none",
        "kimi/gb300 kimi_k2_pretrain_256gpu_gb300_fp8mx_config",
    ),
}
_RECIPE_CONTAINER = (26, 6)  # the first NeMo container whose Bridge perf rows take _BRIDGE_RECIPES

# NeMo container (year, month, patch) -> the Megatron-Bridge release it shipped. Assumed, not read
# in a release note: each is the release whose PyPI wheel (file dates inside the wheel) came out
# with or just before the container; 25.11's 0.2.0 is not on the index (0.2.0rc6, 2025-10-06, has
# no gpt-oss) and is cited from memory. The 26.06 stack is read: Bridge 0.6.0's README, "[06/16/2026]
# ... Megatron Bridge serves as the packaging layer for the NeMo 26.06 training stack".
_BRIDGE_RELEASES: dict[tuple[int, int, int], str] = {
    (25, 9, 0): "0.1.0",  # 0.1.0rc4
    (25, 11, 0): "0.2.0",  # not on the index; from memory
    (26, 2, 0): "0.3.0",  # wheel 2026-02-26
    (26, 2, 1): "0.3.1",  # 2026-03-20
    (26, 4, 0): "0.4.0",  # 2026-04-16 (0.4.2's README: "[04/16/2026] Megatron Bridge 0.4.0 released")
    (26, 4, 1): "0.4.1",  # 2026-05-06
    (26, 6, 0): "0.5.0",  # 2026-06-22
    (26, 6, 1): "0.5.1",  # 2026-07-21
    (26, 8, 0): "0.6.0",  # 2026-08-20
}
# Releases of the containers before the 26.06 stack (26.02-26.04.01; 26.06+ is the rule above) whose
# wheel holds the base recipes read for _NO_GRAPHS (megatron/bridge/recipes/): no wheel before 0.6.0
# holds the performance configs (scripts/performance/, outside the package; the 0.3.1 sdist has
# none either).
_BASE_RECIPE_READ = ("0.3.0", "0.3.1", "0.4.0", "0.4.1")
# (model, GPU) whose performance runs of those releases ran without CUDA graphs: the release's base
# recipe sets none (0.3.1-0.4.1 ``cuda_graph_impl = "none"``; 0.3.0 leaves megatron-core's default,
# none), and so does every performance recipe of the model and GPU in 0.6.0's ``perf_recipes/``
# (the flat port of the earlier scripts' workload configs) but the full-iteration MXFP8 ones, a
# 26.06 feature (the README above), and the development variants (``*_dev_config``). Where the two
# disagree (Qwen3-30B-A3B, Nemotron 3 Nano, gpt-oss on GB300, DeepSeek-V3 on B200: TE-scoped
# graphs in some 0.6.0 recipes) the default stays.
_NO_GRAPHS: dict[tuple[str, str], str] = {
    ("gpt-oss-120b", "GB200"): "gpt_oss/gb200 gpt_oss_120b_pretrain_64gpu_gb200_bf16_config",
    ("gpt-oss-120b", "B200"): "gpt_oss/b200 gpt_oss_120b_pretrain_64gpu_b200_{bf16,fp8mx}_config",
    ("Qwen3-235B-A22B", "B300"): "qwen/b300 qwen3_235b_a22b_pretrain_"
    "{64gpu_b300_{bf16,fp8cs,fp8mx,nvfp4},256gpu_b300_{bf16,fp8cs,nvfp4}}_config",
}


def _container(source_table: str) -> tuple[int, int] | None:
    """(year, month) of a Megatron-Bridge perf row's container ("26.06.01 NeMo container / ...")."""
    m = re.match(r"\s*(\d\d)\.(\d\d)", source_table)
    return (int(m.group(1)), int(m.group(2))) if m else None


def bridge_release(row: dict[str, str]) -> str | None:
    """The Megatron-Bridge release a Megatron-Bridge perf row's NeMo container shipped
    (``_BRIDGE_RELEASES``, assumed from the wheels' dates); None for other rows or containers."""
    m = re.match(r"\s*(\d\d)\.(\d\d)(?:\.(\d\d))?", row.get("source_table", ""))
    if row.get("source_key") != "megatron_bridge_perf" or m is None:
        return None
    return _BRIDGE_RELEASES.get((int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)))


def release_graphs(row: dict[str, str]) -> tuple[str, str] | None:
    """("none", the note) for a Megatron-Bridge perf row of a release whose base recipe was read
    (``_BASE_RECIPE_READ``) on a (model, GPU) of ``_NO_GRAPHS``; None otherwise."""
    release = bridge_release(row)
    gpu = (row.get("hardware", "").split() or [""])[0]
    recipes = _NO_GRAPHS.get((row.get("model", ""), gpu))
    if release not in _BASE_RECIPE_READ or recipes is None:
        return None
    note = f"Megatron-Bridge {release}'s base recipe and 0.6.0's perf_recipes {recipes}"
    return "none", note


def bridge_recipe(row: dict[str, str]) -> tuple[str, bool, str, str] | None:
    """The Megatron-Bridge 0.6.2 performance recipe's (dispatcher, EP overlap, CUDA graphs, name)
    of a Megatron-Bridge perf row of the 26.06 or a later container with that recipe's model, GPU
    and layout; None otherwise (module docstring)."""
    container = _container(row.get("source_table", ""))
    if row.get("source_key") != "megatron_bridge_perf" or container is None or container < _RECIPE_CONTAINER:
        return None

    def degree(name: str) -> int:
        m = re.match(r"\s*(\d+)", row.get(name, "") or "")
        return int(m.group(1)) if m else 1

    gpu = (row.get("hardware", "").split() or [""])[0]
    tp, pp, vp, ep, mb, gbs = (
        degree(k) for k in ("tp", "pp", "vp", "ep", "micro_batch", "global_batch_seqs")
    )
    return _BRIDGE_RECIPES.get((row["model"], gpu, tp, pp, vp, ep, mb, gbs))


def _dispatcher(notes: str) -> str | None:
    low = notes.lower()
    found = [(low.rfind(k), v) for k, v in (("hybridep", "hybridep"), ("deepep", "deepep"))]
    step = re.search(r'ladder step \d+/\d+: "([^"]*)"', notes)
    if step:  # a ladder row: the dispatcher the row itself runs ("dispatcher X;")
        m = re.search(r"dispatcher (\w+)", notes)
        name = (m.group(1) if m else "").lower()
        return {"hybridep": "hybridep", "deepep": "deepep"}.get(name, "alltoall")
    if "dispatcher hybridep" in low or "hybridep dispatcher" in low or "hybridep 32 sms" in low:
        return "hybridep"
    if "dispatcher deepep" in low:
        return "deepep"
    if "alltoall" in low or "a2a (nccl" in low:
        return "alltoall"
    hits = [v for i, v in sorted(found) if i >= 0]
    return hits[-1] if hits else None


def _overlap(notes: str) -> bool | None:
    low = notes.lower()
    if any(k in low for k in ("a2a_overlap=1", "ep overlap on", "+1f1b overlap", "ep overlap on")):
        return True
    if any(k in low for k in ("overlap off", "a2a_overlap=0", "no ep a2a overlap", "a2a overlap off")):
        return False
    return None


def _graphs(notes: str) -> str | None:
    low = notes.lower()
    if "cuda graphs disabled" in low:
        return "none"
    if "moe_router" in low or "cuda-graph scopes" in low or "cuda graphs attn" in low:
        return "partial"
    step = re.search(r"ladder step (\d+)/13", notes)
    if step:
        return "partial" if int(step.group(1)) >= 6 else "none"
    return None


def _routing(notes: str, model: str) -> dict[str, Any] | str:
    low = notes.lower()
    if model.endswith("(tokendrop)"):
        return {"capacity_factor": 1.0}
    if "dropless, natural routing" in low:
        return "dropless"
    if any(k in low for k in ("forced load balancing", "force-balanced", "forced-balanced", "fake balanced")):
        return "force_balanced"
    if "forced balance" in low or "force_load_balancing" in low:
        return "force_balanced"
    return "dropless"


def moe_state(row: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(plan fields, job fields, defaults taken) of a MoE row (module docstring)."""
    notes, key, defaults = row["notes"], row["source_key"], []
    dispatcher, overlap, graphs = _dispatcher(notes), _overlap(notes), _graphs(notes)
    recipe = bridge_recipe(row) if (dispatcher, overlap, graphs) == (None, None, None) else None
    if recipe is not None:
        dispatcher, overlap, graphs, name = recipe
        defaults.append(
            f"moe_dispatcher={dispatcher}, moe_overlap={'on' if overlap else 'off'}, "
            f"cuda_graphs={graphs} (Megatron-Bridge 0.6.2 {name})"
        )
    if dispatcher is None:
        dispatcher = "alltoall"
        defaults.append("moe_dispatcher=alltoall")
    if overlap is None:
        overlap = key == "megatron_bridge_perf" and "235B" in row["model"] and "H100" in row["hardware"]
        defaults.append(f"moe_overlap={'on' if overlap else 'off'}")
    if graphs is None and (by_release := release_graphs(row)) is not None:
        graphs = by_release[0]
        defaults.append(f"cuda_graphs={graphs} ({by_release[1]})")
    if graphs is None:
        blackwell = any(row["hardware"].startswith(h) for h in _BLACKWELL)
        graphs = "partial" if key == "megatron_bridge_perf" and blackwell else "none"
        defaults.append(f"cuda_graphs={graphs}")
    plan: dict[str, Any] = {"moe_dispatcher": dispatcher, "moe_overlap": overlap, "cuda_graphs": graphs}
    if "ETP=1" in notes or key == "mcore_modelzoo_qwen3":
        plan["etp"] = 1
        if "ETP=1" not in notes:
            defaults.append("etp=1 (the ModelZoo's Qwen3 recipes)")
    routing = _routing(notes, row["model"])
    stated = any(k in notes.lower() for k in ("balanc", "dropless", "routing:"))
    if key in _FORCED_UNLESS_STATED and not stated:
        routing = "force_balanced"  # the source's other runs force balance
        defaults.append(f"moe_routing=force_balanced ({_FORCED_UNLESS_STATED[key]})")
    job: dict[str, Any] = {"moe_routing": routing, **_fusions(row, defaults)}
    if (probs := probs_applied(row.get("framework", ""))) is not None:
        job["moe_probs_applied"] = probs
    return plan, job, defaults


def _fusions(row: dict[str, str], defaults: list[str]) -> dict[str, bool]:
    """``job.moe_router_fusion`` / ``job.moe_permute_fusion`` of a row (module docstring)."""
    notes = row["notes"].lower()
    step = re.search(r"ladder step (\d+)/13", notes)
    if step:
        return {"moe_permute_fusion": int(step.group(1)) >= 2, "moe_router_fusion": int(step.group(1)) >= 3}
    if "megatron" not in row.get("framework", "").lower():
        return {}
    fusions = {"moe_router_fusion": True, "moe_permute_fusion": "moe_permute_fusion=false" not in notes}
    stated = "moe_permute_fusion=" in notes or "permute fusion" in notes
    defaults.append(
        "moe_router_fusion=true" + ("" if stated else ", moe_permute_fusion=true") + " (Megatron)"
    )
    return fusions


def probs_applied(framework: str) -> str | None:
    """``job.moe_probs_applied`` of a run by ``framework`` (the row's column): activation where it
    names Megatron (megatron-core's experts apply the probabilities in their activation,
    rules/moe_probs.py), else None (auto: combine, the framework not named to the cost model)."""
    return "activation" if "megatron" in framework.lower() else None
