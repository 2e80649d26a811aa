"""What state a run is in, read from its plan, its ledger and its lock: one typed answer for
``status``, ``status --json``, ``watch`` and ``pause``.

States:

- ``planned``: the plan exists, no driver ever started it;
- ``running``: a live driver holds the run's lock (probed) and its session is open;
- ``paused``: the last session ended on an operator's pause;
- ``stopped``: the last session ended on a stop (drift, halt, circuit, spend, budget,
  preflight, accounts, audit), or its driver died without closing it (no live lock holder);
- ``finished``: the last session ended with nothing left to start.

Apart from its state, a run is ``staging`` or ``official`` (promoted, :mod:`ray_bench.evidence.
promote`); an official run offers no next action (it cannot be executed or rerun again).

``next_action`` is the command that would do something now (a resume only where cells are
left and a resume is not refused or stopped again at once), else ``None``.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ray_bench.clock import human_span
from ray_bench.config.bounded import load_state_json
from ray_bench.evidence.circuit import circuit_from, next_probe
from ray_bench.evidence.decisions import Demotion, Promotion, demotion_of, exclusions_of, promotion_of
from ray_bench.evidence.rows import SOLVED_AT
from ray_bench.evidence.settle import settlement_of
from ray_bench.ledger import events as ev
from ray_bench.ledger.rows import accepted_rows, known_spend, lower_bound_count
from ray_bench.ledger.store import AttemptRow, CostRow, Event, Ledger, LedgerTally
from ray_bench.metrics.pace import PaceSnapshot, pace_snapshot
from ray_bench.models.plan import Plan
from ray_bench.plan.brief import PlanBrief, read_brief
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import LockHolder, RunPaths
from ray_bench.scheduler.runstate import RunState, cell_phase, exhausted
from ray_bench.status.liveness import HEARTBEAT_STALE_SEC, lock_holder, pid_alive, pid_suspended

_E = TypeVar("_E", bound=ev.EventPayload)

if TYPE_CHECKING:
    from ray_bench.accounts.status import AccountStatus

RunPhase = Literal["planned", "running", "paused", "stopped", "finished"]
Category = Literal["staging", "official"]

#: Stops after which a plain resume stops again at once: the operator must change something.
_NO_PLAIN_RESUME = {"drift": "the inputs changed since planning: plan again and confirm the new identity",
                    "spend": "the run's spend limit is reached: a resume would stop again at once; plan again "
                             "with a higher limit",
                    "budget": "every account's own budget (limits.spend_usd, lifetime on the state root) is "
                              "spent: raise it in the accounts file or add an account, then plan again"}


@dataclass(frozen=True)
class DriverView:
    """The driver as seen from outside: the lock's holder and the ledger's last heartbeat."""

    lock_held: bool
    pid: int | None
    last_heartbeat: float | None
    heartbeat_age_sec: float | None

    @property
    def heartbeat_stale(self) -> bool:
        return self.heartbeat_age_sec is not None and self.heartbeat_age_sec > HEARTBEAT_STALE_SEC


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    identity: str
    run_root: Path
    cells: int
    state: RunPhase
    counts: dict[str, int]
    #: Valid rows whose reward reached SOLVED_AT (a valid row may have reward 0: not solved).
    solved: int
    attempts: int
    failures: dict[str, int]
    #: USD of the attempts whose cost is known: a lower bound while ``unknown_cost`` > 0.
    spend_usd: float
    #: Why the run is paused, stopped or finished with failures, in words; ``None`` otherwise.
    reason: str | None
    #: When the last session ended (unix seconds), if it did.
    ended_at: float | None
    #: The command that would do something now, and what it would do.
    next_action: str | None
    next_action_why: str | None
    pause_requested: bool
    driver: DriverView
    pace: PaceSnapshot | None
    deadline: float | None = None
    notes: list[str] = field(default_factory=list)
    #: Each node's check before the fan-out (``ray_bench.cells.nodes``): id, address, ok, problems;
    #: ``halted``: why its resource supervisor stopped it taking cells (``node_halt``).
    nodes: list[dict[str, Any]] = field(default_factory=list)
    #: ``official`` once promoted (who, when, why in ``promotion``), else ``staging``.
    category: Category = "staging"
    promotion: Promotion | None = None
    #: The demotion that made an official run staging again (who, when, why), if one did.
    demotion: Demotion | None = None
    #: Cells an operator excluded (``ray-bench exclude``), out of both denominators.
    excluded: int = 0
    #: The plan's accounts as their durable state says; ``None`` when not read
    #: (``read_status(accounts=True)`` reads them).
    accounts: list[AccountStatus] | None = None
    #: Attempts whose cost is unknown (never counted as $0 in ``spend_usd``).
    unknown_cost: int = 0
    #: Attempts whose known cost is a lower bound (counted in ``spend_usd``, which is then at least that).
    lower_bound_cost: int = 0
    #: Attempts whose cost in ``spend_usd`` is the provider's charge (the latest ``settle``), not
    #: the estimate; ``estimated_usd`` is then what the estimates alone add up to.
    settled_attempts: int = 0
    estimated_usd: float | None = None

    @property
    def remaining(self) -> int:
        return self.counts["pending"] + self.counts["running"]

    def to_json(self) -> dict[str, Any]:
        pace = self.pace
        return {
            "run_id": self.run_id, "identity": self.identity, "cells": self.cells, "state": self.state,
            "counts": self.counts, "solved": self.solved, "attempts": self.attempts,
            "failures": self.failures, "spend_usd": round(self.spend_usd, 4),
            "unknown_cost_attempts": self.unknown_cost, "lower_bound_cost_attempts": self.lower_bound_cost,
            "settled_cost_attempts": self.settled_attempts,
            "estimated_spend_usd": None if self.estimated_usd is None else round(self.estimated_usd, 4),
            "reason": self.reason,
            "ended_at": self.ended_at, "next_action": self.next_action,
            "next_action_why": self.next_action_why,
            # the resume command, where a resume would do something (kept for scripts)
            "resume_action": self.next_action if self.next_action and " execute " in f" {self.next_action}"
            else None,
            "pause_requested": self.pause_requested,
            "driver": {"lock_held": self.driver.lock_held, "pid": self.driver.pid,
                       "last_heartbeat": self.driver.last_heartbeat,
                       "heartbeat_age_sec": self.driver.heartbeat_age_sec},
            "deadline": self.deadline,
            "pace": None if pace is None else {
                "session_started_at": pace.started_at,
                "rows_per_minute": {w: round(v, 4) for w, v in pace.rows_per_minute.items()},
                "rows": {w: p.rows for w, p in pace.windows.items()},
                "estimate_rows_per_minute": None if pace.estimate is None
                else round(pace.estimate.rows_per_minute, 4),
                "basis": pace.basis(),
                "remaining_cells": pace.remaining_cells,
                "finish_estimate_sec": None if pace.finish_estimate_seconds is None
                else round(pace.finish_estimate_seconds, 1),
                "required_rows_per_minute": None if pace.required_rows_per_minute is None
                else round(pace.required_rows_per_minute, 4),
                "deadline_gap_rows": pace.deadline_gap_rows,
            },
            "notes": self.notes,
            "nodes": self.nodes,
            "category": self.category,
            "promotion": None if self.promotion is None else {
                "by": self.promotion.by, "at": self.promotion.at, "reason": self.promotion.reason,
                "family": list(self.promotion.family)},
            "demotion": None if self.demotion is None else {
                "by": self.demotion.by, "at": self.demotion.at, "reason": self.demotion.reason},
            "excluded": self.excluded,
            "accounts": None if self.accounts is None else [a.to_json() for a in self.accounts],
        }


def read_status(run_root: Path, now: float | None = None, *, accounts: bool = False,
                state_root: Path | None = None, whole: bool = False) -> RunStatus:
    """The run's status; with ``accounts``, also its accounts' durable state under the state
    root (cooling until, disabled, spend, window use: ``accounts.sqlite``, cluster or not).

    Read from the plan's brief and the ledger's ``cells`` table where both are there (issue 57:
    at 100,000 cells the whole plan is ~9 MiB of JSON and the attempts 100,000 rows), else, or
    with ``whole``, from the whole plan and every attempt row: the same answer either way."""
    at = time.time() if now is None else now
    brief = None if whole else read_brief(run_root)
    status = None
    if brief is not None:
        with contextlib.suppress(_Whole):
            status = _read_status(run_root, at, _Source(brief, None))
    if status is None or brief is None:
        plan, identity = load_plan_file(RunPaths(run_root).plan)  # once: at 100,000 cells a load is a second
        brief = PlanBrief.of(plan, identity)
        status = _read_status(run_root, at, _Source(brief, plan))
    if not accounts:
        return status
    from ray_bench.accounts.status import accounts_state

    return replace(status, accounts=accounts_state(brief.accounts, state_root=state_root, now=now))


class _Whole(Exception):
    """What is asked needs the whole plan or every attempt row."""


@dataclass(frozen=True)
class _Source:
    """The plan as status reads it: its brief, and the whole plan when it was read (``None``:
    a reading that needs it raises :class:`_Whole`, and it is read)."""

    brief: PlanBrief
    whole: Plan | None

    @property
    def plan(self) -> Plan:
        if self.whole is None:
            raise _Whole
        return self.whole


@dataclass(frozen=True)
class _Figures:
    """What status counts of the ledger's attempts: from every row (:func:`_figures_of`) or from
    the ledger's tally (:func:`_figures_tallied`), alike."""

    counts: dict[str, int]
    #: Cells with an attempt still open (any state).
    open_cells: int
    solved: int
    attempts: int
    failures: dict[str, int]
    spend: dict[str, Any]
    valid_finished: list[float]
    #: The latest start or finish of any attempt.
    last_activity: float | None


def read_phase(run_root: Path, now: float | None = None, *,
               brief: PlanBrief | None = None) -> tuple[RunPhase, PlanBrief]:
    """(state, the plan's brief): the state :func:`read_status` gives, read from the plan's brief
    (or the whole plan where the brief is not there), the lock and the ledger's events, not its
    attempts (``pause`` asks only this: its cost does not grow with the run). ``brief``: when the
    caller has read it."""
    brief = brief or plan_brief(run_root)
    now = time.time() if now is None else now
    view = _session_view(run_root, now)
    if view is None or view.session is None:  # no ledger, or no session: planned, or a rebuilt ledger
        try:
            return _read_status(run_root, now, _Source(brief, None)).state, brief
        except _Whole:
            return _read_status(run_root, now, _Source(brief, load_plan_file(RunPaths(run_root).plan)[0])).state, brief
    return _session_phase(view, now)[0], brief


def plan_brief(run_root: Path) -> PlanBrief:
    """The plan's brief, from its file where it is the plan's, else from the whole plan (refused
    as :func:`load_plan_file` refuses it)."""
    return read_brief(run_root) or PlanBrief.of(*load_plan_file(RunPaths(run_root).plan))


@dataclass(frozen=True)
class _SessionView:
    """What the state of a run with a ledger rests on: the lock, the pause request, the events
    (heartbeats apart), the last session's start and its driver as seen from outside."""

    holder: LockHolder
    pause_requested: bool
    events: list[Event]
    session: Event | None
    driver: DriverView


def _session_view(run_root: Path, now: float) -> _SessionView | None:
    """``None`` without a ledger; the heartbeats are not read, only the last one's time."""
    paths = RunPaths(run_root)
    holder = lock_holder(run_root)
    pause_requested = paths.pause.exists()
    if not paths.ledger.exists():
        return None
    with Ledger.reading(run_root) as ledger:
        events = ledger.events(exclude=ev.Heartbeat)
        started = _last(events, ev.RunStarted, after=-1)
        beat = None if started is None else ledger.last_ts(ev.Heartbeat, after=started[1].seq)
    if started is None:
        return _SessionView(holder, pause_requested, events, None, DriverView(holder.held, holder.pid, None, None))
    session = started[1]
    last_beat = session.ts if beat is None else max(session.ts, beat)
    return _SessionView(holder, pause_requested, events, session,
                        DriverView(holder.held, holder.pid, last_beat, round(now - last_beat, 1)))


#: How the last session stands: a driver starting, suspended, running, dead without a record, or
#: the session closed (paused, stopped or finished, as its ``run_finished`` says).
_Standing = Literal["starting", "suspended", "running", "dead", "closed"]


def _session_phase(view: _SessionView, now: float) -> tuple[RunPhase, _Standing]:
    """The one rule of a session's state (``status`` and ``pause`` both come here)."""
    assert view.session is not None
    holder, driver, session = view.holder, view.driver, view.session
    last_closed = _last(view.events, ev.RunFinished, after=session.seq)
    # A driver run from the library (not `execute`) holds no lock: a fresh heartbeat, and no
    # lock file naming a dead process, says it is alive.
    beating = (not driver.heartbeat_stale and (driver.heartbeat_age_sec or 0.0) <= HEARTBEAT_STALE_SEC
               and (holder.pid is None or pid_alive(holder.pid)))
    # The lock taken after the last session began: a driver starting (a resume's Ray start can
    # take minutes), whose loop has not written its run_started yet; the pace is the last
    # session's, so no estimate from it.
    if holder.held and holder.since is not None and holder.since > session.ts:
        return "running", "starting"
    if last_closed is None and holder.held and holder.pid is not None and pid_suspended(holder.pid):
        # It holds the lock and lives, but runs nothing until SIGCONT (issue 58: read as running).
        return "stopped", "suspended"
    if last_closed is None and (holder.held or beating):
        return "running", "running"
    if last_closed is None:
        return "stopped", "dead"
    return last_closed[0].phase, "closed"


def _read_status(run_root: Path, now: float, source: _Source) -> RunStatus:
    paths = RunPaths(run_root)
    brief = source.brief
    identity = brief.identity
    view = _session_view(run_root, now)
    if view is None:
        holder = lock_holder(run_root)
        return _planned(brief, run_root, holder.held, holder.pid, paths.pause.exists())
    holder, pause_requested, events, driver = view.holder, view.pause_requested, view.events, view.driver
    started = _last(events, ev.RunStarted, after=-1)
    if started is None:
        rebuilt = _last(events, ev.LedgerRebuilt, after=-1)
        if rebuilt is not None and not holder.held:
            attempts = Ledger.read_attempts(run_root)
            if attempts:
                return _rebuilt(source.plan, identity, run_root, attempts, events, rebuilt[1], pause_requested)
        return _planned(brief, run_root, holder.held, holder.pid, pause_requested)
    figures = _figures(run_root, source, events)
    start, session = started
    last_closed = _last(events, ev.RunFinished, after=session.seq)
    last_beat = session.ts if driver.last_heartbeat is None else driver.last_heartbeat
    phase, standing = _session_phase(view, now)
    starting = standing == "starting"

    counts = figures.counts
    deadline = start.deadline
    resume = f"ray-bench execute --plan {paths.plan} --confirm {identity}"
    notes: list[str] = []
    reason: str | None = None
    ended_at: float | None = None
    action: str | None = None
    why: str | None = None

    if standing == "starting":
        notes.append(f"the driver (pid {holder.pid}) is starting, since {_clock(holder.since or now)}: "
                     "its loop has not begun, so no estimate yet")
    elif standing == "suspended":
        reason = (f"the driver (pid {holder.pid}) is suspended by a signal (SIGSTOP or Ctrl-Z): it holds the "
                  "run's lock and launches nothing; its running cells go on in their sandboxes")
        action, why = f"kill -CONT {holder.pid}", "resumes the driver where it was"
    elif standing == "running":
        if driver.heartbeat_stale:
            notes.append(f"no heartbeat for {human_span(driver.heartbeat_age_sec or 0)}: the driver "
                         f"(pid {holder.pid}) holds the lock but makes no progress")
        if pause_requested:
            notes.append("pause requested: running cells finish, nothing new starts")
    elif standing == "dead" or last_closed is None:
        # the last sign of life: a heartbeat, or an attempt it recorded after the last one
        # (last_beat is at least session.ts: an attempt's time before it changes nothing)
        ended_at = max(last_beat, figures.last_activity or last_beat)
        reason = (f"the driver died or was killed (no live process holds the run's lock; last "
                  f"heartbeat {_clock(last_beat)}, {human_span(now - last_beat)} ago)")
        full = _last(events, ev.Stop, after=session.seq)
        if full is not None and full[0].reason == ev.StopReason.DISK_FULL:
            reason = stop_words(ev.StopReason.DISK_FULL, full[0].detail)
        elif (free := _free_mib(run_root)) is not None and free < FULL_DISK_MIB:
            # a ledger that met a full disk could not record why: the free space says it
            reason = (f"disk full: the driver stopped when the run root's disk filled ({free:.0f} MiB free "
                      f"now); free space, then resume")
        in_flight = figures.open_cells
        action, why = resume, (f"recovers {in_flight} attempt{'s' if in_flight != 1 else ''} left in flight "
                               f"and runs the {counts['pending'] + counts['running']} cells left")
    else:
        closed, row = last_closed
        ended_at, stopped, detail = row.ts, closed.stopped, closed.detail
        counts = _counts_at_close(counts)
        if phase == "paused":
            request = _last(events, ev.Paused, after=session.seq)
            said = request[0].reason if request else ""
            reason = f"paused by the operator at {_clock(request[1].ts if request else row.ts)}" + (
                f" ({said})" if said else "")
        elif phase == "stopped":
            reason = stop_words(str(stopped), detail)
        elif counts["failed"]:  # finished, with failures
            reason = detail or f"{counts['failed']} cells failed"
            action = f"ray-bench rerun {run_root} --failed"
            why = f"plans the {counts['failed']} failed cells again, as a new run"
        if phase in ("paused", "stopped"):
            action, why = _resume_for(str(stopped), detail, counts, resume, run_root)
            if stopped == "preflight" and not _last(events, ev.PreflightPassed, after=-1):
                plan = source.plan
                spent = _state_of(plan, Ledger.read_attempts(run_root))[0].preflight(plan.preflight).spent
                if spent:  # a resume runs the preflight again, and it has no attempt left
                    action = f"ray-bench rerun {run_root} --failed --hypothesis TEXT"
                    why = (f"{len(spent)} preflight cell{'s' if len(spent) != 1 else ''} used every attempt, "
                           "so a resume would stop at once; plans every cell without a valid row as a new run")
            elif stopped == "accounts" and action == resume:
                accounts = next((i.path for i in source.plan.inputs if i.kind == "accounts"), "ACCOUNTS")
                action = f"ray-bench accounts status --accounts {accounts}"
                why = ("a resume would stop again at once: release, enable or log in an account it shows "
                       "as unusable, then resume")

    pace = pace_snapshot(
        figures.valid_finished,
        now=now if ended_at is None else ended_at, started_at=session.ts,
        remaining_cells=counts["pending"] + counts["running"], deadline=deadline,
    )
    if phase != "running" or starting:  # the pace it had is history: no estimate from it
        pace = pace.history()
    checked = _last(events, ev.NodeCheck, after=session.seq)
    nodes: list[dict[str, Any]] = [dict(n) for n in checked[0].nodes] if checked else []
    notes += [f"node {n.get('address')} ({str(n.get('node_id'))[:8]}) gets no cells: "
              f"{'; '.join(n.get('problems') or [])}" for n in nodes if not n.get("ok")]
    halts = {e.event.node: e.event for e in events if isinstance(e.event, ev.NodeHalt) and e.seq > session.seq}
    for node in nodes:  # a node that passed its check and later ran short of memory or disk
        if str(node.get("node_id")) in halts:
            node["halted"] = halts.pop(str(node.get("node_id"))).reason
    nodes += [{"node_id": h.node, "address": h.address, "ok": True, "problems": [],
               "halted": h.reason} for h in halts.values()]
    notes += [f"node halted, gets no more cells: {n['halted']}" for n in nodes if n.get("halted")]
    notes.extend(circuit_notes(events))
    promotion = promotion_of(brief.run_id, events)
    if promotion is not None:  # official evidence changes only after a demotion: nothing to resume or rerun
        action, why = None, None
    return RunStatus(
        run_id=brief.run_id, identity=identity, run_root=run_root, cells=brief.cell_count, state=phase,
        counts=counts, solved=figures.solved, attempts=figures.attempts, failures=figures.failures,
        **figures.spend,
        reason=reason, ended_at=ended_at,
        next_action=action, next_action_why=why, pause_requested=pause_requested, driver=driver,
        pace=pace, deadline=deadline, notes=notes, nodes=nodes,
        category="official" if promotion is not None else "staging", promotion=promotion,
        demotion=demotion_of(brief.run_id, events), excluded=len(exclusions_of(brief.run_id, events)))


def _figures(run_root: Path, source: _Source, events: list[Event]) -> _Figures:
    """From the ledger's tally with the plan's brief alone, else from every attempt row."""
    if source.whole is not None:
        return _figures_of(source.whole, Ledger.read_attempts(run_root), events)
    with Ledger.reading(run_root) as ledger:
        if ledger.meta().get("plan_identity") != source.brief.identity:  # not this plan's cells
            raise _Whole
        tally = ledger.tally(SOLVED_AT)
    if tally is None:
        raise _Whole
    return _figures_tallied(source.brief, tally, events)


def _figures_of(plan: Plan, attempts: list[AttemptRow], events: list[Event]) -> _Figures:
    state, open_cells = _state_of(plan, attempts)
    rows = accepted_rows(attempts)
    times = [t for a in attempts for t in (a.started_at, a.finished_at) if t is not None]
    return _Figures(
        counts=state.counts(), open_cells=len(open_cells),
        solved=sum(1 for r in rows.values() if (r.reward or 0.0) >= SOLVED_AT), attempts=len(attempts),
        failures=_failure_counts(attempts), spend=_spend(plan.run_id, attempts, events),
        valid_finished=[a.finished_at for a in attempts if a.valid and a.finished_at is not None],
        last_activity=max(times) if times else None)


def _figures_tallied(brief: PlanBrief, tally: LedgerTally, events: list[Event]) -> _Figures:
    """:func:`_figures_of` from the tally: each group of cells takes the state :class:`RunState`
    gives such a cell (``_state_of``: running only where it would be pending)."""
    counts = {"pending": brief.cell_count - sum(g.cells for g in tally.groups), "running": 0, "valid": 0,
              "failed": 0}
    for g in tally.groups:
        failed = exhausted(g.counted, g.failures, brief.max_attempts)
        counts[cell_phase(valid=g.valid, running=g.open and not failed, failed=failed)] += g.cells
    times = [t for t in (tally.last_started, tally.last_finished) if t is not None]
    return _Figures(
        counts=counts, open_cells=sum(g.cells for g in tally.groups if g.open),
        solved=sum(g.solved for g in tally.groups), attempts=tally.attempts, failures=tally.failures,
        spend=_spend(brief.run_id, tally.costs, events, tally.plain_costs), valid_finished=tally.valid_finished,
        last_activity=max(times) if times else None)


def _spend(run_id: str, attempts: Sequence[AttemptRow | CostRow], events: list[Event],
           plain: list[float] | None = None) -> dict[str, Any]:
    """The run's spend as status shows it: the provider's charge for each attempt the latest
    settlement settled, the estimate for the others (unknown ones apart, never $0), and the
    estimates' own sum beside it once anything is settled. ``plain``: the known costs of the
    attempts left out of ``attempts`` (the ledger's tally); a settlement needs every attempt."""
    settlement = settlement_of(run_id, events)
    if plain is not None and settlement is not None:
        raise _Whole
    ids = {a.attempt_id for a in attempts}
    charged = {k: v for k, v in (settlement.charged() if settlement is not None else {}).items() if k in ids}
    spend_usd, unknown_cost = known_spend(attempts, charged, plain or ())
    return {"spend_usd": spend_usd, "unknown_cost": unknown_cost,
            "lower_bound_cost": lower_bound_count(attempts, charged), "settled_attempts": len(charged),
            "estimated_usd": known_spend(attempts)[0] if charged else None}


def _state_of(plan: Plan, attempts: list[AttemptRow]) -> tuple[RunState, set[str]]:
    """The cells' states from the ledger's attempts, and the cells with an attempt still open."""
    state = RunState(plan, [a for a in attempts if a.terminal])
    open_cells = {a.cell_id for a in attempts if not a.terminal}
    for cell_id in open_cells:
        if cell_id in state.cells and state.cells[cell_id].state == "pending":
            state.cells[cell_id].running = True
    return state, open_cells


def _rebuilt(plan: Plan, identity: str, run_root: Path, attempts: list[AttemptRow], events: list[Event],
             rebuilt: Event, pause_requested: bool) -> RunStatus:
    """A ledger made again by ``ledger rebuild``: its attempts are there, the driver's events
    (its start, stops, pauses) are not. Finished when every cell ran out (a valid row, or its
    attempts spent), as the driver's last session said of it (issue 58: a finished run read
    `stopped`, so `export` refused what `promote` passed); else stopped, with what a resume
    recovers and runs."""
    state, open_cells = _state_of(plan, attempts)
    counts = _counts_at_close(state.counts())
    rows = accepted_rows(attempts)
    left = counts["pending"] + counts["running"]
    reason = (f"the ledger was rebuilt from the attempt directories at {_clock(rebuilt.ts)}; "
              "the driver's own record (its start, stops and pauses) did not survive")
    phase: RunPhase = "stopped" if left or open_cells else "finished"
    # A paused run keeps its pause request in the run root until the next session archives it
    # (ray_bench.api.pause writes it; the driver moves it under pauses/ when it resumes): with cells
    # left, the run stopped at that pause, as the ledger it replaces said.
    if phase == "stopped" and pause_requested and (request := _pause_record(run_root)) is not None:
        said = request.get("reason") if isinstance(request.get("reason"), str) else ""
        at = request.get("requested_at")
        phase = "paused"
        reason = ("paused by the operator" + (f" at {_clock(at)}" if isinstance(at, int | float) and not
                                               isinstance(at, bool) and math.isfinite(at) else "")
                  + (f" ({said})" if said else "") + f"; {reason}")
    return RunStatus(
        run_id=plan.run_id, identity=identity, run_root=run_root, cells=len(plan.cells),
        state=phase,
        counts=counts, solved=sum(1 for r in rows.values() if (r.reward or 0.0) >= SOLVED_AT),
        attempts=len(attempts), failures=_failure_counts(attempts), **_spend(plan.run_id, attempts, events),
        reason=reason,
        ended_at=rebuilt.ts,
        next_action=f"ray-bench execute --plan {RunPaths(run_root).plan} --confirm {identity}" if left else None,
        next_action_why=(f"recovers {len(open_cells)} attempt{'s' if len(open_cells) != 1 else ''} left in "
                         f"flight and runs the {left} cells left") if left else None,
        pause_requested=pause_requested, driver=DriverView(False, None, None, None), pace=None,
        notes=["rebuilt ledger: no events before the rebuild (pace, stops and pauses are unknown)"])


def _pause_record(run_root: Path) -> dict[str, Any] | None:
    """The run root's pause request as ``pause`` wrote it, or None when it cannot be read."""
    try:
        request = load_state_json(RunPaths(run_root).pause)
    except (OSError, ValueError):
        return None
    return request if isinstance(request, dict) else None


def _planned(brief: PlanBrief, run_root: Path, held: bool, pid: int | None,
             pause_requested: bool) -> RunStatus:
    n, identity = brief.cell_count, brief.identity
    starting = held  # a driver holds the lock but has not recorded its start yet
    paths = RunPaths(run_root)
    # A confirm is proposed only for what the operator can review: execute refuses a plan whose
    # receipt is gone (commands/verify.py), so pasting the identity would only be refused (issue 56).
    reviewable = paths.receipt.is_file()
    start = None if starting or not reviewable else f"ray-bench execute --plan {paths.plan} --confirm {identity}"
    notes = (["the driver is starting (Ray, then the ledger)"] if starting else [] if reviewable else
             [f"no receipt beside the plan ({paths.receipt} is missing): execute refuses it; make a new plan "
              "from the same suite and accounts (`ray-bench plan --suite S --accounts A`) and review its receipt"])
    return RunStatus(
        run_id=brief.run_id, identity=identity, run_root=run_root, cells=n,
        state="running" if starting else "planned",
        counts={"pending": n, "running": 0, "valid": 0, "failed": 0}, solved=0, attempts=0, failures={},
        spend_usd=0.0, reason=None, ended_at=None,
        next_action=start, next_action_why=None if start is None else "starts the run",
        pause_requested=pause_requested, driver=DriverView(held, pid, None, None), pace=None,
        notes=notes)


def _counts_at_close(counts: dict[str, int]) -> dict[str, int]:
    # A closed session has nothing running: a cell still open in the ledger waits for a resume.
    out = dict(counts)
    out["pending"] += out.get("running", 0)
    out["running"] = 0
    return out


def _resume_for(stopped: str, detail: str, counts: dict[str, int], resume: str,
                run_root: Path) -> tuple[str | None, str | None]:
    if counts["pending"] == 0:
        return None, None
    if stopped in _NO_PLAIN_RESUME:
        return None, _NO_PLAIN_RESUME[stopped]
    if stopped == "halt":
        return (f"{resume} --clear-halt {RunPaths(run_root).halt} --clearance-reason TEXT",
                f"archives the halt and runs the {counts['pending']} cells left")
    if stopped == "circuit" or (stopped == "accounts" and "--hypothesis" in detail):
        return (f"{resume} --hypothesis TEXT",
                "records what changed and sends one probe cell on it; the scope reopens (and runs the "
                f"{counts['pending']} cells left) only if the probe gives a valid row")
    return resume, f"runs the {counts['pending']} cells left"


def circuit_notes(events: list[Event]) -> list[str]:
    """One line per recovery circuit not reopened: its signature and what the next probe is."""
    circuit = circuit_from(events)
    lines = [f"recovery circuit open for {scope} (signature {fp}); next probe: {next_probe(scope, None)}"
             for scope, fp in sorted(circuit.open_scopes.items())]
    lines += [f"recovery circuit on probation for {scope} (signature {p.fingerprint}); next probe: "
              f"{next_probe(scope, p)}" for scope, p in sorted(circuit.probing.items())]
    return lines


#: Below this much free space, a driver that ended without a record met a full disk.
FULL_DISK_MIB = 16


def _free_mib(run_root: Path) -> float | None:
    try:
        return shutil.disk_usage(run_root).free / (1 << 20)
    except OSError:
        return None


def stop_words(stopped: str, detail: str) -> str:
    label = {"drift": "inputs changed", "halt": "resource halt", "circuit": "recovery circuit open",
             "spend": "the run's spend limit", "budget": "account budgets spent",
             "preflight": "preflight failed", "accounts": "no usable account",
             "audit": "cleanup audit found residue", "nodes": "no node passed its check",
             "signal": "stopped by a signal", "disk_full": "disk full"}.get(stopped, stopped)
    if not detail:
        return label
    # A detail that opens with the label's word says what it is already: not "resource halt:
    # resource halt: ..." nor "preflight failed: preflight gate failed: ...".
    same = detail.split(maxsplit=1)[0].lower() == label.split(maxsplit=1)[0].lower()
    return detail if same else f"{label}: {detail}"


def _last(events: list[Event], kind: type[_E], *, after: int) -> tuple[_E, Event] | None:
    """The last event of one kind after ``after`` (a seq), with its row (seq, ts)."""
    for e in reversed(events):
        if e.seq <= after:
            return None
        if isinstance(e.event, kind):
            return e.event, e
    return None


def _failure_counts(attempts: list[AttemptRow]) -> dict[str, int]:
    """Failed attempts by class, in the classes' order (as the ledger's tally gives them)."""
    out: dict[str, int] = {}
    for a in attempts:
        if a.status == "finished" and not a.valid and a.failure_class:
            out[a.failure_class] = out.get(a.failure_class, 0) + 1
    return dict(sorted(out.items()))


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
