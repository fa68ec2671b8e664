"""Hardware catalog: the node presets, clusters and the topology graph."""

from __future__ import annotations

import pytest
from paraplan.hardware import build_cluster, node_type, node_type_names, topology_graph

PRESETS = [
    "dgx-a100-40gb",
    "dgx-a100-80gb",
    "dgx-h100",
    "dgx-h200",
    "hgx-h800",
    "dgx-b200",
    "gb200-nvl72",
    "gb200-nvl72-64",
    "gb300-nvl72",
    "mi300x",
]


@pytest.mark.parametrize("name", PRESETS)
def test_node_presets_exist_with_sane_figures(name: str) -> None:
    assert name in node_type_names()
    nt = node_type(name)
    assert nt.accelerator.peak_for("bf16") > 1e14
    assert nt.scale_up.per_gpu_bytes_per_s > nt.scale_out.per_gpu_bytes_per_s


def test_h100_figures_from_the_catalog() -> None:
    nt = node_type("dgx-h100")
    assert nt.accelerator.peak_for("bf16") == pytest.approx(989e12)
    assert nt.accelerator.peak_for("fp8") == pytest.approx(1979e12)
    assert nt.scale_up.per_gpu_bytes_per_s == pytest.approx(450e9)
    assert nt.scale_out.per_gpu_bytes_per_s == pytest.approx(50e9)  # 400 Gb/s NIC per GPU


def test_a100_has_no_fp8() -> None:
    with pytest.raises(ValueError, match="fp8"):
        node_type("dgx-a100-80gb").accelerator.peak_for("fp8")


def test_nvl72_rack_is_one_nvlink_domain() -> None:
    c = build_cluster("gb200-nvl72", nodes=2)
    assert c.num_devices == 144
    assert c.tiers[0].domain_devices == 72
    assert c.tier_of_span(72).name == "nvlink" and c.tier_of_span(73).name == "network"


def test_gpus_or_nodes() -> None:
    assert build_cluster("dgx-h100", gpus=64).num_nodes == 8
    assert build_cluster("dgx-h100", gpus=4).num_devices == 4  # part of one node
    with pytest.raises(ValueError, match="multiple of the 8 GPUs"):
        build_cluster("dgx-h100", gpus=12)


def test_llama3_fabric_has_an_oversubscribed_tier() -> None:
    c = build_cluster("llama3-roce", nodes=2048)
    names = [t.name for t in c.tiers]
    assert names == ["nvlink", "pod", "spine"]
    assert c.tiers[2].per_gpu_bytes_per_s == pytest.approx(50e9 / 7, rel=1e-3)


def test_topology_graph_links_devices_to_switches() -> None:
    g = topology_graph(build_cluster("dgx-h100", nodes=2))
    gpus = [n for n, d in g.nodes(data=True) if d["kind"] == "device"]
    assert len(gpus) == 16
    assert g.degree[("gpu", 0)] == 1
    assert g.has_edge(("nvlink", 1), ("network", 0))


def test_256_gb200_are_four_racks_of_16_compute_trays() -> None:
    c = build_cluster("gb200-nvl72-64", gpus=256)
    assert (c.num_devices, c.devices_per_node, c.num_nodes) == (256, 64, 4)
    assert c.accelerator == node_type("gb200-nvl72").accelerator
    with pytest.raises(ValueError, match="multiple of the 72 GPUs"):
        build_cluster("gb200-nvl72", gpus=256)


def test_gb300_is_a_gb200_rack_with_more_memory_and_faster_attention() -> None:
    """Same dense tensor rates and NVLink domain; 288 GB per GPU; the same plan runs faster on
    GB300 (attention) and a long-context plan too large for GB200 fits on GB300."""
    from paraplan.cost import Job, Plan, Recompute, evaluate
    from paraplan.graph import build_graph, preset

    gb200, gb300 = node_type("gb200-nvl72"), node_type("gb300-nvl72")
    for precision in ("bf16", "fp8"):
        assert gb300.accelerator.peak_for(precision) == gb200.accelerator.peak_for(precision)
    assert gb300.accelerator.hbm_bytes == pytest.approx(288e9)
    assert gb300.devices_per_node == 72 and gb300.scale_up == gb200.scale_up
    graph = build_graph(preset("llama3-8b"))
    plan = Plan(dp=8, tp=1, pp=1, micro_batch=1, zero=1, recompute=(Recompute.NONE,), layers_per_stage=(32,))

    def on(name: str, seq_len: int):
        return evaluate(graph, build_cluster(name, gpus=8), Job(seq_len=seq_len, global_batch=64), plan)

    assert on("gb300-nvl72", 8192).step_time_s < on("gb200-nvl72", 8192).step_time_s
    assert not on("gb200-nvl72", 32768).fits  # ~233 GB per GPU
    assert on("gb300-nvl72", 32768).fits
