"""``report.html``: one self-contained page (no script, no network) with inline SVG plots:
pace over time from accepted rows' finish times, reward by arm, paired deltas and failure
classes. Plots are drawn here rather than with a plotting library: four simple charts do not
justify a heavy dependency, and the page must render offline."""

from __future__ import annotations

from html import escape

import pandas as pd

from ray_bench.reports.build import Report, render_markdown

WIDTH, HEIGHT, PAD = 640, 260, 44
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _frame(plot_id: str, title: str, body: list[str]) -> str:
    return (
        f'<figure><svg id="{plot_id}" class="plot" xmlns="http://www.w3.org/2000/svg" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>'
        + "".join(body)
        + f"</svg><figcaption>{escape(title)}</figcaption></figure>"
    )


def _axes(y_max: float, y_label: str, x_label: str) -> list[str]:
    x0, y0, x1, y1 = PAD, HEIGHT - PAD, WIDTH - 12, 16
    out = [
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/>',
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>',
        f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 8}" font-size="11" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text x="12" y="{(y0 + y1) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {(y0 + y1) / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        value = y_max * i / 4
        y = y0 - (y0 - y1) * i / 4
        out.append(
            f'<text x="{x0 - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{value:.3g}</text>"
        )
    return out


def _empty(plot_id: str, title: str, what: str) -> str:
    return _frame(
        plot_id,
        title,
        [
            f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
            f'text-anchor="middle" font-size="13">{escape(what)}</text>'
        ],
    )


def pace_plot(report: Report) -> str:
    """Cumulative accepted rows by finish time, one line per arm."""
    title = "Pace: accepted rows over time (finish times of valid rows)"
    rows = report.rows.dropna(subset=["finished_at"])
    if not len(rows):
        return _empty("plot-pace", title, "no valid rows yet")
    start = float(report.attempts.started_at.min())
    end = max(float(rows.finished_at.max()), start + 1e-9)
    span = end - start
    per_arm = {
        arm: sorted(float(t) for t in group.finished_at) for arm, group in rows.groupby("arm")
    }
    y_max = max(len(v) for v in per_arm.values())
    x0, y0, x1, y1 = PAD, HEIGHT - PAD, WIDTH - 12, 16
    body = _axes(
        y_max, "accepted rows", f"minutes since the first start ({span / 60:.1f} min in all)"
    )
    for index, (arm, times) in enumerate(sorted(per_arm.items())):
        color = COLORS[index % len(COLORS)]
        points: list[tuple[float, float]] = [(x0, y0)]
        for count, t in enumerate(times, 1):
            x = x0 + (x1 - x0) * (t - start) / span
            y = y0 - (y0 - y1) * count / y_max
            points += [(x, points[-1][1]), (x, y)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        body.append(
            f'<polyline class="series" data-arm="{escape(arm)}" fill="none" stroke="{color}" '
            f'stroke-width="2" points="{path}"/>'
        )
        body.append(
            f'<text x="{x0 + 8}" y="{y1 + 14 * (index + 1)}" font-size="11" fill="{color}">'
            f"{escape(arm)}: {len(times)} rows</text>"
        )
    return _frame("plot-pace", title, body)


def reward_plot(report: Report) -> str:
    """Mean reward over accepted rows per arm, with the strict and headline solve rates."""
    title = "Reward by arm (bar: mean reward of valid rows; ticks: strict / headline solve rate)"
    arms = report.arms
    if not len(arms):
        return _empty("plot-reward", title, "no arms")
    x0, y0, x1, y1 = PAD, HEIGHT - PAD, WIDTH - 12, 16
    body = _axes(1.0, "reward / rate", "arm")
    slot = (x1 - x0) / len(arms)
    for index, a in enumerate(arms.itertuples()):
        color = COLORS[index % len(COLORS)]
        left = x0 + slot * index + slot * 0.2
        width = slot * 0.6
        mean = 0.0 if pd.isna(a.mean_reward) else float(a.mean_reward)
        height = (y0 - y1) * mean
        body.append(
            f'<rect class="bar" data-arm="{escape(str(a.arm))}" '
            f'x="{left:.1f}" y="{y0 - height:.1f}" '
            f'width="{width:.1f}" height="{max(height, 0.5):.1f}" fill="{color}"/>'
        )
        for rate, dash in ((a.strict_rate, "4 2"), (a.headline_rate, "")):
            if not pd.isna(rate):
                y = y0 - (y0 - y1) * float(rate)
                body.append(
                    f'<line class="rate" x1="{left - 4:.1f}" x2="{left + width + 4:.1f}" '
                    f'y1="{y:.1f}" '
                    f'y2="{y:.1f}" stroke="#000" stroke-dasharray="{dash}"/>'
                )
        body.append(
            f'<text x="{left + width / 2:.1f}" y="{y0 + 14}" font-size="11" text-anchor="middle">'
            f"{escape(str(a.arm))} ({a.valid_rows}/{a.cells})</text>"
        )
        body.append(
            f'<text x="{left + width / 2:.1f}" y="{y0 - height - 4:.1f}" font-size="10" '
            f'text-anchor="middle">{mean:.2f}</text>'
        )
    return _frame("plot-reward", title, body)


def delta_plot(report: Report) -> str:
    """Per task paired deltas (dots) and the mean with its bootstrap interval, per variant."""
    title = (
        f"Paired deltas per task (variant - {report.baseline}); bar: mean and bootstrap interval"
    )
    if not len(report.paired):
        return _empty("plot-deltas", title, "no task with rows in both arms")
    x0, y0, x1, y1 = PAD, HEIGHT - PAD, WIDTH - 12, 16
    lim = max(1e-9, float(report.paired.delta.abs().max()))

    def y_of(v: float) -> float:
        return (y0 + y1) / 2 - (y0 - y1) / 2 * v / lim

    body = [
        f'<line class="axis" x1="{x0}" y1="{y_of(0):.1f}" x2="{x1}" y2="{y_of(0):.1f}" '
        'stroke="#999"/>',
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>',
        f'<text x="{x0 - 4}" y="{y1 + 4}" font-size="10" text-anchor="end">+{lim:.2g}</text>',
        f'<text x="{x0 - 4}" y="{y0 + 4}" font-size="10" text-anchor="end">-{lim:.2g}</text>',
    ]
    variants = list(report.deltas.variant)
    slot = (x1 - x0) / max(1, len(variants))
    for index, d in enumerate(report.deltas.itertuples()):
        center = x0 + slot * (index + 0.5)
        mine = report.paired[report.paired.variant == d.variant].reset_index(drop=True)
        for j, p in enumerate(mine.itertuples()):
            x = center - slot * 0.3 + slot * 0.6 * (j + 0.5) / max(1, len(mine))
            body.append(
                f'<circle class="task-delta" cx="{x:.1f}" cy="{y_of(float(p.delta)):.1f}" r="3" '
                f'fill="{COLORS[index % len(COLORS)]}"><title>{escape(str(p.task))}: '
                f"{p.delta:+.2f}</title></circle>"
            )
        if not pd.isna(d.ci_low):
            body.append(
                f'<line class="ci" x1="{center:.1f}" x2="{center:.1f}" y1="{y_of(d.ci_low):.1f}" '
                f'y2="{y_of(d.ci_high):.1f}" stroke="#000" stroke-width="3"/>'
            )
            body.append(
                f'<rect class="mean" x="{center - 8:.1f}" y="{y_of(d.mean_delta) - 2:.1f}" '
                f'width="16" '
                f'height="4" fill="#000"/>'
            )
        body.append(
            f'<text x="{center:.1f}" y="{y0 + 14}" font-size="11" text-anchor="middle">'
            f"{escape(str(d.variant))}: {d.wins}W {d.losses}L {d.ties}T</text>"
        )
    return _frame("plot-deltas", title, body)


def failure_plot(report: Report) -> str:
    title = "Failure classes (failed attempts)"
    failures = report.failures
    if not len(failures):
        return _empty("plot-failures", title, "no failed attempts")
    x0, x1, top = 110, WIDTH - 120, 16
    most = int(failures.attempts.max())
    row_h = min(28.0, (HEIGHT - PAD - top) / len(failures))
    body: list[str] = []
    for index, f in enumerate(failures.itertuples()):
        y = top + row_h * index
        width = (x1 - x0) * int(f.attempts) / most
        body.append(
            f'<text x="{x0 - 6}" y="{y + row_h * 0.65:.1f}" font-size="11" text-anchor="end">'
            f"{escape(str(f.failure_class))}</text>"
        )
        body.append(
            f'<rect class="bar" data-class="{escape(str(f.failure_class))}" '
            f'x="{x0}" y="{y + 2:.1f}" '
            f'width="{max(width, 1):.1f}" height="{row_h - 4:.1f}" fill="#d62728"/>'
        )
        body.append(
            f'<text x="{x0 + width + 4:.1f}" y="{y + row_h * 0.65:.1f}" font-size="11">'
            f"{f.attempts} ({f.cells} cells)</text>"
        )
    return _frame("plot-failures", title, body)


_STYLE = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1000px;color:#222}
figure{display:inline-block;margin:8px;border:1px solid #ddd;padding:6px}
figcaption{font-size:12px;color:#555}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}
pre{white-space:pre-wrap;font-size:12px}"""


def _table(frame: pd.DataFrame, table_id: str) -> str:
    return str(
        frame.to_html(
            index=False,
            table_id=table_id,
            na_rep="-",
            float_format=lambda v: f"{v:.3f}",
            escape=True,
            border=0,
        )
    )


def render_html(report: Report) -> str:
    sections = [
        f"<h1>Report: {escape(report.run_id)}</h1>",
        f"<p>{len(report.rows)} of {report.cells_planned} planned cells have a valid row; "
        f"{len(report.attempts)} attempts in all. Rebuilt from accepted rows only.</p>",
        '<div class="plots">',
        pace_plot(report),
        reward_plot(report),
        delta_plot(report),
        failure_plot(report),
        "</div>",
        "<h2>Epochs</h2>",
        _table(report.epochs, "epochs"),
        "<h2>Arms</h2>",
        _table(report.arms, "arms"),
        "<h2>Paired deltas</h2>",
        _table(report.deltas, "deltas"),
        _table(report.paired, "paired"),
        "<h2>Usage and cost</h2>",
        _table(report.usage, "usage"),
        "<h2>Failure classes</h2>",
        _table(report.failures, "failures"),
        _table(report.fingerprints, "fingerprints"),
        "<h2>Markdown</h2>",
        f"<pre>{escape(render_markdown(report))}</pre>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ray-bench report {escape(report.run_id)}</title><style>{_STYLE}</style></head>"
        "<body>" + "\n".join(sections) + "</body></html>\n"
    )
