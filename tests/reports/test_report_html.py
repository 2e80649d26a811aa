"""report.html in a real headless browser (Debian's ``chromium``): the page is self-contained,
reads top-down (staging/official title, headline paired result, per-task plot with names and
intervals, human headers, decisions and conditions), and its plots render with real geometry.
Under CI=true a missing chromium fails the test. The screenshot is kept under
``test-artifacts/`` (or $RAY_BENCH_TEST_ARTIFACTS) for a human to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_ledgers import first_run

from ray_bench.evidence.decisions import record_exclusion
from ray_bench.evidence.rows import load_epoch
from ray_bench.evidence.settle import settle_run
from ray_bench.reports.build import write_report

ARTIFACTS = Path(os.environ.get("RAY_BENCH_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts")

#: Appended to a copy of the page (never to the report itself): measures every plot and its
#: marks after layout and writes the numbers into the DOM for --dump-dom.
_MEASURE = """<script>
const out = {};
for (const svg of document.querySelectorAll("svg.plot")) {
  const box = svg.getBoundingClientRect();
  const sel = "polyline.series, rect.bar, circle.task-delta, circle.mean-delta, line.ci";
  const marks = [...svg.querySelectorAll(sel)];
  const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; });
  const labels = [...svg.querySelectorAll("text")].map(t => t.textContent);
  out[svg.id] = {width: box.width, height: box.height, marks: marks.length, drawn: drawn.length,
                 labels: labels};
}
out.pageWidth = document.documentElement.scrollWidth;
out.viewWidth = window.innerWidth;
out.headings = [...document.querySelectorAll("h1, h2")].map(h => h.textContent);
out.headers = [...document.querySelectorAll("#arms th")].map(h => h.textContent);
const pre = document.createElement("pre");
pre.id = "measure";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"chromium is required under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def _run(browser: str, profile: Path, *args: str) -> str:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_report_html_renders_its_plots_offline(tmp_path: Path) -> None:
    browser = _chromium()
    root = first_run(tmp_path)
    record_exclusion(root, "count-words/mcp/1", "task broken for this arm", by="ana")
    export = tmp_path / "usage.csv"  # the provider billed the first ten requests so far
    export.write_text("request_id,cost_usd\n" + "".join(f"req_{a.attempt_id},0.012\n" for a in
                                                       load_epoch(root).attempts[:10]))
    settle_run(root, export, by="fin")
    write_report(root)
    page = (root / "report.html").read_text()
    # self-contained: nothing to fetch (the SVG namespace is a name, not a request)
    assert re.findall(r"""(?:src|href)\s*=|@import|url\(""", page) == []
    assert "<script" not in page
    # no raw dataframe dump and no markdown pasted at the bottom
    assert "mean_reward" not in page and "True" not in page and "| ---" not in page

    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _MEASURE + "</body>"))
    dom = _run(browser, tmp_path / "profile-dom", "--window-size=1100,1400", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    measured = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    headings = measured.pop("headings")
    assert headings[0] == "Report: r1staging" and headings[1] == "Headline"
    assert {"Exclusions", "Settlement", "Model roles", "Epochs and executions"} <= set(headings)
    assert measured.pop("headers")[:3] == ["Arm", "Planned cells (strict)", "Valid rows (headline)"]
    assert measured.pop("pageWidth") <= measured.pop("viewWidth")  # nothing wider than the page
    plots = measured
    assert set(plots) == {"plot-pace", "plot-reward", "plot-deltas", "plot-failures"}
    for name, box in plots.items():
        assert box["width"] > 300 and box["height"] > 150, name
        assert box["marks"] > 0 and box["drawn"] == box["marks"], (name, box)
    assert plots["plot-pace"]["marks"] == 2  # one line per arm
    assert plots["plot-reward"]["marks"] == 2  # one bar per arm
    # three tasks with rows in both arms: a dot each, an interval for hello-world (two
    # repetitions with different rewards), and the mean over tasks with its interval
    assert plots["plot-deltas"]["marks"] == 3 + 1 + 1 + 1
    assert {"hello-world", "sum-list", "fizzbuzz", "mean over tasks"} <= set(plots["plot-deltas"]["labels"])
    assert plots["plot-failures"]["marks"] == 3  # tool, evaluator, executor

    shot = tmp_path / "report.png"
    _run(
        browser,
        tmp_path / "profile-shot",
        f"--screenshot={shot}",
        "--window-size=1100,2600",
        (root / "report.html").as_uri(),
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "report-html.png")
    shutil.copy(root / "report.html", ARTIFACTS / "report.html")


def test_a_pace_line_of_many_rows_keeps_the_ends_of_each_vertical_step_and_a_short_one_every_point() -> None:
    """Issue 57: 100,000 rows drew 200,000 points; the line is the same to the tenth of a pixel."""
    from ray_bench.reports.plots import PACE_POINTS, _drawn

    xs = [f"{44 + i // 50 / 10:.1f}" for i in range(2 * PACE_POINTS)]  # 50 rows finish at each x
    points = [("44.0", "216.0")]
    for n, x in enumerate(xs, 1):
        points += [(x, points[-1][1]), (x, f"{216 - 200 * n / len(xs):.1f}")]
    kept = [tuple(p.split(",")) for p in _drawn(points)]
    assert kept[0] == points[0] and kept[-1] == points[-1] and len(kept) < len(points) / 20
    # every point dropped lies on the vertical segment between the kept points of its x
    by_x: dict[str, list[float]] = {}
    for x, y in kept:
        by_x.setdefault(x, []).append(float(y))
    for x, y in points:
        assert min(by_x[x]) <= float(y) <= max(by_x[x])
    short = points[:PACE_POINTS]
    assert _drawn(short) == [f"{x},{y}" for x, y in short]


def test_a_delta_plot_of_thousands_of_tasks_draws_the_largest_deltas_and_names_the_rest() -> None:
    """5,000 tasks drawn each on a row made a 110,000-pixel-tall SVG."""
    import math
    from types import SimpleNamespace
    from typing import cast

    import pandas as pd

    from ray_bench.reports.build import PAIRED_CSV, Report
    from ray_bench.reports.plots import DRAWN_TASKS, ROW_H, delta_plot

    tasks = [f"task-{i:04d}" for i in range(5000)]
    paired = pd.DataFrame([{"task": t, "variant": v, "pairs": 10, "delta": round(math.sin(i * k), 3),
                            "ci_low": round(math.sin(i * k), 3) - 0.1, "ci_high": round(math.sin(i * k), 3) + 0.1}
                           for v, k in (("mcp", 1.0), ("tools", 0.37)) for i, t in enumerate(tasks)])
    deltas = pd.DataFrame([{"variant": v, "tasks": 5000, "mean_delta": 0.01, "wins": 2500, "losses": 2400,
                            "ties": 100, "ci_low": -0.01, "ci_high": 0.03} for v in ("mcp", "tools")])
    report = cast(Report, SimpleNamespace(paired=paired, deltas=deltas, variants=["mcp", "tools"],
                                          baseline="baseline"))
    svg = delta_plot(report)
    height = int(re.search(r'height="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert height < ROW_H * (2 * DRAWN_TASKS + 8) + 64
    for variant in ("mcp", "tools"):
        drawn = set(re.findall(rf'data-task="([^"]+)" data-variant="{variant}"', svg))
        mine = paired[paired.variant == variant]
        largest = mine.assign(size=mine.delta.abs()).sort_values(["size", "task"], ascending=[False, True])
        assert drawn == set(largest.task.head(DRAWN_TASKS))
        (note,) = re.findall(rf'<text class="left-out"[^>]*data-variant="{variant}" data-tasks="(\d+)">([^<]+)<', svg)
        assert note[0] == str(5000 - DRAWN_TASKS) and f"{5000 - DRAWN_TASKS:,} more tasks of {variant}" in note[1]
        assert PAIRED_CSV in note[1]
    assert svg.count('class="mean-delta"') == 2
    # a small suite: every task, no line for the rest
    few = cast(Report, SimpleNamespace(paired=paired[paired.variant == "mcp"].head(DRAWN_TASKS),
                                       deltas=deltas.head(1), variants=["mcp"], baseline="baseline"))
    small = delta_plot(few)
    assert small.count('class="task-delta"') == DRAWN_TASKS and "left-out" not in small
