"""A digest of each fuzz seed's whole ledger (every event in order, every attempt row and its
terminal record), so that a rewrite of the driver can show it leaves the ledgers identical event
for event: run it before and after, compare the files.

What differs between two runs of one seed is normalised away: the events' real-time ``ts``, the
driver's pid in heartbeats, wall times read from the real clock (a lost runner's summary stamps
``time.time()``: any time past :data:`REAL_AFTER`, which the virtual clock's epoch of 1.7e9 does
not reach in a fuzz run's hours) and the run's temporary directory in paths. Every other
field, virtual times included, is digested as stored.

``python tests/support/ledger_digest.py FIRST LAST OUT`` writes ``seed digest violations`` lines for the
seeds FIRST..LAST-1 to OUT, each with the number of invariants it broke (run it with PYTHONPATH at the code under test).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from ray_bench.ledger.store import Ledger
from ray_bench.sim import driven
from ray_bench.sim.fuzz import run_seed

#: Unix seconds (2025-06-15) past which a time came from the real clock, not the virtual one.
REAL_AFTER = 1.75e9
_TMP = re.compile(r"/[^\s\"']*rb-sim-[A-Za-z0-9_]+")


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: 0 if k == "pid" else _normalised(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    if isinstance(value, str):
        return _TMP.sub("<tmp>", value)
    if isinstance(value, float) and value > REAL_AFTER:
        return "<wall>"
    return value


def ledger_lines(run_root: Path) -> list[str]:
    """The ledger as canonical lines: the events in order, then the attempts with their records."""
    with Ledger.reading(run_root) as ledger:
        lines = [json.dumps(_normalised([e.kind, e.attempt_id, e.cell_id, e.data])) for e in ledger.events()]
        summaries = {attempt_id: summary.model_dump(mode="json") for attempt_id, summary in ledger.summaries()}
        for row in ledger.attempts():
            lines.append(json.dumps(_normalised([vars(row), summaries.get(row.attempt_id)]), default=str))
    return lines


def seed_digest(seed: int) -> tuple[str, int]:
    """Run the seed and digest its ledger (read just before the run's directory is removed);
    with the number of invariants the seed broke."""
    seen: list[str] = []
    result = driven._result

    def reading(plan: Any, workload: Any, run_root: Path, *args: Any) -> Any:
        seen.extend(ledger_lines(run_root))
        return result(plan, workload, run_root, *args)

    driven._result = reading  # type: ignore[assignment]
    try:
        outcome = run_seed(seed)
    finally:
        driven._result = result  # type: ignore[assignment]
    return hashlib.sha256("\n".join(seen).encode()).hexdigest(), len(outcome.violations)


def main(argv: list[str]) -> int:
    first, last, out = int(argv[0]), int(argv[1]), Path(argv[2])
    with out.open("w") as file:
        for seed in range(first, last):
            digest, violations = seed_digest(seed)
            file.write(f"{seed} {digest} {violations}\n")
            file.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
