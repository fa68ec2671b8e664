"""``paraplan presets``: the model and cluster presets a scenario can name, as rows or text.

Model rows come from graph/data/presets.yaml (each with its ``source``), parameter counts from
the layer graph (``build_graph(spec).num_params``, the count the cost model uses); cluster rows
from hardware/data/catalog.yaml (node types, and fabrics: a node type on another network).
"""

from __future__ import annotations

from typing import Any

from paraplan.graph import build_graph, preset, preset_names
from paraplan.graph.presets import preset_fields
from paraplan.hardware import fabric, fabric_names, node_type, node_type_names

__all__ = ["model_rows", "cluster_rows", "render_presets"]


def model_rows() -> list[dict[str, Any]]:
    """One row per model preset: name, params (and active params of MoE models), layers, hidden,
    heads, kv_heads, experts (0: dense), source."""
    rows = []
    for name in preset_names():
        spec = preset(name)
        graph = build_graph(spec)
        rows.append(
            {
                "name": name,
                "params": graph.num_params,
                "active_params": graph.num_active_params,
                "layers": spec.num_layers,
                "hidden": spec.hidden,
                "heads": spec.num_heads,
                "kv_heads": spec.num_kv_heads,
                "experts": spec.num_experts,
                "source": str(preset_fields(name).get("source", "")),
            }
        )
    return rows


def cluster_rows() -> list[dict[str, Any]]:
    """One row per cluster preset (``cluster.preset``): name, description, accelerator, GPUs per
    node, memory per GPU (GiB), and the link tiers from the innermost out."""
    rows = []
    for name in node_type_names() + fabric_names():
        fab = fabric(name) if name in fabric_names() else None
        nt = node_type(fab.node if fab else name)
        tiers = fab.tiers if fab else (nt.scale_up, nt.scale_out)
        rows.append(
            {
                "name": name,
                "description": fab.name if fab else nt.name,
                "accelerator": nt.accelerator.name,
                "gpus_per_node": nt.devices_per_node,
                "memory_gib": round(nt.accelerator.hbm_bytes / 2**30, 1),
                "tiers": [t.name for t in tiers],
            }
        )
    return rows


def _billions(n: int) -> str:
    return f"{n / 1e9:,.1f}B"


def render_presets() -> str:
    """Both tables as text (``paraplan presets``)."""
    lines = [
        "model presets (model.preset)",
        f"  {'name':<16} {'params':>9} {'active':>8} {'layers':>6} {'hidden':>6} "
        f"{'heads':>5} {'kv':>4} {'experts':>7}  source",
    ]
    for r in model_rows():
        active = _billions(r["active_params"]) if r["experts"] else "-"
        lines.append(
            f"  {r['name']:<16} {_billions(r['params']):>9} {active:>8} {r['layers']:>6} "
            f"{r['hidden']:>6} {r['heads']:>5} {r['kv_heads']:>4} "
            f"{r['experts'] or '-':>7}  {r['source']}"
        )
    lines += [
        "",
        "cluster presets (cluster.preset, with nodes: N or gpus: N)",
        f"  {'name':<16} {'gpus/node':>9} {'GiB':>6}  {'tiers':<16} accelerator",
    ]
    for r in cluster_rows():
        lines.append(
            f"  {r['name']:<16} {r['gpus_per_node']:>9} {r['memory_gib']:>6}  "
            f"{' > '.join(r['tiers']):<16} {r['accelerator']}"
        )
    return "\n".join(lines)
