"""The run's decisions as one pure step (scheduler/runcore.py): events in, commands out. No Ray,
no ledger, no gate, no clock: each test plays the driver's part by hand."""

from __future__ import annotations

from support.launch_world import HALT_FILE, a_core, row_of

from ray_bench.ledger import events as ev
from ray_bench.models.attempt import AttemptSummary, ExecFacts, Usage
from ray_bench.plan.drift import Drift
from ray_bench.sandboxes.supervisor import ResourceHalt
from ray_bench.scheduler import commands as cmd
from ray_bench.scheduler.finish import Append
from ray_bench.scheduler.launch import AT_LIMIT, Wait
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted
from ray_bench.scheduler.runcore import RunCore


def acquire(core: RunCore, now: float = 0.0) -> cmd.Acquire:
    """Begin a round and pass its drift check: the batch it asks the gate for."""
    (check,) = core.step(cmd.RoundBegins(now))
    assert isinstance(check, cmd.CheckInputs)
    (ask,) = core.step(cmd.InputsChecked())
    assert isinstance(ask, cmd.Acquire)
    return ask


def start_all(core: RunCore, commands: list[cmd.Command], now: float = 0.0) -> list[cmd.Command]:
    """Answer each cmd.Start as the driver would; the commands in between and the round's end."""
    seen: list[cmd.Command] = []
    while commands and isinstance(commands[-1], cmd.Start):
        *before, start = commands
        seen += before
        commands = core.step(cmd.Started(start.request.lease_id, row_of(start.request, start.account), now))
    return seen + commands


def test_a_round_asks_the_free_slots_starts_the_granted_in_order_and_puts_the_rest_back() -> None:
    core = a_core(capacity=4)
    ask = acquire(core)
    assert len(ask.requests) == 4 and ask.exclude == frozenset() and ask.now == 0.0
    first, second, third, fourth = ask.requests
    commands = core.step(cmd.Granted({first.lease_id: "a", second.lease_id: "b", third.lease_id: "a"}))
    assert commands == [cmd.Start(first, "a")]  # one start at a time: its ledger row comes first
    rest = start_all(core, commands)
    assert [type(c) for c in rest] == [cmd.Notify, cmd.Notify, cmd.Notify, Wait]
    assert [c.event.row.account for c in rest if isinstance(c, cmd.Notify) and isinstance(c.event, AttemptStarted)] \
        == ["a", "b", "a"]  # in the batch's order
    assert rest[-1] == Wait(AT_LIMIT)  # the refused one waits while three run
    assert sorted(core.running) == sorted(r.lease_id for r in (first, second, third))
    assert core.state.take(0.0) == fourth.cell  # put back first in line


def test_a_drift_stops_the_run_before_any_start_and_puts_the_batch_back() -> None:
    core = a_core()
    pending = len(list(core.state.cells))
    (check,) = core.step(cmd.RoundBegins(0.0))
    assert isinstance(check, cmd.CheckInputs)
    cell = check.cells[1]
    drift = Drift(kind="task", name=cell.task, path="/t", detail="checksum changed")
    commands = core.step(cmd.InputsChecked(drift, cell.id))
    assert [type(c) for c in commands] == [Append, Append, cmd.StopRun]
    seen, stop, stop_run = commands
    assert isinstance(seen, Append) and isinstance(seen.event, ev.DriftSeen) and seen.cell_id == cell.id
    assert isinstance(stop, Append) and isinstance(stop.event, ev.Stop) and stop.event.reason is ev.StopReason.DRIFT
    assert stop_run == cmd.StopRun(ev.StopReason.DRIFT, f"task {cell.task} changed (checksum changed); "
                                                    "running cells may finish, a new plan is required")
    assert not core.running and len(core.state.pending) == pending


def test_nothing_granted_and_nothing_running_asks_the_gate_why() -> None:
    core = a_core()
    ask = acquire(core, now=100.0)
    (why,) = core.step(cmd.Granted({}))
    assert isinstance(why, cmd.AskWhy) and why.now == 100.0
    assert why.ask.horizon_sec == min(r.horizon_sec for r in ask.requests)
    assert core.step(cmd.GateSaid((140.0, "every account is cooling"), None)) == [
        Wait("waiting: every account is cooling (next in 40 s)")]
    # nothing runs: the turn beats, reads the accounts to see which are due a probe (none has a
    # probe_command), then reports and waits four ticks (or until the account cools, at 140)
    assert core.step(cmd.TurnEnded(100.0, finished=0, stopped=False, note="waiting")) == [
        cmd.Beat(), cmd.ProbeAccounts(100.0)]
    assert core.step(cmd.AccountsSeen((), 100.0)) == [cmd.Report("waiting", 100.0), cmd.Sleep(1.0, 140.0)]
    assert core.step(cmd.TurnEnded(101.0, finished=1, stopped=False, note="waiting")) == [
        cmd.Report("waiting", 101.0)]  # cells just finished: their slots are free, no wait


def test_accounts_that_need_an_operator_stop_the_run() -> None:
    core = a_core()
    acquire(core)
    core.step(cmd.Granted({}))
    *append, stop = core.step(cmd.GateSaid(None, "a disabled, b disabled"))
    assert isinstance(stop, cmd.StopRun) and stop.reason is ev.StopReason.ACCOUNTS and "a disabled" in stop.detail
    assert [c.event for c in append if isinstance(c, Append)] == [ev.Stop(reason=ev.StopReason.ACCOUNTS,
                                                                          detail=stop.detail)]


def test_a_finished_attempt_is_recorded_then_released_then_told_with_its_cell_state() -> None:
    core = a_core()
    ask = acquire(core)
    request = ask.requests[0]
    start_all(core, core.step(cmd.Granted({request.lease_id: "a"})))
    summary = AttemptSummary(attempt_id=f"{request.cell.id}-a1", cell_id=request.cell.id, task=request.cell.task,
                             arm=request.cell.arm, rep=0, account="a", backend="local", started_at=0.0,
                             agent=ExecFacts(exit_code=0, duration_sec=60.0), verifier=ExecFacts(exit_code=0),
                             reward=1.0, reward_source="reward.txt", usage=Usage(output_tokens=10, cost_usd=0.5))
    commands = core.step(cmd.Ended(request.lease_id, summary, 60.0))
    assert [type(c) for c in commands] == [cmd.RecordEnd, cmd.ReleaseLease, cmd.Notify]
    record, release, told = commands
    assert isinstance(record, cmd.RecordEnd) and record.attempt_id == summary.attempt_id and record.record.valid
    assert isinstance(release, cmd.ReleaseLease) and release.now == 60.0
    assert release.release.account == "a" and release.release.verdict is not None and release.release.usd == 0.5
    assert isinstance(told, cmd.Notify) and isinstance(told.event, AttemptFinished) and told.event.cell_state == "valid"
    assert not core.running and core.state.cells[request.cell.id].valid


def test_a_signal_cancels_the_running_cells_and_stops() -> None:
    commands = a_core().step(cmd.WorldSeen(0.0, signal="SIGTERM"))
    assert [type(c) for c in commands] == [Append, cmd.CancelRunning, cmd.StopRun]
    stop = commands[-1]
    assert isinstance(stop, cmd.StopRun) and stop.reason is ev.StopReason.SIGNAL and stop.signal == "SIGTERM"
    assert "resume: ray-bench execute --plan p" in stop.detail


def test_supervisors_are_asked_every_few_seconds_and_a_halt_on_every_node_stops_the_run() -> None:
    core = a_core()
    assert core.step(cmd.WorldSeen(0.0, node_count=1)) == [cmd.Supervise()]  # the first round asks, at a clock of 0 too
    halt = ResourceHalt(run_id="sim", reason="memory 100 MiB < reserve 200 MiB", available_mb=100, reserve_mb=200,
                        at="now", node="n1")
    commands = core.step(cmd.Supervised([halt], node_count=2))
    assert [type(c) for c in commands] == [Append, cmd.Retire]  # one node of two: the other takes cells
    assert commands[1] == cmd.Retire("n1")
    assert core.step(cmd.WorldSeen(1.0, node_count=2)) == []  # not asked again within 2 s; nothing stops
    assert core.step(cmd.WorldSeen(1.5, node_count=1)) == [
        cmd.AppendHalt(ev.Stop(reason=ev.StopReason.HALT, detail=(detail := (
            f"resource halt: {halt.reason}; running cells finish. Resume needs --clear-halt {HALT_FILE} "
            "--clearance-reason TEXT"))), (halt,)),
        cmd.StopRun(ev.StopReason.HALT, detail)]
    assert core.step(cmd.WorldSeen(2.0, node_count=2)) == [cmd.Supervise()]
