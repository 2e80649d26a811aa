"""The report's charts as inline SVG: paired deltas per task (names and intervals), reward by
arm, pace from accepted rows' finish times, and failure classes. Drawn here rather than with a
plotting library: a few simple charts do not justify a heavy dependency, and the page must
render offline."""

from __future__ import annotations

import pandas as pd

from ray_bench.reports.build import PAIRED_CSV, Report
from ray_bench.textsafe import html_text as escape  # controls and bidi too (issue 58)

WIDTH, HEIGHT, PAD = 640, 260, 44
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _frame(plot_id: str, title: str, body: list[str], width: int = WIDTH, height: int = HEIGHT) -> str:
    return (
        f'<figure><svg id="{plot_id}" class="plot" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
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
        path = " ".join(_drawn([(f"{x:.1f}", f"{y:.1f}") for x, y in points]))
        body.append(
            f'<polyline class="series" data-arm="{escape(arm)}" fill="none" stroke="{color}" '
            f'stroke-width="2" points="{path}"/>'
        )
        body.append(
            f'<text x="{x0 + 8}" y="{y1 + 14 * (index + 1)}" font-size="11" fill="{color}">'
            f"{escape(arm)}: {len(times)} rows</text>"
        )
    return _frame("plot-pace", title, body)


#: Past this many points a pace line keeps, of the points drawn at one x, the first and the last:
#: the same line to the tenth of a pixel, where 100,000 rows drew 200,000 points (2.3 MB of the
#: page, issue 57). Under it, every point as before.
PACE_POINTS = 4000


def _drawn(points: list[tuple[str, str]]) -> list[str]:
    if len(points) <= PACE_POINTS:
        return [f"{x},{y}" for x, y in points]
    kept = [points[0]]
    for here, after in zip(points[1:], [*points[2:], ("", "")], strict=True):
        # a point between two of the same x lies on their vertical segment (y only grows)
        if not (here[0] == kept[-1][0] == after[0]):
            kept.append(here)
    return [f"{x},{y}" for x, y in kept]


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


#: Task labels longer than this are cut (the full name is in the mark's tooltip and the table).
LABEL_CHARS = 30
ROW_H = 22
#: Tasks drawn per variant at most: the ones with the largest |delta|. 5,000 tasks drawn each on
#: a row made a 110,000-pixel-tall SVG; 50 rows are about 1,100 pixels, a screen or two, and the
#: rest are one line that says how many and where every task is (report-paired.csv).
DRAWN_TASKS = 50


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def delta_plot(report: Report) -> str:
    """One row per task (and variant): the paired delta with its interval over repetitions,
    sorted by delta, then the mean over tasks with its bootstrap interval. Beyond
    :data:`DRAWN_TASKS` tasks of a variant, the largest |delta| and a line for the rest."""
    title = f"Paired delta per task (variant - {report.baseline}, mean reward over accepted rows)"
    if not len(report.paired):
        return _empty("plot-deltas", title, "no task with rows in both arms")
    several = len(report.variants) > 1
    rows = _drawn_tasks(report.paired).sort_values(["variant", "delta", "task"]).reset_index(drop=True)
    bound = [rows.delta.abs().max(), rows.ci_low.abs().max(), rows.ci_high.abs().max(),
             report.deltas.ci_low.abs().max(), report.deltas.ci_high.abs().max()]
    lim = max(1.0, *(float(b) for b in bound if not pd.isna(b)))
    width, left, right, top = 760, 230, 64, 28  # right: a column for the values
    left_out = report.paired.groupby("variant").size() - rows.groupby("variant").size()
    notes = int((left_out > 0).sum())
    height = top + ROW_H * (len(rows) + notes + len(report.deltas) + 1) + 36
    x0, x1 = left, width - right

    def x_of(v: float) -> float:
        return x0 + (x1 - x0) * (v + lim) / (2 * lim)

    bottom = height - 36
    body = [f'<line class="axis" x1="{x_of(0):.1f}" y1="{top - 6}" x2="{x_of(0):.1f}" y2="{bottom}" '
            'stroke="#888" stroke-dasharray="3 3"/>',
            f'<line class="axis" x1="{x0}" y1="{bottom}" x2="{x1}" y2="{bottom}" stroke="#333"/>']
    for tick in (-lim, -lim / 2, 0.0, lim / 2, lim):
        body.append(f'<text x="{x_of(tick):.1f}" y="{bottom + 14}" font-size="11" text-anchor="middle">'
                    f"{tick:+.2g}</text>")
    body.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{height - 6}" font-size="11" text-anchor="middle">'
                f"worse than {escape(report.baseline)}   ←   delta in reward   →   better</text>")

    def row(y: float, label: str, value: float, low: float, high: float, color: str, cls: str,
            tip: str, data: str, bold: bool = False) -> None:
        weight = ' font-weight="600"' if bold else ""
        body.append(f"<g><title>{escape(tip)}</title>"
                    f'<text x="{x0 - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end"{weight}>'
                    f"{escape(_short(label))}</text></g>")
        if not pd.isna(low) and high > low:
            body.append(f'<line class="ci" x1="{x_of(low):.1f}" x2="{x_of(high):.1f}" y1="{y:.1f}" '
                        f'y2="{y:.1f}" stroke="{color}" stroke-width="2"/>')
        # the figures drawn, exact, for a reader (or a test) to check against the tables and CSV
        body.append(f'<circle class="{cls}" cx="{x_of(value):.1f}" cy="{y:.1f}" r="{5 if bold else 4}" '
                    f'fill="{color}" {data} data-delta="{value!r}" data-ci-low="{low!r}" '
                    f'data-ci-high="{high!r}"><title>{escape(tip)}</title></circle>')
        body.append(f'<text x="{width - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
                    f'fill="#555"{weight}>{value:+.2f}</text>')

    def note(y: float, variant: str) -> None:
        count, which = int(left_out[variant]), f" of {variant}" if several else ""
        most = float(rows.delta[rows.variant == variant].abs().min())
        text = f"⋯ {count:,} more tasks{which} with |delta| ≤ {most:.3f}, not drawn: every task is in {PAIRED_CSV}"
        body.append(f'<text class="left-out" x="12" y="{y + 4:.1f}" font-size="12" fill="#555" '
                    f'data-variant="{escape(variant)}" data-tasks="{count}">{escape(text)}</text>')

    y = float(top)
    noted: set[str] = set()
    for p in rows.itertuples():
        if left_out[p.variant] > 0 and p.variant not in noted and p.delta >= 0:
            # where the tasks left out sit in the order: between the largest losses and gains
            note(y, str(p.variant))
            noted.add(str(p.variant))
            y += ROW_H
        color = "#1a7f37" if p.delta > 0 else "#c62828" if p.delta < 0 else "#666"
        label = f"{p.task} ({p.variant})" if several else str(p.task)
        interval = "" if pd.isna(p.ci_low) else f", interval {p.ci_low:+.3f} to {p.ci_high:+.3f}"
        row(y, label, float(p.delta), float(p.ci_low), float(p.ci_high), color, "task-delta",
            f"{p.task} ({p.variant}): {p.delta:+.3f}{interval}; {p.pairs} pairs",
            f'data-task="{escape(str(p.task))}" data-variant="{escape(str(p.variant))}"')
        y += ROW_H
        last = p.Index + 1 == len(rows) or rows.variant[p.Index + 1] != p.variant
        if last and left_out[p.variant] > 0 and p.variant not in noted:  # every task drawn lost
            note(y, str(p.variant))
            noted.add(str(p.variant))
            y += ROW_H
    y += ROW_H / 2
    for d in report.deltas.itertuples():
        if pd.isna(d.mean_delta):
            continue
        row(y, f"mean over tasks ({d.variant})" if several else "mean over tasks", float(d.mean_delta),
            float(d.ci_low), float(d.ci_high), "#000", "mean-delta",
            f"{d.variant}: mean {d.mean_delta:+.3f}, interval {d.ci_low:+.3f} to {d.ci_high:+.3f}, "
            f"{d.wins} better / {d.losses} worse / {d.ties} tied", f'data-variant="{escape(str(d.variant))}"',
            bold=True)
        y += ROW_H
    return _frame("plot-deltas", title, body, width, height)


def _drawn_tasks(paired: pd.DataFrame) -> pd.DataFrame:
    """The tasks the delta plot draws: per variant, the :data:`DRAWN_TASKS` with the largest
    |delta| (ties by task name); all of them when there are no more."""
    if paired.groupby("variant").size().max() <= DRAWN_TASKS:
        return paired
    ranked = paired.assign(_size=paired.delta.abs()).sort_values(
        ["variant", "_size", "task"], ascending=[True, False, True], na_position="last")
    return ranked.groupby("variant", sort=False).head(DRAWN_TASKS).drop(columns="_size")


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


