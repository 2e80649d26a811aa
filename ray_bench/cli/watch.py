"""`ray-bench status runs/ID --watch`: a live view rebuilt from the ledger every few seconds.

Pace is observed valid rows per minute (never scheduler state); the finish estimate comes
from that pace only and says so."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ray_bench.api import run_status
from ray_bench.ledger.store import LEDGER_FILE, Ledger
from ray_bench.plan.store import PLAN_FILE, load_plan_file

WINDOWS = {"5m": 300.0, "15m": 900.0, "60m": 3600.0}


def snapshot(run_root: Path, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    status = run_status(run_root)
    plan, _ = load_plan_file(run_root / PLAN_FILE)
    attempts = []
    if (run_root / LEDGER_FILE).exists():
        ledger = Ledger.open_readonly(run_root)
        try:
            attempts = ledger.attempts()
        finally:
            ledger.close()
    valid_times = sorted(a.finished_at for a in attempts if a.valid and a.finished_at)
    pace = {w: sum(1 for t in valid_times if t >= now - secs) / (secs / 60) for w, secs in WINDOWS.items()}
    remaining = status["counts"]["pending"] + status["counts"]["running"]
    eta = remaining / pace["15m"] * 60 if pace["15m"] > 0 else None
    inflight = Counter(a.account for a in attempts if not a.terminal)
    limits = {a.name: a.limits.max_concurrent for a in plan.accounts}
    failures = [a for a in attempts if a.status == "finished" and not a.valid][-5:]
    return {"status": status, "pace": pace, "remaining": remaining, "eta_sec": eta,
            "accounts": {name: (inflight.get(name, 0), limit) for name, limit in limits.items()},
            "recent_failures": [(a.task, a.arm, a.rep, a.failure_class, a.account) for a in failures]}


def render(view: dict[str, Any]) -> Group:
    status = view["status"]
    c = status["counts"]
    done = c["valid"] + c["failed"]
    head = Text(f"{status['run_id']} ({status['state']}): {done}/{status['cells']} done - "
                f"{c['valid']} valid, {c['failed']} failed, {c['running']} running, {c['pending']} pending")
    pace = view["pace"]
    eta = view["eta_sec"]
    pace_line = Text(f"observed pace: {pace['5m']:.1f} / {pace['15m']:.1f} / {pace['60m']:.1f} rows/min "
                     f"(5m/15m/60m); " + (f"finish in ~{eta / 60:.0f} min at the observed 15m pace"
                                          if eta is not None else "no finish estimate until rows arrive"))
    accounts = Table(title="accounts", show_edge=False)
    for col in ("account", "in flight", "limit"):
        accounts.add_column(col)
    for name, (inflight, limit) in view["accounts"].items():
        accounts.add_row(name, str(inflight), str(limit))
    failures = Table(title="recent failures", show_edge=False)
    for col in ("task", "arm", "rep", "class", "account"):
        failures.add_column(col)
    for row in view["recent_failures"]:
        failures.add_row(*(str(x) for x in row))
    parts: list[Any] = [head, ProgressBar(total=max(1, status["cells"]), completed=done), pace_line, accounts]
    if view["recent_failures"]:
        parts.append(failures)
    if status.get("resume_action"):
        parts.append(Text(f"first safe resume action: {status['resume_action']}"))
    return Group(*parts)


def watch_run(run_root: Path, *, every: float = 2.0, iterations: int | None = None) -> None:
    count = 0
    with Live(render(snapshot(run_root)), refresh_per_second=4) as live:
        while iterations is None or count < iterations:
            view = snapshot(run_root)
            live.update(render(view))
            count += 1
            if view["status"]["state"] == "finished" and iterations is None:
                break
            time.sleep(every)
