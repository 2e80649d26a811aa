"""Accepted rows: the earliest valid attempt per (cohort, cell), never the best one."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from ray_bench.ledger.store import LEDGER_FILE, REGRADE, AttemptRow, CostRow, Ledger
from ray_bench.runroot import RunPaths


def accepted_rows(attempts: Iterable[AttemptRow], cohort: set[str] | None = None) -> dict[str, AttemptRow]:
    """cell id -> its accepted row. ``cohort`` is the set of compatible epochs (all if None).
    The rule: among valid attempts of the cohort, the one that *started* first (ties broken by
    epoch, then attempt id). Deterministic, and blind to rewards. The one implementation of the
    rule: reports, gaps, reruns and the pairing guard all come here.

    A regrade (``kind`` ``regrade``) is never a row of its own: it re-scores the row it graded.
    The accepted row's latest valid regrade gives it its reward and task checksum (the tests
    it was graded by), and names itself in ``regraded_by``; the row stays the source attempt."""
    chosen: dict[str, AttemptRow] = {}
    regrades: dict[str, AttemptRow] = {}
    for row in attempts:
        if not row.valid or (cohort is not None and row.epoch not in cohort):
            continue
        if row.kind == REGRADE:
            if row.source_attempt is not None:
                last = regrades.get(row.source_attempt)
                if last is None or start_order(row) > start_order(last):
                    regrades[row.source_attempt] = row
            continue
        best = chosen.get(row.cell_id)
        if best is None or start_order(row) < start_order(best):
            chosen[row.cell_id] = row
    for cell_id, row in chosen.items():
        regrade = regrades.get(row.attempt_id)
        if regrade is not None:
            chosen[cell_id] = replace(row, reward=regrade.reward, task_checksum=regrade.task_checksum,
                                      regraded_by=regrade.attempt_id)
    return chosen


def known_spend(attempts: Iterable[AttemptRow | CostRow], settled: Mapping[str, float] | None = None,
                plain: Iterable[float] = ()) -> tuple[float, int]:
    """(USD of the attempts whose cost is known, attempts of unknown cost): the first is a lower
    bound whenever the second is above 0, and every reader that shows a spend says so beside it
    (an unknown cost is never read as $0). ``settled``: attempt id -> the provider's charge, from
    the latest settlement (``Settlement.charged``), which counts instead of the estimate."""
    known: list[float] = list(plain)  # known costs of attempts not in ``attempts`` and not settled
    unknown = 0
    for row in attempts:
        cost = (settled or {}).get(row.attempt_id, row.cost_usd)
        if cost is None:
            unknown += 1
        else:
            known.append(cost)
    # fsum: the sum whatever the rows' order (status reads them in two orders: issue 57)
    return math.fsum(known), unknown


def lower_bound_count(attempts: Iterable[AttemptRow | CostRow], settled: Mapping[str, float] | None = None) -> int:
    """Attempts whose known cost is only a lower bound (:attr:`AttemptRow.lower_bound`): their
    cost counts in :func:`known_spend` in full, and the sum is then at least that. A settled
    attempt's charge is exact."""
    return sum(1 for row in attempts if row.lower_bound and row.cost_usd is not None
               and row.attempt_id not in (settled or {}))


def said_spend(usd: float, unknown: int, lower_bound: int = 0, spec: str = ".2f", *, unit: str = "$",
               at_least: str = "at least ") -> str:
    """A spend as every reader shows it: ``unknown`` when nothing of it is known (attempts of
    unknown cost and no known cost above $0: never "$0.00"), ``at least $X`` when it leaves such
    attempts out or holds one cut mid-turn, else ``$X``. Tables pass ``unit=""`` and
    ``at_least=">= "``; :func:`unknown_cost_note` says beside it why."""
    if unknown and not usd:
        return "unknown"
    figure = f"{unit}{format(usd, spec)}"
    return f"{at_least}{figure}" if unknown or lower_bound else figure


def unknown_cost_note(unknown: int, lower_bound: int = 0) -> str:
    """The words beside a lower-bound spend: ``""`` when every cost is known and exact."""
    parts = [f"{unknown} attempt{'s' if unknown != 1 else ''} of unknown cost"] if unknown else []
    if lower_bound:
        parts.append(f"{lower_bound} attempt{'s' if lower_bound != 1 else ''} cut mid-turn, "
                     "whose usage is a lower bound")
    return f" ({'; '.join(parts)})" if parts else ""


def start_order(row: AttemptRow) -> tuple[float, str, str]:
    return (row.started_at, row.epoch, row.attempt_id)


def valid_rows_by_task_arm(run_root: Path, arm_digests: Callable[[Path], dict[str, str]]
                           ) -> dict[tuple[str, str, str, str], int]:
    """(task, task checksum, arm name, arm digest) -> number of accepted rows in one run root (or
    every run root below it). ``arm_digests`` maps a run root to its arms' digests
    (ray_bench.plan.arm_identity.run_arm_digests); a row whose arm has none is left out: what
    it ran is unknown."""
    roots = [run_root] if RunPaths(run_root).ledger.is_file() else sorted(
        p.parent for p in run_root.glob(f"*/{LEDGER_FILE}"))
    counts: dict[tuple[str, str, str, str], int] = {}
    for root in roots:
        digests = arm_digests(root)
        for row in accepted_rows(Ledger.read_attempts(root)).values():
            digest = digests.get(row.arm)
            if digest is None:
                continue
            key = (row.task, row.task_checksum, row.arm, digest)
            counts[key] = counts.get(key, 0) + 1
    return counts
