"""``report.html``: one self-contained page (no script, no network) a researcher can send on.

The order is the reader's: the title says staging or official; the headline paired result
comes first (mean paired delta with its interval, wins/losses/ties); then a per-task plot of
the paired deltas with task names and intervals; then the arms, the decisions (exclusions,
settlement), the conditions (epochs, executions, model roles), and the failures. Tables have
human headers; plots are inline SVG drawn here (a few simple charts do not justify a plotting
dependency, and the page must render offline). The charts live in
:mod:`ray_bench.reports.plots`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from ray_bench.ledger.rows import said_spend
from ray_bench.reports import cost, sections
from ray_bench.reports.build import Report
from ray_bench.reports.paired_section import interval
from ray_bench.reports.plots import delta_plot, failure_plot, pace_plot, reward_plot
from ray_bench.reports.stats import BOOTSTRAP_RESAMPLES, CONFIDENCE
from ray_bench.textsafe import html_text as escape  # controls and bidi too (issue 58)

__all__ = ["delta_plot", "failure_plot", "pace_plot", "render_html", "reward_plot"]

_STYLE = """body{font-family:system-ui,-apple-system,sans-serif;margin:24px auto;max-width:1040px;
color:#1d1d1f;padding:0 16px;line-height:1.45}
h1{font-size:26px;margin-bottom:4px}h2{font-size:19px;margin-top:30px;border-bottom:1px solid #ddd;
padding-bottom:4px}.badge{display:inline-block;font-size:13px;padding:2px 8px;border-radius:10px;
vertical-align:middle;margin-left:8px;color:#fff}.staging{background:#b26b00}.official{background:#1a7f37}
.status{color:#444}.headline{display:flex;flex-wrap:wrap;gap:14px;margin:14px 0}
.card{border:1px solid #d0d7de;border-radius:8px;padding:12px 16px;min-width:260px}
.card .big{font-size:28px;font-weight:600}.card .sub{color:#555;font-size:13px}
.pos{color:#1a7f37}.neg{color:#c62828}
figure{margin:10px 0;border:1px solid #e3e3e3;padding:6px;display:inline-block;max-width:100%}
figcaption{font-size:12px;color:#555}svg{max-width:100%;height:auto}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th{background:#f4f6f8;text-align:left}td,th{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}.note{color:#555;font-size:13px}
code{font-size:12px}"""


def _cell(value: Any, fmt: Callable[[Any], str] | None) -> tuple[str, bool]:
    if fmt is not None:  # a figure already shown (``≥ $0.0030``, :func:`_bounded`) is still a number
        shown = isinstance(value, str) and _SHOWN.fullmatch(value) is not None
        return fmt(value), isinstance(value, int | float) or shown
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return "-", True
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    if isinstance(value, float):
        return f"{value:.3f}", True
    return str(value), isinstance(value, int)


_SHOWN = re.compile(r"(≥ )?\$?[\d.]+|-")


def table(frame: pd.DataFrame, table_id: str, headers: dict[str, str],
          formats: Mapping[str, Callable[[Any], str]] | None = None) -> str:
    """A table with human headers, only the columns named, numbers right-aligned."""
    formats = formats or {}
    head = "".join(f"<th>{escape(h)}</th>" for h in headers.values())
    body = []
    for record in frame.to_dict("records"):
        cells = []
        for key in headers:
            text, numeric = _cell(record.get(key), formats.get(key))
            cells.append(f'<td{" class=num" if numeric else ""}>{escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _signed(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):+.3f}"


def _pct(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):.1%}"


def _usd(v: Any) -> str:
    if isinstance(v, str):  # already shown (:func:`_bounded`)
        return v
    return "-" if v is None or pd.isna(v) else f"${float(v):.4f}"


def _bounded(frame: pd.DataFrame, unknown: str, money: tuple[str, ...], counts: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with its sums as text, ``≥`` before each that holds a lower bound: an attempt cut
    mid-turn (``lower_bound_attempts``) in any sum, one of unknown cost (``unknown``) left out
    of the estimate."""
    out = frame.copy()
    if not len(out):
        return out
    least = [bool(n) for n in out.get("lower_bound_attempts", pd.Series(0, index=out.index))]
    left_out = [int(n) for n in out[unknown]]
    for column in counts:
        out[column] = [cost.at_least(_count(v), lb).replace(">= ", "≥ ") for v, lb in zip(out[column], least,
                                                                                            strict=True)]
    for column in money:  # sums of the known estimates: "unknown" when none is known, never $0
        out[column] = [said_spend(float(v), u, int(lb), ".4f", at_least="≥ ")
                       for v, lb, u in zip(out[column], least, left_out, strict=True)]
    return out


def _count(v: Any) -> str:
    return "-" if v is None or v is pd.NA or pd.isna(v) else str(int(v))


def _headline(report: Report) -> str:
    cards = []
    for d in report.deltas.itertuples():
        cls = "pos" if d.mean_delta > 0 else "neg" if d.mean_delta < 0 else ""
        interval = ("-" if pd.isna(d.ci_low) else f"{d.ci_low:+.3f} to {d.ci_high:+.3f}")
        cards.append(
            f'<div class="card headline-delta"><div class="sub">{escape(str(d.variant))} minus '
            f"{escape(report.baseline)}: mean paired delta in reward</div>"
            f'<div class="big {cls}">{_signed(d.mean_delta)}</div>'
            f'<div class="sub">{CONFIDENCE:.0%} interval {interval} over {d.tasks} tasks; '
            f"{d.wins} better, {d.losses} worse, {d.ties} tied</div></div>")
    for a in report.arms.itertuples():
        cards.append(
            f'<div class="card"><div class="sub">{escape(str(a.arm))}: solved (strict / headline)'
            f'</div><div class="big">{_pct(a.strict_rate)} / {_pct(a.headline_rate)}</div>'
            f'<div class="sub">{a.solved} solved of {a.cells} planned cells, {a.valid_rows} with '
            f"a valid row; mean reward {_cell(a.mean_reward, None)[0]}</div></div>")
    return '<div class="headline">' + "".join(cards) + "</div>"


ARM_HEADERS = {"arm": "Arm", "cells": "Planned cells (strict)", "valid_rows": "Valid rows (headline)",
               "missing": "Missing", "solved": "Solved", "mean_reward": "Mean reward",
               "strict_rate": "Strict solve rate", "headline_rate": "Headline solve rate",
               "invalid_attempts": "Invalid attempts", "attempts": "Attempts",
               "cost_usd": "Cost, estimated", "settled_usd": "Cost, settled",
               "unknown_cost_attempts": "Attempts of unknown cost",
               "lower_bound_attempts": "Usage a lower bound (cut mid-turn)"}
PAIRED_HEADERS = {"task": "Task", "variant": "Variant", "pairs": "Pairs", "baseline_reward": "Baseline reward",
                  "variant_reward": "Variant reward", "delta": "Delta", "ci_low": "Interval low",
                  "ci_high": "Interval high", "outcome": "Outcome"}
EPOCH_HEADERS = {"epoch": "Plan identity", "run_id": "Run", "suite": "Suite", "in_cohort": "In cohort",
                 "cells_planned": "Cells planned", "attempts": "Attempts",
                 "valid_attempts": "Valid attempts", "accepted_rows": "Accepted rows",
                 "first_start": "First start (UTC)", "last_finish": "Last finish (UTC)"}
USAGE_HEADERS = {"account": "Account", "arm": "Arm", "attempts": "Attempts",
                 "input_tokens": "Input tokens", "output_tokens": "Output tokens",
                 "cache_read_tokens": "Cache read tokens", "cache_write_tokens": "Cache write tokens",
                 "cost_usd": "Cost, estimated", "settled_usd": "Cost, settled",
                 "settled_attempts": "Settled", "estimated_attempts": "Estimated only",
                 "unknown_attempts": "Cost unknown", "lower_bound_attempts": "Usage a lower bound"}
FAILURE_HEADERS = {"failure_class": "Class", "attempts": "Attempts", "cells": "Cells",
                   "top_fingerprints": "Top fingerprints"}
FINGERPRINT_HEADERS = {"failure_class": "Class", "fingerprint": "Fingerprint", "attempts": "Attempts",
                       "cells": "Cells", "message": "Last message"}


def _epochs(report: Report) -> pd.DataFrame:
    frame = report.epochs.copy()
    if len(frame):
        frame["epoch"] = [str(e)[:19] + "..." for e in frame.epoch]
        frame["first_start"] = [sections.stamp(t) for t in frame.first_start]
        frame["last_finish"] = [sections.stamp(t) for t in frame.last_finish]
    return frame


def _plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("`", "")


def _or_none(frame: pd.DataFrame, html: str, none: str) -> str:
    return html if len(frame) else f'<p class="note">{escape(none)}</p>'


STATS_HEADERS = {"variant": "Variant", "benchmark": "Benchmark", "task": "Task", "tasks": "Tasks",
                 "pairs": "Pairs", "paired_delta": "Paired delta", "interval": "95% interval", "test": "Test",
                 "variant_only": "Variant alone solved", "baseline_only": "Baseline alone solved",
                 "p_value": "p", "p_holm": "p (Holm)"}
PASS_HEADERS = {"arm": "Arm", "k": "k", "tasks": "Tasks", "pass_at_k": "pass@k", "pass_hat_k": "pass^k"}


def _p(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):.3f}"


def _paired_stats(report: Report) -> list[str]:
    stats = report.paired_stats
    if stats is None:
        return []
    frame = stats.stats.copy()
    frame["interval"] = [interval(r) for r in frame.itertuples()]
    overall = frame[frame.scope == "overall"].drop(columns=["task"])
    per_task = frame[frame.scope == "task"].drop(columns=["benchmark", "tasks", "p_holm"])
    numbers = {"paired_delta": _signed, "p_value": _p, "p_holm": _p}
    return [
        "<h2>Paired statistics</h2>",
        f'<p class="claim"><strong>What the data can claim.</strong> {escape(stats.claim)}</p>',
        '<p class="note">Overall: tasks are the units (mean of the task deltas, a bootstrap resampling '
        "tasks, exact McNemar over tasks when each has one pass/fail pair, else a sign-flip permutation "
        "test over the task deltas); p Holm-adjusted across the rows. Per task: bootstrap and test over "
        "the task's pairs (a pair is one repetition in both arms), p unadjusted.</p>",
        table(overall, "paired-overall", {k: v for k, v in STATS_HEADERS.items() if k in overall}, numbers),
        table(per_task, "paired-tasks", {k: v for k, v in STATS_HEADERS.items() if k in per_task}, numbers),
        '<p class="note">pass@k: at least one of k trials solves the task (Chen et al. 2021); pass^k: all '
        "k do (tau-bench); mean over tasks.</p>",
        table(stats.pass_k, "pass-k", PASS_HEADERS, {"pass_at_k": _p, "pass_hat_k": _p}),
    ]


def render_html(report: Report) -> str:
    money = {"cost_usd": _usd, "settled_usd": _usd, "estimated_usd": _usd}
    fingerprints = report.fingerprints.copy()
    if len(fingerprints):
        fingerprints["message"] = [str(m)[:160] for m in fingerprints.message]
    parts = [
        f'<h1>{escape(report.title.rsplit(" (", 1)[0])}'
        f'<span class="badge {report.category}">{report.category}</span></h1>',
        f'<p class="status">{escape(_plain(sections.status_line(report.category, report.promotions)))}</p>',
        f'<p class="note">{len(report.rows)} of {report.cells_planned} planned cells have an accepted '
        f"valid row; {len(report.attempts)} attempts in all; {len(report.exclusions)} cells excluded. "
        "Rows are the earliest valid attempt per cell, never the best; strict rates count every "
        "planned cell, headline rates only cells with a valid row. Runs: "
        f"{escape(', '.join(report.runs))}.</p>",
        "<h2>Headline</h2>",
        _headline(report),
        delta_plot(report),
        f'<p class="note">Per task: the mean paired delta (variant minus baseline reward over the '
        f"task's pairs, a pair being one repetition with a row in both arms), with a {CONFIDENCE:.0%} "
        f"bootstrap interval over those pairs ({BOOTSTRAP_RESAMPLES} resamples, fixed seed): the "
        "figures of the paired statistics below. A dot without whiskers had one pair, or pairs that "
        "all agree.</p>",
        *_paired_stats(report),
        "<h2>Arms</h2>",
        table(_bounded(report.arms, "unknown_cost_attempts", ("cost_usd",), ()), "arms", ARM_HEADERS, money),
        reward_plot(report),
        "<h2>Per task</h2>",
        table(report.paired, "paired", PAIRED_HEADERS,
              {"delta": _signed, "ci_low": _signed, "ci_high": _signed}),
        "<h2>Exclusions</h2>",
        _or_none(report.exclusions, table(report.exclusions, "exclusions", sections.EXCLUSION_HEADERS),
                 "None: every planned cell counts."),
        "<h2>Settlement</h2>",
        _or_none(report.settlement, table(report.settlement, "settlement", sections.SETTLEMENT_HEADERS,
                                          money),
                 "None recorded: costs are the agents' own estimates."),
        "<h2>Model roles</h2>",
        table(report.roles, "roles", sections.ROLE_HEADERS),
        "<h2>Epochs and executions</h2>",
        table(_epochs(report), "epochs", EPOCH_HEADERS),
        _or_none(report.executions, table(report.executions, "executions", sections.EXECUTION_HEADERS),
                 "Not executed yet."),
        pace_plot(report),
        "<h2>Usage and cost</h2>",
        '<p class="note">Input tokens are fresh input; cache reads and writes are counted apart. '
        "Cost: settled where the latest settlement matched the provider's charge, else the agent's "
        "estimate; unknown where an attempt left no usage or no cost (never counted as $0). An attempt "
        "whose CLI was cut mid-turn counts what had arrived: its usage is a lower bound, and a sum it "
        "is in reads ≥"
        + (f". Attempts by cost: {escape(cost.split_line(report.usage))}.</p>" if len(report.usage) else ".</p>"),
        table(_bounded(report.usage, "unknown_attempts", ("cost_usd",), cost.TOKEN_COLUMNS), "usage",
              USAGE_HEADERS, {**money, **dict.fromkeys(cost.TOKEN_COLUMNS, str)}),
        "<h2>Failures</h2>",
        failure_plot(report),
        _or_none(report.failures, table(report.failures, "failures", FAILURE_HEADERS), "No failed attempt."),
        _or_none(fingerprints, table(fingerprints, "fingerprints", FINGERPRINT_HEADERS), ""),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(report.title)}</title><style>{_STYLE}</style></head>"
        "<body>" + "\n".join(parts) + "</body></html>\n"
    )
