"""A session's decisions outside its launch rounds (scheduler/session.py, through RunCore.step):
events in, commands out. No ledger, no account store, no pool: each test plays the driver."""

from __future__ import annotations

from support.launch_world import a_core, a_plan, row_of

from ray_bench.accounts.health import PROBE_EVERY_SEC
from ray_bench.accounts.store import OperatorEvent
from ray_bench.cells.nodes import NodeCheck
from ray_bench.evidence.circuit import Probe, RecoveryCircuit
from ray_bench.evidence.classify import Verdict
from ray_bench.ledger import events as ev
from ray_bench.models.accounts import Account
from ray_bench.scheduler import commands as cmd
from ray_bench.scheduler import session
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import Append
from ray_bench.scheduler.runcore import PROBE_CHECK_SEC

VALID = Verdict(valid=True, failure_class=None, fingerprint=None, message="", effect="success")


def test_a_pause_requested_since_this_session_started_stays_an_older_or_unreadable_one_is_archived() -> None:
    assert session.pause_left(cmd.PauseFound(requested_at=100.0, session_started=100.0)) == []
    archived = [cmd.ArchivePause(), Append(ev.Resumed(after="pause"))]
    assert session.pause_left(cmd.PauseFound(requested_at=99.0, session_started=100.0)) == archived
    assert session.pause_left(cmd.PauseFound(requested_at=None, session_started=100.0)) == archived
    assert session.pause_left(cmd.PauseFound(requested_at=500.0, session_started=None)) == archived


def test_an_attempt_a_dead_driver_left_is_stale_of_unknown_cost_with_its_sandboxes_counted() -> None:
    cell = a_plan().cells[0]
    row = row_of(LeaseRequest("l1", cell, 60.0), "b")
    (end,) = session.stale_end(cmd.StaleFound(row, removed=2))
    assert isinstance(end, cmd.RecordEnd) and end.attempt_id == row.attempt_id
    record = end.record
    assert (record.status, record.valid, record.failure_class, record.fingerprint, record.counts) == (
        "stale",
        False,
        "executor",
        "stale-runner",
        False,
    )
    assert record.cost_usd is None and record.charged_usd is None  # unknown, never $0
    assert record.summary.stale and record.summary.sandboxes_removed == 2 and record.summary.account == "b"


def test_the_nodes_checks_are_recorded_and_the_run_stops_when_no_node_passed() -> None:
    core = a_core()
    assert core.step(cmd.NodesChecked(None)) == []
    good, bad = NodeCheck("n1", "10.0.0.1"), NodeCheck("n2", "10.0.0.2", ("x is not set",))
    (recorded,) = core.step(cmd.NodesChecked([good, bad]))
    assert isinstance(recorded, Append) and isinstance(recorded.event, ev.NodeCheck)
    assert recorded.event.summary.startswith("1 of 2 nodes passed")
    *_, stop, stopped = core.step(cmd.NodesChecked([bad]))
    assert isinstance(stopped, cmd.StopRun) and stopped.reason is ev.StopReason.NODES
    assert isinstance(stop, Append) and stop.event == ev.Stop(reason=ev.StopReason.NODES, detail=stopped.detail)
    assert "no node can run cells: 0 of 1 nodes passed" in stopped.detail


def test_the_audit_records_idle_nodes_lost_and_residue_stops_only_a_run_not_stopped() -> None:
    core = a_core()
    commands = core.step(cmd.Audited(removed=3, residue=1, lost_nodes=("n2",), stopped=False))
    assert commands[:2] == [Append(ev.NodeLost(node="n2", while_="idle")), Append(ev.Audit(removed=3, residue=1))]
    assert isinstance(commands[-1], cmd.StopRun) and commands[-1].reason is ev.StopReason.AUDIT
    assert "ray-bench audit /runs/r --cleanup" in commands[-1].detail
    assert core.step(cmd.Audited(removed=0, residue=1, lost_nodes=(), stopped=True)) == [
        Append(ev.Audit(removed=0, residue=1))
    ]  # the first stop stands
    assert core.step(cmd.Audited(removed=0, residue=0, lost_nodes=(), stopped=False)) == [
        Append(ev.Audit(removed=0, residue=0))
    ]


def test_the_preflight_runs_its_cells_alone_then_fails_closed_or_passes_into_the_fan_out() -> None:
    plan = a_plan()
    first = plan.cells[0].id
    plan = plan.model_copy(update={"preflight": [first]})
    core = a_core(plan)
    assert core.step(cmd.PreflightDue(passed=False)) == [cmd.RunLoop()]
    assert len(core.state.pending) == 1  # the preflight's loop sees its cells alone
    *_, stopped = core.step(cmd.LoopEnded(stopped=False))  # it ended without a valid row
    assert isinstance(stopped, cmd.StopRun) and stopped.reason is ev.StopReason.PREFLIGHT
    assert len(core.state.pending) == len(plan.cells)  # every cell back in the queue

    core = a_core(plan)
    core.step(cmd.PreflightDue(passed=False))
    core.state.finished(first, VALID)
    assert core.step(cmd.LoopEnded(stopped=False)) == [Append(ev.PreflightPassed(cells=[first])), cmd.RunLoop()]
    assert core.step(cmd.LoopEnded(stopped=False)) == []  # the fan-out's loop ends the session

    core = a_core(plan)
    core.step(cmd.PreflightDue(passed=False))
    assert core.step(cmd.LoopEnded(stopped=True)) == []  # the loop's own stop stands
    assert len(core.state.pending) == 1
    assert a_core(plan).step(cmd.PreflightDue(passed=True)) == [cmd.RunLoop()]  # an earlier session passed it


def test_an_enable_recorded_after_an_account_circuit_opened_reopens_it() -> None:
    core = a_core()
    replayed = RecoveryCircuit(
        open_scopes={"account:a": "fp", "backend:local": "fp"}, probing={"account:b": Probe("fp", "try again")}
    )
    assert core.step(cmd.CircuitReplayed(replayed)) == [cmd.ReadEnables((("account:a", "a"), ("account:b", "b")))]
    enable = OperatorEvent(1, "a", "enable", "rotated the key", "ops", at=50.0)
    early = OperatorEvent(2, "b", "enable", "before it opened", "ops", at=5.0)
    commands = core.step(cmd.EnablesRead({"account:a": 40.0, "account:b": 10.0}, {"a": [enable], "b": [early]}))
    assert commands == [
        Append(ev.CircuitReopened(scope="account:a", via="enable", who="ops", reason="rotated the key"))
    ]
    assert set(core.circuit.open_scopes) == {"backend:local"} and set(core.circuit.probing) == {"account:b"}
    assert a_core().step(cmd.CircuitReplayed(RecoveryCircuit(open_scopes={"run": "fp"}))) == []  # no account


def test_accounts_with_a_probe_command_are_probed_before_the_fan_out_and_when_due() -> None:
    plan = a_plan()
    probed = Account.model_validate({**plan.accounts[1].model_dump(), "probe_command": "check-login"})
    core = a_core(plan.model_copy(update={"accounts": [plan.accounts[0], probed]}))
    assert core.step(cmd.FanOutNears()) == [cmd.Probe("b", "before the fan-out")]  # "a" has no probe_command
    core.circuit.open_scopes["account:b"] = "fp"
    commands = core.step(cmd.Probed("b", "ok", "logged in", now=1.0))
    assert commands == [
        Append(
            ev.AccountProbe(account="b", verdict="ok", effect="clear", detail="logged in", when="before the fan-out")
        ),
        cmd.RecordHealth("b", "probe:clear", "logged in"),
        Append(ev.CircuitReopened(scope="account:b", via="account_probe", detail="logged in")),
    ]
    # the turn's probes come before its report: a held account is due one once its last is old
    now = 1.0 + PROBE_EVERY_SEC
    assert core.step(cmd.TurnEnded(now, finished=0, stopped=False, note=None))[-1] == cmd.ProbeAccounts(now)
    views = [AccountView("a", "held", 0, 2), AccountView("b", "held", 0, 2)]
    assert core.step(cmd.AccountsSeen(views, now)) == [cmd.Probe("b", "scheduled")]
    *recorded, report = core.step(cmd.Probed("b", "auth", "401", now=now))
    assert recorded[0] == Append(
        ev.AccountProbe(account="b", verdict="auth", effect="disable", detail="401", when="scheduled")
    )
    assert report == cmd.Report(None, now)
    assert core.probes.due(views, now + 1.0) == ["a"]  # "b" was probed a moment ago ("a" has no command)


def test_the_report_waits_for_the_turns_probes_and_comes_alone_when_none_is_due() -> None:
    core = a_core()
    assert core.step(cmd.TurnEnded(PROBE_CHECK_SEC, finished=0, stopped=False, note=None)) == [
        cmd.ProbeAccounts(PROBE_CHECK_SEC)
    ]
    assert core.step(cmd.AccountsSeen([AccountView("a", "healthy", 0, 2)], PROBE_CHECK_SEC)) == [
        cmd.Report(None, PROBE_CHECK_SEC)
    ]
    assert core.step(cmd.TurnEnded(PROBE_CHECK_SEC + 1.0, finished=0, stopped=False, note=None)) == [
        cmd.Report(None, PROBE_CHECK_SEC + 1.0)
    ]
