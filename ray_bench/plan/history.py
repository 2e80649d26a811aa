"""Expected durations from earlier runs: ``plan --history runs/`` (and a gap-fill's ``--runs``).

A task's expected duration is the mean time of the valid attempts that ran its exact content
(the task checksum) in earlier ledgers, whatever the arm, averaged per arm first so that one
arm with many repetitions does not outweigh the other. Cell order uses it (longest first).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ray_bench.errors import LedgerError, UserInputError
from ray_bench.ledger.store import LEDGER_FILE, Ledger


def history_roots(paths: Iterable[Path]) -> list[Path]:
    """Each path is a run root (it holds a ledger) or a directory of run roots."""
    roots: list[Path] = []
    for path in paths:
        if (path / LEDGER_FILE).is_file():
            roots.append(path)
        elif path.is_dir():
            roots.extend(sorted(p.parent for p in path.glob(f"*/{LEDGER_FILE}")))
        else:
            raise UserInputError("not a run root or a directory of run roots", where=str(path),
                                 fix="pass runs/ or runs/<run_id>")
    return roots


def durations_from_runs(paths: Iterable[Path]) -> dict[str, float]:
    """Task checksum -> expected seconds, from the valid attempts in the ledgers under ``paths``."""
    per_arm: dict[tuple[str, str], list[float]] = {}
    for root in history_roots(paths):
        try:
            ledger = Ledger.open_readonly(root)
        except LedgerError as exc:  # bad input here, not a broken run: one line, exit 2
            detail = exc.what if isinstance(exc, UserInputError) else str(exc)
            raise UserInputError(f"the ledger of this earlier run cannot be read ({detail})", where=str(root),
                                 fix="leave this run out of --history / --runs") from None
        try:
            rows = ledger.attempts()
        finally:
            ledger.close()
        for row in rows:
            if row.valid and row.finished_at is not None and row.finished_at >= row.started_at:
                per_arm.setdefault((row.task_checksum, row.arm), []).append(row.finished_at - row.started_at)
    by_task: dict[str, list[float]] = {}
    for (checksum, _), seconds in per_arm.items():
        by_task.setdefault(checksum, []).append(sum(seconds) / len(seconds))
    return {checksum: sum(means) / len(means) for checksum, means in by_task.items()}
