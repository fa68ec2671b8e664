"""TPU chips, slice names and torus shapes, from ``data/tpu.yaml`` (sources cited there).

A TPU *slice* is a torus of chips joined by ICI links: v4 and v5p are 3D tori of 4x4x4 cubes that
optical circuit switches stitch into a job's shape (any shape of whole cubes), v5e and v6e 2D
16x16 tori. Users name a slice ``<family>-<N>``: v4/v5p count TensorCores (``v5p-1024`` = 512
chips, 8x8x8), v5e/v6e count chips (``v5e-256`` = 16x16). Several slices of one job
(multislice) talk over the data-center network (DCN).

Ranks are laid out row-major over the torus: rank r of a slice sits at x = r mod X,
y = (r div X) mod Y, z = r div XY (the first dimension varies fastest), and slice r div (XYZ).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from itertools import permutations
from math import prod
from typing import Any

import yaml
from paraplan.hardware.catalog import GB_BYTES, GIB_BYTES, TFLOPS, US_S, Accelerator

__all__ = [
    "Torus",
    "SliceSpec",
    "tpu_chip",
    "tpu_chip_names",
    "slice_family_names",
    "parse_slice",
    "is_slice_name",
    "slice_shapes",
    "wraparound",
    "torus_of",
    "MAX_SHAPES",
    "CUBE",
]

CUBE = 4
"""Edge of a v4/v5p cube: a slice of whole cubes has every dimension a multiple of 4 (S12, S16)."""
MAX_SHAPES = 12
"""Most slice shapes the solver weighs for one slice (the most cubic first): a 6,144-chip slice has
63 orderings of whole-cube shapes, each multiplying the placement search."""
_NAME = re.compile(r"^(v4|v5p|v5e|v6e)-(\d+)$")


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("paraplan.hardware").joinpath("data/tpu.yaml").read_text()
    return yaml.safe_load(text)


def tpu_chip_names() -> list[str]:
    return sorted(_raw()["chips"])


def slice_family_names() -> list[str]:
    return sorted(_raw()["slice_families"])


def tpu_chip(key: str) -> Accelerator:
    """A TPU chip as an Accelerator (units converted from the data file)."""
    raw = _raw()["chips"]
    if key not in raw:
        raise ValueError(
            f"accelerator={key!r} is not a known TPU chip; choose one of {', '.join(sorted(raw))}"
        )
    c = raw[key]
    return Accelerator(
        key=key,
        name=c["name"],
        generation=c["generation"],
        peak_flops_per_s={k: float(v) * TFLOPS for k, v in c["peak_tflops"].items()},
        hbm_bytes=(float(c["hbm_GiB"]) * GIB_BYTES if "hbm_GiB" in c else float(c["hbm_GB"]) * GB_BYTES),
        hbm_bytes_per_s=float(c["hbm_TBps"]) * 1e12,
        is_tpu=True,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceSpec:
    """A named slice: its family, chip count and the family's data."""

    family: str
    chips: int
    dims: int
    host_chips: int
    chip: str
    link_bytes_per_s: float
    dcn_bytes_per_s: float
    max_slice_chips: int


def is_slice_name(preset: str) -> bool:
    return _NAME.match(preset) is not None


def parse_slice(preset: str) -> SliceSpec:
    """``v5p-1024`` -> 512 v5p chips. ValueError names the rule a bad name breaks."""
    m = _NAME.match(preset)
    if m is None:
        raise ValueError(
            f"cluster.preset={preset!r} is not a TPU slice name; write "
            "<family>-<N> with family one of v4, v5p, v5e, v6e (e.g. v5p-1024)"
        )
    family, n = m.group(1), int(m.group(2))
    fam = _raw()["slice_families"][family]
    cores = int(fam["cores_per_chip"])
    if n < 1 or n % cores:
        raise ValueError(
            f"cluster.preset={preset!r}: {family} slice names count TensorCores "
            f"({cores} per chip), so N must be a positive multiple of {cores}"
        )
    chips = n // cores
    if chips > fam["max_slice_chips"]:
        raise ValueError(
            f"cluster.preset={preset!r} has {chips} chips; the largest {family} slice "
            f"has {fam['max_slice_chips']} (use several slices: cluster.nodes)"
        )
    chip = _raw()["chips"][fam["chip"]]
    spec = SliceSpec(
        family=family,
        chips=chips,
        dims=int(fam["dims"]),
        host_chips=int(fam["host_chips"]),
        chip=fam["chip"],
        link_bytes_per_s=float(chip["link_GBps"]) * GB_BYTES,
        dcn_bytes_per_s=float(fam["dcn_GBps_per_chip"]) * GB_BYTES,
        max_slice_chips=int(fam["max_slice_chips"]),
    )
    if not slice_shapes(spec):
        raise ValueError(
            f"cluster.preset={preset!r}: {chips} chips make no {family} slice "
            + (
                "(below one 4x4x4 cube: 4, 8, 16 or 32 chips; above: whole cubes, a multiple of 64 chips)"
                if spec.dims == 3
                else "(v5e/v6e slices hold 1, 4, 8, 16, 32, 64, 128 or 256 chips)"
            )
        )
    return spec


def _whole_cube_shapes(chips: int) -> list[tuple[int, int, int]]:
    cubes = chips // CUBE**3
    out = []
    for a in range(1, cubes + 1):
        if cubes % a:
            continue
        for b in range(1, cubes // a + 1):
            if (cubes // a) % b == 0:
                out.append((CUBE * a, CUBE * b, CUBE * (cubes // (a * b))))
    return out


def slice_shapes(spec: SliceSpec) -> tuple[tuple[int, ...], ...]:
    """The shapes a slice may take, the default first (the most cubic, ascending dims).

    Below one cube and on 2D families: the one shape Google names (data file). Whole-cube 3D
    slices: every ordering of every shape of whole cubes (optical circuit switching, S16), the
    most cubic first, at most MAX_SHAPES of them; () when the chip count makes no slice."""
    small = _raw()["slice_families"][spec.family]["small_shapes"]
    if spec.chips in small:
        return (tuple(int(d) for d in small[spec.chips]),)
    if spec.dims == 2 or spec.chips % CUBE**3:
        return ()
    shapes = {p for s in _whole_cube_shapes(spec.chips) for p in permutations(s)}
    ranked = sorted(shapes, key=lambda s: (max(s), sorted(s), s))
    return tuple(ranked[:MAX_SHAPES])


def wraparound(spec: SliceSpec, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes close into a ring: 3D families every axis of a slice of whole cubes, none
    below a cube; 2D families only axes of full length 16 (S12-S16). A 2-chip axis is a line."""
    return _wrap(spec.dims, shape)


def _wrap(family_dims: int, shape: tuple[int, ...]) -> tuple[bool, ...]:
    if family_dims == 3:
        whole = all(d % CUBE == 0 for d in shape)
        return tuple(whole and d > 2 for d in shape)
    return tuple(d == 16 for d in shape)


@dataclass(frozen=True, slots=True, kw_only=True)
class Torus:
    """The ICI torus of each slice of a TPU cluster, and the shapes the solver may give it."""

    family: str
    family_dims: int  # 3: cubes joined by optical switches; 2: a fixed 16x16 torus
    shape: tuple[int, ...]  # chips per axis; the first axis varies fastest with the rank
    wrap: tuple[bool, ...]
    num_slices: int
    shapes: tuple[tuple[int, ...], ...]  # the shapes this slice may take (default first)
    link_bytes_per_s: float  # one way, per ICI link
    hop_s: float
    ici_efficiency: float
    dcn_bytes_per_s: float  # one way, per chip
    dcn_alpha_s: float
    dcn_efficiency: float

    @property
    def slice_chips(self) -> int:
        return prod(self.shape)

    def reshaped(self, shape: tuple[int, ...]) -> Torus:
        """The same slices in another of their shapes; ValueError unless one of ``shapes``."""
        shape = tuple(shape)
        if shape not in self.shapes:
            raise ValueError(
                f"plan.torus_shape={list(shape)} is not a shape of this {self.family} slice; "
                f"choose one of {', '.join('x'.join(map(str, s)) for s in self.shapes)}"
            )
        return replace(self, shape=shape, wrap=_wrap(self.family_dims, shape))


def torus_of(spec: SliceSpec, num_slices: int) -> Torus:
    """The torus of ``num_slices`` slices of ``spec`` in their default shape."""
    shapes = slice_shapes(spec)
    raw = _raw()
    return Torus(
        family=spec.family,
        family_dims=spec.dims,
        shape=shapes[0],
        wrap=wraparound(spec, shapes[0]),
        num_slices=num_slices,
        shapes=shapes,
        link_bytes_per_s=spec.link_bytes_per_s,
        hop_s=float(raw["ici"]["hop_us"]) * US_S,
        ici_efficiency=float(raw["ici"]["efficiency"]),
        dcn_bytes_per_s=spec.dcn_bytes_per_s,
        dcn_alpha_s=float(raw["dcn"]["alpha_us"]) * US_S,
        dcn_efficiency=float(raw["dcn"]["efficiency"]),
    )
