"""What `status --watch` prints, from the view before and the view now (no Ray, no ledger)."""

from __future__ import annotations

import time
from pathlib import Path

from ray_bench.accounts.status import AccountStatus
from ray_bench.metrics.pace import pace_snapshot
from ray_bench.status.read import DriverView, RunStatus
from ray_bench.status.watchlines import (
    AccountMark,
    WatchView,
    awaits_start,
    changed_lines,
    end_lines,
    never_started,
    waiting_line,
)

T0 = 1_800_000_000.0


def _status(*, state: str = "running", valid: int = 0, now: float = T0, notes: tuple[str, ...] = (),
            reason: str | None = None, next_action: str | None = None) -> RunStatus:
    finished = [T0 - 600 + 20 * i for i in range(valid)]
    pace = pace_snapshot(finished, now=now, started_at=T0 - 600, remaining_cells=32 - valid, deadline=None)
    return RunStatus(run_id="r1", identity="x", run_root=Path("runs/r1"), cells=32, state=state,  # type: ignore[arg-type]
                     counts={"pending": 30 - valid, "running": 2, "valid": valid, "failed": 0}, solved=valid,
                     attempts=valid + 2, failures={}, spend_usd=0.0, reason=reason, ended_at=None,
                     next_action=next_action, next_action_why=None, pause_requested=False,
                     driver=DriverView(True, 1, now, 0.0), pace=pace, notes=list(notes))


def _account(name: str, state: str, *, now: float, until: float | None = None, error: str = "") -> AccountStatus:
    # what accounts_state gives: cooling_until = now + cooldown_left, rounded to 0.1 s
    return AccountStatus(name=name, state=state, source="state root", inflight=0, limit=3, tokens=1.0,
                         cooldown_left_sec=round(until - now) if until else 0,
                         cooling_until=round(now + (until - now), 1) if until else None, window_used=0,
                         window_usd=0.0, spent_usd=0.0, budget_usd=None, last_error=error,
                         recommended_parallelism=3, route="", hold=None, login_expires=None,
                         login_expiring_within_h=None)


def _view(status: RunStatus, now: float, *accounts: AccountStatus) -> WatchView:
    return WatchView(now, status, {a.name: (0, a.limit) for a in accounts},
                     tuple(AccountMark.of(a) for a in accounts), [])


def _body(lines: list[str]) -> list[str]:
    return [line.split(" | ", 1)[1] for line in lines]


def test_a_progress_line_is_printed_once_while_only_the_pace_moves() -> None:
    before = _view(_status(valid=5, now=T0), T0)
    first = changed_lines(None, before)
    assert len(first) == 1 and "5 valid rows" in first[0] and "pace" in first[0]
    # the pace's "in 10 min" grows every refresh: the 2-4 copies of each progress line
    later = [_view(_status(valid=5, now=T0 + dt), T0 + dt) for dt in (2, 4, 6, 60)]
    assert [changed_lines(a, b) for a, b in zip([before, *later], later, strict=False)] == [[], [], [], []]
    more = _view(_status(valid=6, now=T0 + 62), T0 + 62)
    assert _body(changed_lines(later[-1], more))[0].startswith("run r1 (running, staging): 32 cells: 6 valid rows")


def test_a_cooling_account_is_one_line_with_its_end_not_a_countdown() -> None:
    until = T0 + 118.3
    views = [_view(_status(valid=1, now=T0 + s), T0 + s,
                   _account("a", "cooling", now=T0 + s, until=until, error="rate_limited (retry_after=118s)"),
                   _account("b", "healthy", now=T0 + s)) for s in range(120)]
    views.append(_view(_status(valid=1, now=T0 + 120), T0 + 120, _account("a", "healthy", now=T0 + 120),
                       _account("b", "healthy", now=T0 + 120)))
    printed = [line for a, b in zip([None, *views], views, strict=False) for line in _body(changed_lines(a, b))]
    clock = time.strftime("%H:%M:%S", time.localtime(until))
    assert printed[1:] == [f"account a cooling until {clock} (rate_limited)", "account b healthy",
                           "account a healthy"]


def test_disabled_and_held_accounts_say_their_class() -> None:
    now = T0
    marks = [AccountMark.of(_account("a", "disabled", now=now, error="auth: 401 invalid key")),
             AccountMark.of(_account("b", "held", now=now)),
             AccountMark.of(_account("c", "cooling", now=now, until=now + 30, error="server_error x3, cooling"))]
    assert [m.words() for m in marks] == [
        "account a disabled (auth)", "account b held (operator)",
        f"account c cooling until {time.strftime('%H:%M:%S', time.localtime(now + 30))} (server_error)"]


def test_a_note_is_printed_when_it_appears_only() -> None:
    note = "recovery circuit open for account:a (signature abc); next probe: resume with --hypothesis"
    a = _view(_status(valid=2, now=T0), T0)
    b = _view(_status(valid=2, now=T0 + 2, notes=(note,)), T0 + 2)
    c = _view(_status(valid=2, now=T0 + 4, notes=(note,)), T0 + 4)
    assert _body(changed_lines(a, b)) == [note] and changed_lines(b, c) == []


def test_the_end_says_why_and_what_next_once() -> None:
    end = _view(_status(state="paused", valid=3, reason="paused by the operator at 18:00:00",
                        next_action="ray-bench execute --plan runs/r1/launch-plan.json --confirm x"), T0)
    lines = end_lines(end)
    assert "last stop: paused by the operator at 18:00:00" in lines
    assert lines[-1].startswith("next: ray-bench execute") and not any(x.startswith("account ") for x in lines)


def test_a_planned_run_is_waited_for_and_the_give_up_is_one_line() -> None:
    planned = _status(state="planned", next_action="ray-bench execute --plan runs/r1/launch-plan.json --confirm x")
    assert awaits_start(planned) and not awaits_start(_status()) and not awaits_start(_status(state="finished"))
    assert waiting_line(planned, T0, 300).endswith(
        f"waiting for run r1 to start (planned, no driver holds its lock yet); gives up at "
        f"{time.strftime('%H:%M:%S', time.localtime(T0 + 300))}")
    error = never_started(planned, 300)
    assert error.line() == ("runs/r1: run r1 did not start within 5 min (still planned) (start it with "
                            "`ray-bench execute --plan runs/r1/launch-plan.json --confirm x`)")
