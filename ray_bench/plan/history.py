"""Expected durations and costs from earlier runs: ``plan --history runs/`` (and a gap-fill's ``--runs``).

A task's expected duration is the mean time of the valid attempts that ran its exact content
(the task checksum) in earlier ledgers with an arm of this plan's configuration (its digest,
:mod:`ray_bench.plan.arm_identity`: an arm of the same name with another agent or model is
another arm), averaged per arm first so that one arm with many repetitions does not outweigh
the other. A task no arm of the plan has run has no expected duration (unknown, not borrowed
from another configuration). Rows of a run root without a readable plan are not used: what
they ran is unknown. Cell order uses it (longest first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from ray_bench.errors import LedgerError, UserInputError
from ray_bench.ledger.store import LEDGER_FILE, RUN, AttemptRow, Ledger
from ray_bench.plan.arm_identity import run_arm_digests
from ray_bench.runroot import RunPaths


def history_roots(paths: Iterable[Path]) -> list[Path]:
    """Each path is a run root (it holds a ledger) or a directory of run roots; a run named twice
    (``--history runs/`` and a gap-fill's ``--runs runs/r1``) is read once."""
    roots: list[Path] = []
    for path in paths:
        if RunPaths(path).ledger.is_file():
            roots.append(path)
        elif path.is_dir():
            roots.extend(sorted(p.parent for p in path.glob(f"*/{LEDGER_FILE}")))
        else:
            raise UserInputError("not a run root or a directory of run roots", where=str(path),
                                 fix="pass runs/ or runs/<run_id>")
    unique: dict[Path, Path] = {}
    for root in roots:
        unique.setdefault(root.resolve(), root)
    return list(unique.values())


def history_key(task_checksum: str, arm_digest: str) -> str:
    """The key of one (task content, arm configuration) in the durations ``plan`` is given."""
    return f"{task_checksum}@{arm_digest}"


def expected_value(history: Mapping[str, float], task_id: str, task_checksum: str,
                   arm_digests: Iterable[str]) -> float | None:
    """A task's expected duration (or cost) for a plan of these arms, from ``history`` (seconds
    or USD per :func:`history_key`): by task id (given through the API), else the mean over the
    plan's arms that earlier runs ran (None when none did)."""
    if task_id in history:
        return history[task_id]
    means = [history[k] for k in (history_key(task_checksum, d) for d in arm_digests) if k in history]
    return sum(means) / len(means) if means else None


def _valid_rows(paths: Iterable[Path]) -> Iterator[tuple[str, AttemptRow]]:
    """(arm digest, row) of every valid finished attempt in the ledgers under ``paths``."""
    for root in history_roots(paths):
        digests = run_arm_digests(root)
        try:
            rows = Ledger.read_attempts(root)
        except LedgerError as exc:  # bad input here, not a broken run: one line, exit 2
            detail = exc.what if isinstance(exc, UserInputError) else str(exc)
            raise UserInputError(f"the ledger of this earlier run cannot be read ({detail})", where=str(root),
                                 fix="leave this run out of --history / --runs") from None
        for row in rows:
            digest = digests.get(row.arm)
            if digest is not None and row.valid and row.finished_at is not None:
                yield digest, row


def durations_from_runs(paths: Iterable[Path]) -> dict[str, float]:
    """:func:`history_key` -> mean seconds, from the valid attempts in the ledgers under ``paths``."""
    return _means(paths, lambda row: None if row.finished_at is None else row.finished_at - row.started_at)


def costs_from_runs(paths: Iterable[Path]) -> dict[str, float]:
    """:func:`history_key` -> mean USD, from the valid attempts in the ledgers under ``paths``
    that recorded a cost (an unknown cost is left out, never read as 0): what a cell of that task
    and arm costs, which the receipt's estimate runs the dollar limits on (issue 56)."""
    return _means(paths, lambda row: row.cost_usd)


def _means(paths: Iterable[Path], value: Callable[[AttemptRow], float | None]) -> dict[str, float]:
    """:func:`history_key` -> the mean ``value`` of the valid finished agent runs (a regrade ran only
    a verifier: its seconds and cost say nothing of a cell's) under ``paths`` that have one."""
    per_key: dict[str, list[float]] = {}
    for digest, row in _valid_rows(paths):
        if row.kind == RUN and row.finished_at is not None and row.finished_at >= row.started_at \
                and (found := value(row)) is not None:
            per_key.setdefault(history_key(row.task_checksum, digest), []).append(found)
    return {key: sum(values) / len(values) for key, values in per_key.items()}


def rewards_from_runs(paths: Iterable[Path]) -> dict[tuple[str, str, int], float]:
    """(run root, :func:`history_key`, repetition) -> reward of the cell's earliest valid attempt
    in any run under ``paths`` (the root: the run holding it): the paired rewards ``plan
    --history`` gives the receipt's power. A cell is its content, so the runs of a lineage (a run,
    its gap-fills and one-arm top-ups) hold one row of it, chosen as the report's accepted-row
    rule does; a pair's two rows may be in two runs."""
    out: dict[tuple[str, int], tuple[float, str, float]] = {}
    for root in history_roots(paths):
        for digest, row in _valid_rows([root]):
            key = (history_key(row.task_checksum, digest), row.rep)
            if row.reward is not None and (key not in out or row.started_at < out[key][0]):
                out[key] = (row.started_at, str(root), row.reward)
    return {(root, key, rep): reward for (key, rep), (_, root, reward) in out.items()}


def paired_deltas(rewards: Mapping[tuple[str, str, int], float], tasks: Iterable[str], baseline: str,
                  variants: Iterable[str]) -> list[tuple[str, int, float]]:
    """(task checksum, repetition, variant - baseline) of every task and repetition that has
    both, in whichever of the lineage's runs each row is (issue 56: pairing within one run lost
    a one-arm top-up's pairs)."""
    by_cell = {(key, rep): reward for (_, key, rep), reward in rewards.items()}
    tasks = set(tasks)
    variants = list(variants)
    out: list[tuple[str, int, float]] = []
    for (key, rep), base in sorted(by_cell.items()):
        checksum, _, digest = key.partition("@")
        if digest != baseline or checksum not in tasks:
            continue
        for variant in variants:
            other = by_cell.get((history_key(checksum, variant), rep))
            if other is not None:
                out.append((checksum, rep, other - base))
    return out
