"""The HTML plan report (issue 15 item 4): one self-contained page, each part with the result's
numbers, escaped text, no network; rendered in headless Chromium without console errors.

``python -m tests.test_html_report`` rewrites the committed screenshot
benchmarks/results/report.png (needs chromium).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from paraplan.cost import Axis, group_span

import paraplan
from paraplan.export import context
from paraplan.export.trace import build_trace
from paraplan.reports.html import SECTION_IDS, report_html, write_report
from paraplan.reports.svg import memory_parts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3-70b-h100.yaml"  # fixed plan: dp2 tp4 pp4 cp2 vp5, 64 H100
SCREENSHOT = ROOT / "benchmarks" / "results" / "report.png"
CHROMIUM = "/usr/bin/chromium"
GIB = 2**30
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
SVG_SELF_CLOSING = {"rect", "line", "circle", "path", "stop"}


@pytest.fixture(scope="module")
def evaluated() -> paraplan.Result:
    return paraplan.evaluate(EXAMPLE)


@pytest.fixture(scope="module")
def page(evaluated: paraplan.Result) -> str:
    return report_html(evaluated)


@pytest.fixture(scope="module")
def planned() -> paraplan.Result:
    return paraplan.solve(ROOT / "examples" / "llama3-8b-h100.yaml", top=3, time_limit_s=60)


class _Checker(HTMLParser):
    """Every element closed in order (void elements and self-closed SVG shapes excepted)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ids: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids += [v for k, v in attrs if k == "id" and v]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids += [v for k, v in attrs if k == "id" and v]

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def _titles(page: str, css_class: str) -> list[str]:
    return re.findall(rf'<rect [^>]*class="{css_class}"[^>]*><title>([^<]*)</title>', page)


# --------------------------------------------------------------------------- the page


def test_report_is_well_formed_html_with_every_section(page: str) -> None:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert page.startswith("<!DOCTYPE html>")
    assert checker.errors == [] and checker.stack == []
    assert len(checker.ids) == len(set(checker.ids))
    assert set(SECTION_IDS) <= set(checker.ids)
    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):  # each SVG is well-formed XML
        ET.fromstring(svg)
    assert page.count("<svg") >= 4


def test_report_needs_no_network(page: str) -> None:
    assert re.search(r"(?:https?|ftp):|//[a-z0-9.-]+\.[a-z]{2,}", page, flags=re.I) is None
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert "<img" not in page and "<iframe" not in page
    assert set(re.findall(r"url\(([^)]*)\)", page)) <= {"#hatch"}


def test_header_states_model_cluster_job_and_prediction(evaluated: paraplan.Result, page: str) -> None:
    q = evaluated.predicted
    header = page[page.index('id="summary"') : page.index('id="schedule"')]
    assert "llama3-70b" in header and "8 x dgx-h100" in header and "64 x NVIDIA H100" in header
    assert "seq_len 8192, global_batch 128, precision fp8" in header
    assert f"{q.step_time_s:,.3f} s" in header
    assert f"{q.step_time_band_s.p10:,.2f}-{q.step_time_band_s.p90:,.2f} s" in header
    assert f"{q.mfu:.1%}" in header and f"{q.tokens_per_s_per_gpu:,.0f}" in header
    assert "evaluated (fixed plan)" in header  # no solver section: evaluate's result


def test_schedule_draws_each_micro_batch_of_each_stage_from_the_trace(
    evaluated: paraplan.Result, page: str
) -> None:
    q, plan = evaluated.predicted, evaluated.plan
    assert q.num_micro_batches == 64 and plan.pp == 4
    forward = _titles(page, "fwd")
    backward = _titles(page, "bwd")
    assert len(forward) == len(backward) == plan.pp * q.num_micro_batches
    # the critical stage's forward + backward per micro-batch is the cost model's compute
    trace = build_trace(context(evaluated))
    critical = trace["otherData"]["critical_path_tid"] - 1
    f_ms = [
        float(t.split("forward ")[1].split(" ms")[0])
        for t in forward
        if t.startswith(f"pp stage {critical} ")
    ]
    b_ms = [
        float(t.split("included) ")[1].split(" ms")[0].replace(",", ""))
        for t in backward
        if t.startswith(f"pp stage {critical} ")
    ]
    assert len(f_ms) == q.num_micro_batches
    assert f_ms[0] + b_ms[0] == pytest.approx(q.compute_s / q.num_micro_batches * 1e3, abs=0.15)
    assert b_ms[0] > f_ms[0]  # backward ~2x forward (DESIGN.md)
    # bubbles and exposed communication are drawn, and the axis spans the step in ms
    assert _titles(page, "bubble") and _titles(page, "exposed")
    assert "time (ms)" in page and f"({q.step_time_s * 1e3:,.1f} ms)" in page


def test_memory_bars_carry_each_stage_part_against_capacity(evaluated: paraplan.Result, page: str) -> None:
    q = evaluated.predicted
    for s in q.stages:
        for part in memory_parts():
            label = part.removesuffix("_bytes").replace("_", " ")
            assert f"stage {s.stage} {label}: {getattr(s, part) / GIB:,.2f} GiB" in page
        assert (
            f"{s.total_bytes / GIB:,.1f} / {q.memory_capacity_bytes / GIB:,.1f} GiB "
            f"({s.total_bytes / q.memory_capacity_bytes:.0%})"
        ) in page
    assert page.count('class="capacity"') == len(q.stages)
    widths = {
        p: float(
            re.search(
                rf'width="([\d.]+)" height="22" fill="[^"]+" '
                rf'class="mem-{p}"',
                page,
            ).group(1)
        )
        for p in memory_parts()
    }
    s0 = q.stages[0]  # bar lengths are proportional to bytes
    assert widths["activations_bytes"] / widths["weights_bytes"] == pytest.approx(
        s0.activations_bytes / s0.weights_bytes, rel=0.01
    )


def test_cluster_shows_each_group_on_the_tiers_the_cost_model_says(
    evaluated: paraplan.Result, page: str
) -> None:
    section = page[page.index('id="cluster"') : page.index('id="alternatives"')]
    # rank order tp-cp-dp-pp on 8-GPU nodes: tp 4 x cp 2 fill a node, dp and pp cross the network
    expected = {
        "tp": "4 over nvlink",
        "cp": "2 over nvlink",
        "dp": "2 over network",
        "dp x cp": "2 over nvlink × 2 over network",
        "pp": "4 over network",
    }
    for name, crossing in expected.items():
        assert re.search(rf"</i>{name}</td><td>\d+</td><td>[^<]*</td><td>{crossing}</td>", section)
    ctx = context(evaluated)
    span = group_span(ctx.cluster, ctx.plan, Axis.DP)
    assert [t.name for t, f in zip(span.tiers, span.fan_in, strict=True) if f > 1] == ["network"]
    assert "rank 0&#x27;s pp group (4)" in section and "0, 16, 32, 48" in section
    assert "tp ×4" in section and "pp ×4" in section  # pills in the tier bands
    assert section.count('class="node"') == 8  # 8 nodes of 8 H100


def test_runner_ups_side_by_side_with_what_differs(planned: paraplan.Result) -> None:
    assert len(planned.alternatives) == 2
    section = report_html(planned).split('id="alternatives"')[1]
    best = planned.plan.model_dump()
    for alt in planned.alternatives:
        assert f"{alt.step_time_s:.4f} s" in section
        changed = [k for k in ("dp", "cp", "micro_batch", "zero") if alt.plan.model_dump()[k] != best[k]]
        assert changed
        for k in changed:
            assert f"{k} {best[k]} → {alt.plan.model_dump()[k]}" in section
    assert 'class="diff"' in section
    assert f"{planned.solver.status}, gap" in report_html(planned)


def test_user_and_result_text_is_escaped(evaluated: paraplan.Result) -> None:
    hostile = "<script>alert('x')</script> & \"quotes\""
    result = evaluated.model_copy(update={"explanation": [hostile], "version": "<b>1</b>"})
    page = report_html(result)
    assert "<script" not in page and "<b>1</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quotes&quot;" in page


def test_pooled_cluster_report_names_pools_and_the_inter_pool_link() -> None:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"pools": [{"preset": "dgx-h100", "nodes": 4}, {"preset": "dgx-a100-80gb", "nodes": 4}]},
        "job": {"seq_len": 4096, "global_batch": 512, "precision": "bf16"},
        "plan": {
            "dp": 32,
            "tp": 1,
            "pp": 2,
            "cp": 1,
            "vp": 4,
            "micro_batch": 1,
            "zero": 1,
            "recompute": "none",
            "layers_per_stage": [24, 8],
            "stage_pools": [0, 1],
        },
    }
    page = report_html(paraplan.evaluate(scenario))
    assert "pool 0 (dgx-h100)" in page and "pool 1 (dgx-a100-80gb)" in page
    assert "stage-to-stage links: inter-pool (0→1)" in page
    assert "stage 1 · 8 layers · none · pool 1" in page


def test_large_cluster_draws_the_nodes_of_far_apart_group_members() -> None:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-h100", "nodes": 128},
        "job": {"seq_len": 8192, "global_batch": 1024, "precision": "bf16"},
        "plan": {"dp": 64, "tp": 2, "pp": 8, "cp": 1, "micro_batch": 1, "zero": 1, "recompute": "none"},
    }
    section = report_html(paraplan.evaluate(scenario)).split('id="cluster"')[1]
    nodes = re.findall(r'class="node-name">node (\d+)<', section)
    assert len(nodes) <= 8 and "0" in nodes
    assert "16" in nodes  # pp members are tp x dp = 128 ranks = 16 nodes apart
    assert "more nodes" in section  # the others are elided, not drawn
    assert re.search(r"</i>pp</td><td>8</td><td>0, 128, 256, [^<]*</td><td>8 over network</td>", section)


# --------------------------------------------------------------------------- CLI


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_cli_plan_and_evaluate_write_the_report(tmp_path: Path) -> None:
    r = _cli("plan", str(ROOT / "examples" / "llama3-8b-h100.yaml"), "--report", str(tmp_path / "plan.html"))
    assert r.returncode == 0, r.stderr
    assert f"wrote {tmp_path / 'plan.html'}" in r.stderr
    page = (tmp_path / "plan.html").read_text(encoding="utf-8")
    assert page.count("<th>#") == 3  # --report lists 3 plans when --top is left at 1
    r = _cli("evaluate", str(EXAMPLE), "--json", "--report", str(tmp_path / "ev.html"))
    assert r.returncode == 0, r.stderr
    assert '"step_time_s"' in r.stdout and 'id="schedule"' in (tmp_path / "ev.html").read_text()


def test_cli_refuses_a_report_path_before_solving(tmp_path: Path) -> None:
    r = _cli("plan", str(EXAMPLE), "--report", str(tmp_path / "missing" / "plan.html"))
    assert r.returncode == 1 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = _cli("evaluate", str(EXAMPLE), "--report", str(tmp_path))
    assert r.returncode == 1 and "is a folder" in r.stderr


# --------------------------------------------------------------------------- Chromium


def _chromium() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.environ.get("PARAPLAN_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"PARAPLAN_REQUIRE_CHROMIUM=1 but {CHROMIUM} is missing (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")


def render(html_file: Path, png: Path, profile: Path, height: int = 3000) -> tuple[str, list[str]]:
    """Load ``html_file`` in headless Chromium: the DOM after rendering and its console lines
    (every console message, uncaught error and failed load logs one ``:CONSOLE`` line)."""
    r = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            f"--window-size=1240,{height}",
            f"--screenshot={png}",
            "--dump-dom",
            html_file.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, [line for line in r.stderr.splitlines() if ":CONSOLE" in line]


def test_console_errors_are_detected(tmp_path: Path) -> None:
    # the check below can fail: a page with a script error logs a console line
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p id=x>x</p><script>undefinedFunction()</script>")
    dom, console = render(bad, tmp_path / "bad.png", tmp_path / "profile", height=300)
    assert 'id="x"' in dom and any("undefinedFunction" in line for line in console)


def test_report_renders_in_headless_chromium(evaluated: paraplan.Result, tmp_path: Path) -> None:
    html_file = write_report(evaluated, tmp_path / "plan.html")
    png = tmp_path / "report.png"
    dom, console = render(html_file, png, tmp_path / "profile")
    assert console == []
    for section in SECTION_IDS:
        assert f'id="{section}"' in dom
    assert dom.count("<svg") >= 4 and dom.count('class="fwd"') == 256
    pil = pytest.importorskip("PIL.Image")
    with pil.open(png) as im:
        assert im.size == (1240, 3000)
        colours = {c for _, c in im.convert("RGB").getcolors(1 << 20)}
    # the schedule's forward and backward blues and the capacity red were painted
    for hex_ in ("7EA8E6", "2F5DA8", "C0392B"):
        assert tuple(int(hex_[i : i + 2], 16) for i in (0, 2, 4)) in colours


def main() -> None:
    """Rewrite benchmarks/results/report.png: the report of the 64-H100 quick-start plan."""
    result = paraplan.solve(ROOT / "examples" / "llama3-70b-64xh100.yaml", top=3, time_limit_s=60)
    tmp = ROOT / "benchmarks" / "results" / ".report-tmp"
    tmp.mkdir(exist_ok=True)
    try:
        html_file = write_report(result, tmp / "report.html")
        _, console = render(html_file, SCREENSHOT, tmp / "profile", height=2860)
        assert console == [], console
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {SCREENSHOT}")


if __name__ == "__main__":
    main()
