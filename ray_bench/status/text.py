"""Status in words: the lines ``status`` prints and ``watch`` writes when not on a terminal."""

from __future__ import annotations

import time

from ray_bench.clock import human_span
from ray_bench.ledger.rows import said_spend, unknown_cost_note
from ray_bench.metrics.pace import PaceSnapshot
from ray_bench.status.read import RunStatus


def headline(s: RunStatus) -> str:
    c = s.counts
    return (f"run {s.run_id} ({s.state}, {s.category}): {s.cells} cells: {c['valid']} valid rows "
            f"({s.solved} solved), {c['running']} running, {c['pending']} pending, {c['failed']} failed"
            + (f", {s.excluded} excluded" if s.excluded else ""))


def pace_line(p: PaceSnapshot) -> str:
    """``pace 6.0 rows/min from 12 rows in 2 min (15m window); finish in ~3 min; deadline ...``"""
    if p.estimate is None:
        line = f"pace: {p.basis()}"
    else:
        line = f"pace {p.estimate.rows_per_minute:.2f} rows/min {p.basis()}"
        if p.finish_estimate_seconds is not None and p.remaining_cells:
            line += f"; finish in ~{human_span(p.finish_estimate_seconds)} at that pace"
    if p.deadline is not None:
        left = p.deadline - p.now
        if left <= 0:
            line += f"; the deadline passed {human_span(-left)} ago with {p.remaining_cells} cells left"
        elif p.required_rows_per_minute is not None:
            line += f"; deadline in {human_span(left)} needs {p.required_rows_per_minute:.2f} rows/min"
            if p.deadline_gap_rows is not None:
                line += (f": {p.deadline_gap_rows} rows short at this pace" if p.deadline_gap_rows
                         else ": on track")
    return line


def status_lines(s: RunStatus) -> list[str]:
    lines = [headline(s)]
    if s.promotion is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.promotion.at))
        lines.append(f"official: promoted by {s.promotion.by} at {when} UTC: {s.promotion.reason}")
    if s.demotion is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.demotion.at))
        lines.append(f"staging again: demoted by {s.demotion.by} at {when} UTC: {s.demotion.reason}")
    if s.failures:
        lines.append("failed attempts by class: " + ", ".join(f"{k} {v}" for k, v in sorted(s.failures.items())))
    if s.spend_usd or s.unknown_cost:  # a lower bound beside the attempts it leaves out or under-counts
        settled = (f"; settled by the provider's charges for {s.settled_attempts} of {s.attempts} attempts, "
                   f"estimated ${s.estimated_usd:.4f}") if s.settled_attempts and s.estimated_usd is not None else ""
        lines.append(f"spend: {said_spend(s.spend_usd, s.unknown_cost, s.lower_bound_cost)}"
                     f"{unknown_cost_note(s.unknown_cost, s.lower_bound_cost)}{settled}")
    if s.reason:
        when = f" (ended {_clock(s.ended_at)})" if s.ended_at and s.state != "stopped" else ""
        lines.append(f"{'last stop' if s.state in ('paused', 'stopped') else 'outcome'}: {s.reason}{when}")
    if s.pace is not None and (s.state == "running" or s.pace.estimate is not None):
        lines.append(pace_line(s.pace))
    lines.extend(s.notes)
    lines.extend(f"account {a.line()}" for a in s.accounts or [])
    if s.next_action:
        lines.append(f"next: {s.next_action}" + (f"  ({s.next_action_why})" if s.next_action_why else ""))
    elif s.next_action_why:
        lines.append(f"next: {s.next_action_why}")
    return lines


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))
