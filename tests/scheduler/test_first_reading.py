"""The resource supervisors' first reading comes before the first start (issue 29 item 10): a
node already under its reserve when ``execute`` begins takes no cell at all."""

from __future__ import annotations

from pathlib import Path

from support.virtual_run import Run

from ray_bench.runroot import LEDGER_FILE
from ray_bench.sandboxes.supervisor import ResourceHalt


class PressedNode:
    """A supervision whose one node is under its reserve from its first reading on; it notes how
    many attempts had started each time it was read."""

    def __init__(self, run: Run, run_id: str) -> None:
        self.run = run
        self.run_id = run_id
        self.started_at_reading: list[int] = []

    @property
    def node_count(self) -> int:
        return 1

    def check(self) -> list[ResourceHalt]:
        started = self.run.attempts() if (self.run.root / LEDGER_FILE).exists() else []
        self.started_at_reading.append(len(started))
        return [ResourceHalt(self.run_id, "available memory 100 MiB is under the reserve of 512 MiB",
                             100, 512, "2026-12-01T00:00:00Z", node="n1")]

    def close(self) -> None:
        return None


def test_a_node_under_its_reserve_at_the_start_takes_no_cell(tmp_path: Path) -> None:
    run = Run(tmp_path)
    supervision = PressedNode(run, run.plan.run_id)
    # supervisor_every_sec is an hour on this virtual clock that starts at 0: the first reading
    # must not wait for it
    outcome = run.session(supervision=supervision)
    assert outcome.stopped == "halt" and outcome.exit_code == 1
    assert outcome.attempts_run == 0
    assert run.attempts() == []
    assert supervision.started_at_reading and supervision.started_at_reading[0] == 0
    assert (run.root / "resource-halt.json").exists()
