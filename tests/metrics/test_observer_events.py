"""The metrics observer is a fold over one stream: the driver's ledger appends (heard as they
are committed) and its live attempt and tick events, through a single ``on_event``."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from support.virtual_run import CELLS, Run

from ray_bench.ledger import events as ev
from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.observer import MetricsObserver
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted, Observed, Observers, Tick


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Observed] = []

    def on_event(self, event: Observed) -> None:
        self.seen.append(event)


def _sample(exporter: MetricsExporter, prefix: str) -> float:
    for line in generate_latest(exporter.registry).decode().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{prefix} not exported")


def test_a_session_reaches_the_observers_as_one_stream_of_events(tmp_path: Path) -> None:
    run = Run(tmp_path)
    exporter = MetricsExporter(run.plan.run_id, tmp_path / "state", arms=[a.name for a in run.plan.arms])
    recorder = Recorder()
    base = run.driver()
    driver = Driver(run.plan, base.identity, run.root, run.pool, observer=Observers(recorder, MetricsObserver(
        exporter, run.plan, run.root)), gate=CoreGate(run.plan.accounts, clock=run.clock.now, cores=run.cores),
        supervision=base.supervision, options=base.options, clock=run.clock)
    outcome = driver.run()
    assert outcome.counts["valid"] == CELLS

    seen = recorder.seen
    stored = [e.event for e in run.ledger().events()]
    assert [e for e in seen if isinstance(e, ev.EventPayload)] == stored  # every append, in order, once
    assert isinstance(seen[0], ev.RunStarted) and isinstance(seen[-1], ev.RunFinished)
    started = [e for e in seen if isinstance(e, AttemptStarted)]
    finished = [e for e in seen if isinstance(e, AttemptFinished)]
    assert len(started) == len(finished) == len(run.attempts()) >= CELLS
    assert any(isinstance(e, Tick) for e in seen)
    assert seen[-1].stopped is None and seen[-1].counts == outcome.counts

    run_id = run.plan.run_id
    assert _sample(exporter, f'raybench_cells{{run="{run_id}",state="valid"}}') == CELLS
    assert _sample(exporter, f'raybench_run_finished{{run="{run_id}"}}') == 1.0
