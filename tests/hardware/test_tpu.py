"""TPU catalog: chips from hardware.json, slice names, shapes, wraparound and multislice."""

from __future__ import annotations

import pytest
from paraplan.hardware import accelerator, build_cluster, parse_slice, tpu_chip
from paraplan.hardware.tpu import slice_shapes


def test_chips_carry_the_vendor_figures() -> None:
    # hardware.json google_tpu_*: v5p 459 TFLOP/s BF16, 95 GB at 2.765 TB/s; v4 32 GiB
    v5p = tpu_chip("tpu-v5p")
    assert v5p.peak_for("bf16") == pytest.approx(459e12)
    assert v5p.peak_for("fp8") == pytest.approx(459e12)  # Google lists FP8 = BF16 on v5p
    assert v5p.hbm_bytes == pytest.approx(95e9)
    assert v5p.hbm_bytes_per_s == pytest.approx(2.765e12)
    assert tpu_chip("tpu-v4").hbm_bytes == 32 * 2**30
    assert tpu_chip("tpu-v6e").peak_for("bf16") == pytest.approx(918e12)
    assert accelerator("tpu-v5e").peak_for("bf16") == pytest.approx(197e12)
    with pytest.raises(ValueError, match="fp8"):
        tpu_chip("tpu-v5e").peak_for("fp8")


def test_slice_names_count_cores_on_v4_v5p_and_chips_on_v5e_v6e() -> None:
    assert parse_slice("v5p-1024").chips == 512
    assert parse_slice("v4-128").chips == 64
    assert parse_slice("v5e-256").chips == 256
    assert parse_slice("v6e-64").chips == 64


@pytest.mark.parametrize(
    "name, rule",
    [
        ("v5p-1023", "multiple of 2"),
        ("v5e-512", "largest"),
        ("v5p-200", "whole cubes"),
        ("v5e-24", "slices hold"),
        ("v7-8", "family one of"),
    ],
)
def test_bad_slice_names_say_why(name: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        parse_slice(name)


def test_default_shapes_and_wraparound() -> None:
    v5p = build_cluster("v5p-1024", nodes=1)
    assert v5p.torus.shape == (8, 8, 8) and all(v5p.torus.wrap)
    v5e = build_cluster("v5e-256", nodes=1)
    assert v5e.torus.shape == (16, 16) and all(v5e.torus.wrap)
    # v5e axes shorter than 16 have no wraparound; v4/v5p below one cube neither
    assert build_cluster("v5e-128", nodes=1).torus.wrap == (False, True)
    assert build_cluster("v5p-32", nodes=1).torus.wrap == (False, False, False)


def test_optical_switching_offers_every_whole_cube_shape() -> None:
    shapes = slice_shapes(parse_slice("v5p-1024"))
    assert shapes[0] == (8, 8, 8)
    assert set(shapes) == {
        (8, 8, 8),
        *{p for s in [(4, 8, 16), (4, 4, 32)] for p in __import__("itertools").permutations(s)},
    }
    assert slice_shapes(parse_slice("v5e-256")) == ((16, 16),)


def test_multislice_adds_a_dcn_tier_per_chip() -> None:
    c = build_cluster("v5p-1024", nodes=2)
    assert c.num_devices == 1024 and c.devices_per_node == 4
    assert [t.name for t in c.tiers] == ["ici-x", "ici-y", "ici-z", "dcn"]
    assert c.tiers[-1].per_gpu_bytes_per_s == pytest.approx(50e9 / 8)  # 50 Gb/s per chip
    assert build_cluster("v5e-256", gpus=512).torus.num_slices == 2
    with pytest.raises(ValueError, match="multiple of the 256"):
        build_cluster("v5e-256", gpus=300)
