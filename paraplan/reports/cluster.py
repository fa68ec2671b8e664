"""The cluster part of the HTML plan report: link tiers and the parallel groups that cross them.

Which tiers a group crosses is the cost model's answer (``cost.comm.group_span``, ``cost.ep.ep_span``;
``cost.pp.stage_links`` on a mixed-GPU cluster): the fan-in at each tier, whose product is the
group size. Members of rank 0's groups follow the plan's rank order (innermost first): along
axis a they sit stride_a = product of the degrees ordered inside a apart; the expert-parallel
group is the innermost ep ranks of dp x cp (cost/ep.py). On a pooled cluster the groups inside a
stage are spanned on the pool of stage 0 (every pool runs the same degrees) and each stage's
ranks lie on its own pool (cost/pools.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from html import escape

from paraplan.cost import Axis, GroupSpan, Plan, group_span
from paraplan.cost.comm import axis_stride
from paraplan.cost.ep import ep_span
from paraplan.cost.pp import stage_links
from paraplan.hardware import Cluster, Tier
from paraplan.reports.svg import Svg, legend_html

__all__ = ["GroupRow", "group_rows", "device_ranks", "cluster_svgs", "groups_table", "AXIS_COLORS"]

AXIS_COLORS = {
    "tp": "#E15759",
    "cp": "#59A14F",
    "ep": "#17A2B8",
    "dp": "#4E79A7",
    "dp x cp": "#1F3B63",
    "pp": "#8E5AC8",
}
STAGE_TINTS = ["#EAF1FB", "#FDF0E2", "#E9F5E8", "#F6E8F3", "#FFF8DC", "#E6F6F6", "#F1ECE6", "#EDEDF7"]
MAX_DRAWN_DOMAINS = 8  # innermost-tier domains (nodes) drawn; the others are elided
MAX_DRAWN_CELLS = 144  # devices drawn per domain
MAX_DRAWN_DEVICES = 320  # fewer domains are drawn when each is large (NVL72 racks: 4)
CELL_PX = 30
DOT_AXES = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One parallel group of rank 0: its name, size, member ranks and the tiers it crosses."""

    name: str
    size: int
    members: tuple[int, ...]
    fan_in: tuple[tuple[Tier, int], ...]  # (tier, fan-in > 1), innermost first
    note: str = ""

    @property
    def outermost(self) -> Tier | None:
        return self.fan_in[-1][0] if self.fan_in else None

    @property
    def crossing(self) -> str:
        return " × ".join(f"{f} over {t.name}" for t, f in self.fan_in) or "one device"


def _crossed(span: GroupSpan) -> tuple[tuple[Tier, int], ...]:
    return tuple((t, f) for t, f in zip(span.tiers, span.fan_in, strict=True) if f > 1)


def _members(plan: Plan, axis: Axis) -> list[int]:
    stride = axis_stride(plan, axis)
    return [k * stride for k in range(plan.degree(axis))]


def _span_cluster(cluster: Cluster, plan: Plan) -> tuple[Cluster, Plan]:
    """Where the groups inside a stage are spanned: the pool of stage 0 on a pooled cluster."""
    if cluster.pools and plan.stage_pools:
        return cluster.pools[plan.stage_pools[0]], replace(plan, stage_pools=())
    return cluster, plan


def group_rows(cluster: Cluster, plan: Plan) -> list[GroupRow]:
    """Rank 0's groups with degree > 1: tp, cp, ep, dp, the dp x cp gradient sync, pp."""
    where, local = _span_cluster(cluster, plan)
    rows = []
    for axis in (Axis.TP, Axis.CP):
        if plan.degree(axis) > 1:
            rows.append(
                GroupRow(
                    axis.value,
                    plan.degree(axis),
                    tuple(_members(plan, axis)),
                    _crossed(group_span(where, local, axis)),
                )
            )
    if plan.ep > 1:
        both = sorted(d + c for d in _members(plan, Axis.DP) for c in _members(plan, Axis.CP))
        rows.append(
            GroupRow(
                "ep",
                plan.ep,
                tuple(both[: plan.ep]),
                _crossed(ep_span(where, local)),
                "all-to-all of routed tokens",
            )
        )
    if plan.dp > 1:
        rows.append(
            GroupRow(
                "dp", plan.dp, tuple(_members(plan, Axis.DP)), _crossed(group_span(where, local, Axis.DP))
            )
        )
    if plan.dp > 1 and plan.cp > 1:
        both = sorted(d + c for d in _members(plan, Axis.DP) for c in _members(plan, Axis.CP))
        rows.append(
            GroupRow(
                "dp x cp",
                plan.dp * plan.cp,
                tuple(both),
                _crossed(group_span(where, local, Axis.DP, Axis.CP)),
                "gradient sync / ZeRO shards",
            )
        )
    if plan.pp > 1:
        members = tuple(_members(plan, Axis.PP))
        if cluster.pools and plan.stage_pools:
            links = stage_links(plan, cluster)
            names = ", ".join(f"{t.name} ({s}→{s + 1})" for s, t in enumerate(links))
            slowest = min(links, key=lambda t: t.effective_bytes_per_s)
            rows.append(
                GroupRow("pp", plan.pp, members, ((slowest, plan.pp),), f"stage-to-stage links: {names}")
            )
        else:
            rows.append(GroupRow("pp", plan.pp, members, _crossed(group_span(cluster, plan, Axis.PP))))
    return rows


def device_ranks(cluster: Cluster, plan: Plan) -> dict[int, int]:
    """Device index (cluster order; pools in order) -> rank; unused devices are absent."""
    if not (cluster.pools and plan.stage_pools):
        return {r: r for r in range(plan.num_devices)}
    per_stage = plan.num_devices // plan.pp
    base = [sum(p.num_devices for p in cluster.pools[:i]) for i in range(len(cluster.pools))]
    out, used = {}, dict.fromkeys(range(len(cluster.pools)), 0)
    for s, pool in enumerate(plan.stage_pools):
        first = base[pool] + used[pool] * per_stage
        used[pool] += 1
        out.update({first + k: s * per_stage + k for k in range(per_stage)})
    return out


def _tier_label(cluster: Cluster, tier: Tier) -> str:
    return (
        f"{tier.name}: {tier.per_gpu_bytes_per_s / 1e9:,.0f} GB/s per GPU, "
        f"{tier.alpha_s * 1e6:.1f} µs, domains of {tier.domain_devices:,} devices"
    )


def _ladder_svg(cluster: Cluster, rows: list[GroupRow], width: float) -> str:
    """One band per tier, innermost first; each group sits in every band it crosses."""
    tiers = list(cluster.tiers)
    band_h, label_w = 44, 440
    svg = Svg(width, len(tiers) * (band_h + 6) + 4, "link tiers and the parallel groups crossing them")
    for i, tier in enumerate(tiers):
        y = 2 + i * (band_h + 6)
        svg.rect(0, y, width, band_h, "#F3F4F6" if i % 2 else "#F9FAFB", rx=6)
        svg.text(12, y + 19, tier.name, class_="tier-name")
        svg.text(12, y + 36, _tier_label(cluster, tier).split(": ", 1)[1], class_="tier-info")
        x = label_w
        for row in rows:
            fan = next((f for t, f in row.fan_in if t.name == tier.name), 0)
            if not fan:
                continue
            text = f"{row.name} ×{fan}"
            w = 18 + 7.4 * len(text)
            svg.rect(
                x,
                y + 9,
                w,
                band_h - 18,
                AXIS_COLORS[row.name],
                rx=13,
                class_="pill",
                title=f"{row.name} group of {row.size}: {row.crossing}",
            )
            svg.text(x + w / 2, y + band_h / 2 + 5, text, text_anchor="middle", class_="pill-text")
            x += w + 10
    return svg.render("ladder")


def _domains_to_draw(
    rows: list[GroupRow], ranks: dict[int, int], domain: int, num_domains: int, limit: int
) -> list[int]:
    """All domains when they are few; else domain 0 and those of rank 0's group members, taking
    each group's next member in turn so that every group's reach shows (at most ``limit``)."""
    if num_domains <= limit:
        return list(range(num_domains))
    device_of = {r: d for d, r in ranks.items()}
    chosen = [0]
    longest = max((len(r.members) for r in rows), default=0)
    for k in range(1, longest):
        for row in rows:
            if k < len(row.members) and row.members[k] in device_of:
                d = device_of[row.members[k]] // domain
                if d not in chosen:
                    chosen.append(d)
                if len(chosen) == limit:
                    return sorted(chosen)
    return sorted(chosen)


def _nodes_svg(cluster: Cluster, plan: Plan, rows: list[GroupRow], width: float) -> str:
    """The first devices domain by domain (nodes; racks on NVL72), each cell a device coloured by
    its pipeline stage, with a dot for each of rank 0's groups it belongs to."""
    domain = cluster.tiers[0].domain_devices
    num_domains = math.ceil(cluster.num_devices / domain)
    ranks = device_ranks(cluster, plan)
    per_stage = plan.num_devices // plan.pp
    stride_pp = axis_stride(plan, Axis.PP)
    drawn = min(domain, MAX_DRAWN_CELLS)
    cols = min(drawn, 12 if drawn > 16 else 8)
    box_w, box_h = cols * CELL_PX + 14, math.ceil(drawn / cols) * CELL_PX + 30
    per_row = max(1, int((width + 14) // (box_w + 14)))
    tiles: list[int | tuple[int, int]] = []  # a domain, or (first, count) of elided domains
    prev = -1
    limit = min(MAX_DRAWN_DOMAINS, max(2, MAX_DRAWN_DEVICES // drawn))
    for d in _domains_to_draw(rows, ranks, domain, num_domains, limit):
        if d > prev + 1:
            tiles.append((prev + 1, d - prev - 1))
        tiles.append(d)
        prev = d
    if prev < num_domains - 1:
        tiles.append((prev + 1, num_domains - 1 - prev))
    height = math.ceil(len(tiles) / per_row) * (box_h + 14)
    svg = Svg(width, height, "devices by node with rank 0's parallel groups")
    member_of = {m: [r.name for r in rows if m in r.members] for row in rows for m in row.members}
    unit = "node" if cluster.devices_per_node == domain else f"{cluster.tiers[0].name} domain"
    pool_base = [sum(p.num_devices for p in cluster.pools[:i]) for i in range(len(cluster.pools))]
    for i, tile in enumerate(tiles):
        x0, y0 = (i % per_row) * (box_w + 14), (i // per_row) * (box_h + 14)
        if isinstance(tile, tuple):
            svg.rect(x0, y0, box_w, box_h, "#FFFFFF", rx=8, stroke="#D1D5DB", stroke_dasharray="4 4")
            svg.text(
                x0 + box_w / 2,
                y0 + box_h / 2 + 4,
                f"⋯ {tile[1]:,} more {unit}s ⋯",
                text_anchor="middle",
                class_="elided",
            )
            continue
        pool = ""
        if cluster.pools:
            p = max(k for k, b in enumerate(pool_base) if b <= tile * domain)
            pool = f" · pool {p} ({cluster.pools[p].name})"
        svg.rect(x0, y0, box_w, box_h, "#FFFFFF", rx=8, stroke="#9CA3AF", class_="node")
        svg.text(x0 + 8, y0 + 16, f"{unit} {tile}{pool}", class_="node-name")
        for k in range(drawn):
            device = tile * domain + k
            if device >= cluster.num_devices:
                break
            cx, cy = x0 + 7 + (k % cols) * CELL_PX, y0 + 24 + (k // cols) * CELL_PX
            rank = ranks.get(device)
            if rank is None:
                svg.rect(cx, cy, CELL_PX - 2, CELL_PX - 2, "#F3F4F6", rx=3, title=f"device {device}: idle")
                continue
            stage = rank // per_stage if cluster.pools else (rank // stride_pp) % plan.pp
            groups = member_of.get(rank, [])
            tip = f"rank {rank}, pipeline stage {stage}" + (
                f"; in rank 0's {', '.join(groups)} group" if groups else ""
            )
            svg.rect(
                cx,
                cy,
                CELL_PX - 2,
                CELL_PX - 2,
                STAGE_TINTS[stage % len(STAGE_TINTS)],
                rx=3,
                stroke="#111827" if rank == 0 else "#CBD5E1",
                stroke_width="1.6" if rank == 0 else "0.8",
                title=tip,
            )
            svg.text(cx + (CELL_PX - 2) / 2, cy + 11, str(rank), text_anchor="middle", class_="rank")
            for j, name in enumerate(DOT_AXES):
                if name in groups:
                    svg.raw(
                        f'<circle cx="{cx + 4 + j * 5.3:.1f}" cy="{cy + 20:.1f}" r="2.4" '
                        f'fill="{AXIS_COLORS[name]}"/>'
                    )
        if domain > drawn:
            svg.text(
                x0 + box_w - 8, y0 + 16, f"first {drawn} of {domain}", text_anchor="end", class_="elided"
            )
    return svg.render("nodes")


def cluster_svgs(cluster: Cluster, plan: Plan, rows: list[GroupRow], width: float = 1100) -> str:
    """The tier ladder, a legend and the node drawing."""
    dots = [(AXIS_COLORS[r.name], f"rank 0's {r.name} group ({r.size})") for r in rows if r.name in DOT_AXES]
    n = len(STAGE_TINTS)
    stages = [
        (STAGE_TINTS[s], f"stage {s}" + (f", {s + n}, …" if plan.pp > s + n else ""))
        for s in range(min(plan.pp, n))
    ]
    return (
        _ladder_svg(cluster, rows, width)
        + legend_html(dots + stages + ([("#F3F4F6", "idle")] if cluster.pools else []))
        + _nodes_svg(cluster, plan, rows, width)
    )


def groups_table(rows: list[GroupRow]) -> str:
    """One row per group: size, rank 0's members, the tiers it crosses and its slowest link."""
    head = (
        "<tr><th>group</th><th>size</th><th>rank 0's members</th><th>crosses</th>"
        "<th>outermost link</th><th>per-GPU bandwidth</th><th></th></tr>"
    )
    body = []
    for r in rows:
        members = ", ".join(map(str, r.members[:12])) + (" …" if len(r.members) > 12 else "")
        tier = r.outermost
        body.append(
            f'<tr><td><i class="sw" style="background:{AXIS_COLORS[r.name]}"></i>{escape(r.name)}'
            f"</td><td>{r.size}</td><td>{escape(members)}</td><td>{escape(r.crossing)}</td>"
            f"<td>{escape(tier.name if tier else '-')}</td>"
            f"<td>{f'{tier.per_gpu_bytes_per_s / 1e9:,.0f} GB/s' if tier else '-'}</td>"
            f"<td>{escape(r.note)}</td></tr>"
        )
    if not rows:
        body.append('<tr><td colspan="7">every degree is 1: one device, no group crosses a link</td></tr>')
    return f'<table class="groups">{head}{"".join(body)}</table>'
