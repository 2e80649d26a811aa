"""report.html in a real headless browser (Debian's ``chromium``): the page is self-contained
and its plots render with real geometry. Under CI=true a missing chromium fails the test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_ledgers import first_run

from ray_bench.reports.build import write_report

#: Appended to a copy of the page (never to the report itself): measures every plot and its
#: marks after layout and writes the numbers into the DOM for --dump-dom.
_MEASURE = """<script>
const out = {};
for (const svg of document.querySelectorAll("svg.plot")) {
  const box = svg.getBoundingClientRect();
  const sel = "polyline.series, rect.bar, circle.task-delta, line.ci";
  const marks = [...svg.querySelectorAll(sel)];
  const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; });
  out[svg.id] = {width: box.width, height: box.height, marks: marks.length, drawn: drawn.length};
}
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
    write_report(root)
    page = (root / "report.html").read_text()
    # self-contained: nothing to fetch (the SVG namespace is a name, not a request)
    assert re.findall(r"""(?:src|href)\s*=|@import|url\(""", page) == []
    assert "<script" not in page

    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _MEASURE + "</body>"))
    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    plots = json.loads(found.group(1).replace("&quot;", '"'))
    assert set(plots) == {"plot-pace", "plot-reward", "plot-deltas", "plot-failures"}
    for name, box in plots.items():
        assert box["width"] > 300 and box["height"] > 200, name
        assert box["marks"] > 0 and box["drawn"] == box["marks"], (name, box)
    assert plots["plot-pace"]["marks"] == 2  # one line per arm
    assert plots["plot-reward"]["marks"] == 2  # one bar per arm
    assert plots["plot-deltas"]["marks"] == 3 + 1  # three tasks with both arms, one interval
    assert plots["plot-failures"]["marks"] == 3  # tool, evaluator, executor

    shot = tmp_path / "report.png"
    _run(
        browser,
        tmp_path / "profile-shot",
        f"--screenshot={shot}",
        "--window-size=1100,1400",
        (root / "report.html").as_uri(),
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    keep = os.environ.get("RAY_BENCH_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
