"""The real driver on a virtual clock: faults one at a time, with what each must do."""

from __future__ import annotations

from typing import Any

from ray_bench.sim.driven import Faults, run_driven
from ray_bench.sim.workload import build_workload, parse_spec

SPEC: dict[str, Any] = {
    "seed": 3,
    "suite": {"tasks": 6, "arms": ["baseline", "mcp"], "reps": 2},
    "durations": {"lognormal": {"median_s": 600, "sigma": 0.5}},
    "history": {"noise_sigma": 0.3},
    "accounts": [{"name": "a", "max_concurrent": 3}, {"name": "b", "max_concurrent": 2}],
    "policies": ["adaptive"],
}


def drive(faults: Faults, **patch: Any) -> Any:
    spec = parse_spec({**SPEC, **patch})
    return run_driven(spec, build_workload(spec), faults, max_attempts=1)


def test_clean_run() -> None:
    r = drive(Faults())
    assert (r.valid_cells, r.attempts, r.violations, r.stopped) == (24, 24, [], None)


def test_a_lost_runner_uses_up_no_attempt_and_opens_no_circuit() -> None:
    # max_attempts=1: had the lost attempts counted, their cells would have failed
    r = drive(Faults(runner_deaths=(100.0, 200.0, 300.0)))
    assert r.attempts > 24
    assert (r.valid_cells, r.failed_cells, r.stopped, r.violations) == (24, 0, None, [])


def test_node_loss_sends_nothing_to_the_dead_node_and_cleans_its_sandboxes() -> None:
    r = drive(Faults(node_losses=((100.0, 5000.0),)))
    assert r.attempts > 24 and r.valid_cells == 24 and r.violations == []


def test_driver_killed_twice_resumes_on_the_same_ledger() -> None:
    r = drive(Faults(driver_kills=(300.0, 1200.0)))
    assert r.resumes == 2
    assert (r.valid_cells, r.duplicate_rows, r.violations) == (24, 0, [])
    # the stale attempts are closed on the driver's clock, not the host's (the makespan
    # was the real date minus the virtual epoch, ~3 years, and differed run to run)
    assert r.makespan_s < 6 * 3600


def test_storm_auth_loss_slow_sandboxes_and_clock_jumps() -> None:
    events = [{"kind": "storm", "account": "a", "start_h": 0.1, "length_min": 20, "retry_after_s": 120},
              {"kind": "auth_loss", "account": "b", "at_h": 0.3}]
    r = drive(Faults(clock_jumps=((500.0, 900.0),), slow_create=(0.0, 2000.0, 120.0)), events=events)
    assert (r.valid_cells, r.duplicate_rows, r.violations) == (24, 0, [])
    assert r.wasted_attempts >= 1


def test_an_operator_hold_stops_starts_on_its_account_until_released() -> None:
    # b is held from 30 to 45 min of a ~1 h run (24 cells of 10-45 min on 5 slots): nothing
    # starts on it then, its cells go to a meanwhile, and it takes cells again once released
    events = [{"kind": "hold", "account": "b", "start_h": 0.5, "length_min": 15}]
    r = drive(Faults(), events=events)
    assert (r.valid_cells, r.duplicate_rows, r.violations, r.stopped) == (24, 0, [], None)
    epoch = min(row.started_at for row in r.rows)  # the first starts are at the clock's 0
    on_b = sorted(row.started_at - epoch for row in r.rows if row.account == "b")
    assert not [t for t in on_b if 30 * 60 <= t < 45 * 60], on_b
    assert any(t < 30 * 60 for t in on_b) and any(t >= 45 * 60 for t in on_b), on_b
    assert r.wasted_attempts == 0  # a hold is the operator's, not a failure: nothing is spent on it


def _overlap(rows: list[Any]) -> int:
    """The most attempts of ``rows`` running at one instant."""
    edges = sorted([(r.started_at, 1) for r in rows] + [(r.finished_at, -1) for r in rows], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_cells_judged_on_a_one_slot_account_never_run_together_and_a_killed_driver_keeps_none() -> None:
    # mcp's verifiers take their key from judge (one slot, no cells of its own to speak of): its
    # cells hold a lease there for their life, so they run one at a time on a and b's five slots,
    # the baseline's beside them; a driver killed twice leaves no judge lease behind (or the
    # rest of mcp's cells could never start)
    accounts = [*SPEC["accounts"], {"name": "judge", "max_concurrent": 1}]
    r = drive(Faults(driver_kills=(300.0, 1200.0)), accounts=accounts,
              judges=[{"arm": "mcp", "account": "judge"}])
    assert (r.valid_cells, r.duplicate_rows, r.violations, r.resumes) == (24, 0, [], 2)
    judged = [row for row in r.rows if row.arm == "mcp" and row.account != "judge"]
    assert judged and _overlap(judged + [row for row in r.rows if row.account == "judge"]) == 1
    free = drive(Faults(), accounts=accounts)  # the same cells without a judge: mcp's overlap
    assert _overlap([row for row in free.rows if row.arm == "mcp"]) > 1
    # mcp's cells waiting on the judge do not hold the baseline's back (they were first in line:
    # its last cell ended at 1.97 h of the judged run, against 0.54 h once they are passed over)
    judged_run = drive(Faults(), accounts=accounts, judges=[{"arm": "mcp", "account": "judge"}])

    def baseline_done(rows: list[Any]) -> float:
        return max(r.finished_at for r in rows if r.arm == "baseline") - min(r.started_at for r in rows)

    assert baseline_done(judged_run.rows) <= baseline_done(free.rows)


def test_a_run_whose_every_cell_waits_on_a_held_judge_stops_instead_of_waiting_for_ever() -> None:
    accounts = [*SPEC["accounts"], {"name": "judge", "max_concurrent": 1}]
    r = drive(Faults(), accounts=accounts, judges=[{"arm": a, "account": "judge"} for a in ("baseline", "mcp")],
              events=[{"kind": "hold", "account": "judge", "start_h": 0, "length_min": 6000}])
    # (the first cell may start before the hold does; none after it)
    assert r.stopped == "accounts" and r.attempts <= 1, r.detail
    assert "the waiting cells' judge accounts: judge held" in r.detail
