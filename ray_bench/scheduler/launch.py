"""The launch policy of one round of the driver's loop, as pure decisions (issue 30, step 3).

A round asks the core which cells to request (:meth:`LaunchCore.plan_round`), has the inputs
of those cells checked for drift, the accounts asked for them (the offers to accounts on
probation first, one request each), starts what was granted, and asks the core what the round
comes to (:meth:`LaunchCore.conclude`, then :meth:`LaunchCore.when_idle` if the gate must be
asked why nothing could start). :class:`~ray_bench.scheduler.runcore.RunCore` walks a round
through these calls, one event and its commands at a time; the driver executes the commands
(file hashing, the gate's actor calls, the ledger), the simulator runs that driver and the unit
tests call the methods: there is one launch policy.

The gate's grants are the input of the next decision and only the gate can make them (atomic
reservations shared across runs), so a round has I/O points, drift and acquire, between which
the core decides.

The core owns the decisions' state that is no one else's (the lease counter, the probe leases,
when to wake); it reads and updates the pure books it is given (run state, circuit, quota fit,
spend) and does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ray_bench.clock import human_span
from ray_bench.evidence.circuit import RecoveryCircuit, scope_account
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.plan.roles import judge_lease_account
from ray_bench.scheduler.admission import AccountView, budget_only
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.reserve import Reservation, reservation, window_rates
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import Expected, SpendBook

AT_LIMIT = "waiting: every account is at its limit"
#: The most cells a round passes over because their judge account is full of this run's cells,
#: looking for cells behind them that can start (a bound on a round's work, not a limit).
PASS_OVER = 256


def waiting_note(what: str, seconds: float) -> str:
    """``waiting: every account is cooling (next in 40 s)``; a moment already passed is 0 s
    (the loop asks again at once), never "-0s"."""
    return f"waiting: {what}{_COUNTDOWN}{human_span(max(0.0, seconds))})"


_COUNTDOWN = " (next in "


def waiting_subject(note: str) -> str:
    """What a note waits on, without its countdown (``waiting: every account is cooling``): the
    loop's note counts down each turn, and the same wait said each second is one wait (issue 56:
    118 lines in 2 minutes)."""
    return note.split(_COUNTDOWN, 1)[0]


# -- commands: what the driver executes -------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Nothing more starts this round; ``note`` says on what work waits (None: on nothing)."""

    note: str | None


@dataclass(frozen=True)
class Halt:
    """Stop launching: the run stops with ``reason`` (a :class:`~ray_bench.ledger.events.StopReason`
    value); running cells may finish."""

    reason: ev.StopReason
    detail: str


@dataclass(frozen=True)
class AskGate:
    """Nothing runs and nothing could start: ask the gate when an account frees itself
    (``blocked_until``) and, if none will by itself, why (``stalled`` for ``horizon_sec``
    without ``exclude``); then :meth:`LaunchCore.when_idle`."""

    horizon_sec: float
    exclude: frozenset[str]
    #: The judge accounts the waiting cells need a lease on too, when every one of them does.
    judges: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Round:
    """The cells one round asks accounts for. ``requests`` were taken from the queue: the driver
    starts the granted ones and puts the rest back. ``checked``: the cells whose inputs must be
    checked for drift first, in order (a drift stops the run before any start). ``halt``: the
    round found a stop (the requests were put back; drift, if any, still wins)."""

    requests: tuple[LeaseRequest, ...]
    checked: tuple[PlanCell, ...]
    halt: Halt | None = None
    #: The run's spend limit held this cell's cost back.
    over: Expected | None = None
    #: The backend whose create rate held cells back.
    paced: str | None = None
    #: Lease id -> the known expected seconds the spend book reserves it for (0: unknown task).
    costed_sec: dict[str, float] = field(default_factory=dict)


class LaunchCore:
    """The launch decisions of one run: which cells, on which terms, and what a round comes to."""

    def __init__(self, plan: Plan, capacity: int, circuit: RecoveryCircuit, quota_fit: QuotaFit,
                 spend: SpendBook) -> None:
        self.run_id = plan.run_id
        self.capacity = capacity
        self.circuit = circuit
        self.quota_fit = quota_fit
        self.spend = spend
        self.accounts = frozenset(a.name for a in plan.accounts)
        self.backends = sorted({c.backend for c in plan.cells})
        self.window_rates = window_rates(plan.accounts)
        tasks = {t.id: t for t in plan.tasks}
        arms = {a.name: a for a in plan.arms}
        #: (task, arm) -> how long a cell may hold its account: its agent and verifier limits.
        self.horizons = {(c.task, c.arm): (arms[c.arm].agent_timeout_sec or tasks[c.task].agent_timeout_sec)
                         + (arms[c.arm].verifier_timeout_sec or tasks[c.task].verifier_timeout_sec)
                         for c in plan.cells}
        accounts = {a.name: a for a in plan.accounts}
        #: (task, arm) -> the account its verifier's credentials come from, holding a lease too.
        self.judges = {(t, a): judge_lease_account(arms[a], tasks[t].config, accounts)
                       for t, a in {(c.task, c.arm) for c in plan.cells}}
        self.judge_slots = {j: accounts[j].limits.max_concurrent for j in self.judges.values() if j is not None}
        self.leases = 0
        #: Lease id -> the probing circuit scopes its cell is the probe of (until it starts).
        self.probe_leases: dict[str, list[str]] = {}
        #: When an account or a create frees itself (the idle loop sleeps until then at most).
        self.wake_at: float | None = None

    # -- before the gate ------------------------------------------------------------------------

    def wants_views(self, state: RunState, inflight: int) -> bool:
        """Whether :meth:`plan_round` reads the accounts' views (the reservation does)."""
        return bool(self.window_rates) and bool(state.pending) and inflight < self.capacity

    def holding(self, running: Iterable[tuple[str, PlanCell]]) -> dict[str, int]:
        """Account -> the slots ``running`` (account, cell) hold there: their own, and their judges'."""
        out: dict[str, int] = {}
        for account, cell in running:
            out[account] = out.get(account, 0) + 1
            judge = self.judges.get((cell.task, cell.arm))
            if judge is not None and judge != account:
                out[judge] = out.get(judge, 0) + 1
        return out

    def plan_round(self, state: RunState, views: Sequence[AccountView], inflight: int, now: float,
                   holding: Mapping[str, int] | None = None) -> Round:
        """Take the free slots' worth of cells, in queue order, until a limit holds: the
        backends' create rates, the run's spend limit, a circuit scope open or on probation (a
        scope on probation takes one cell at a time, alone in its batch: its probe). A cell whose
        judge account this run's running cells fill (``holding``: :meth:`holding`) is passed over,
        so that the cells behind it take the free slots, and stays first in line."""
        judge_free = {j: n - (holding or {}).get(j, 0) for j, n in self.judge_slots.items()}
        passed: list[PlanCell] = []
        try:
            return self._plan_round(state, views, inflight, now, judge_free, passed)
        finally:
            state.put_back(passed)

    def _plan_round(self, state: RunState, views: Sequence[AccountView], inflight: int, now: float,
                    judge_free: dict[str, int], passed: list[PlanCell]) -> Round:
        requests: list[LeaseRequest] = []
        checked: list[PlanCell] = []
        costed: dict[str, float] = {}
        typical = state.book.typical()
        capacity = min(self.capacity, *(self.quota_fit.limit(b) for b in self.backends))
        creates = {b: self.quota_fit.creates_available(b, now) for b in self.backends}
        paced: str | None = None
        over: Expected | None = None
        asked_usd = 0.0  # the requests' expected cost so far
        self.spend.typical_sec = typical
        room = self.spend.room() if inflight < capacity else None
        reserve = self._reservation(state, views, now, typical) if inflight < capacity else Reservation()
        shunning = 0  # requests that may wait for a busy account: they take no free slot's place
        while inflight + len(requests) - shunning < capacity and (cell := (
                state.take(now, reserve.long_from, long=True) if len(requests) < reserve.long_slots
                else state.take(now, reserve.below))) is not None:
            judge = self.judges[(cell.task, cell.arm)]
            if judge is not None and judge_free[judge] <= 0:
                passed.append(cell)
                if len(passed) >= PASS_OVER:
                    break
                continue
            if creates[cell.backend] <= 0:  # the provider's create rate: wait for the next one
                state.put_back([cell])
                paced = cell.backend
                break
            expected_sec = state.expected(cell, now)
            # a duration the cost may scale with: known from history or this run, not the
            # high quantile an unknown task is explored at (that held a 2-s quickstart cell at $27)
            known_sec = expected_sec if state.book.known(cell.task) else 0.0
            expected = self.spend.expected(cell, known_sec)
            if room is not None and asked_usd + expected.usd > room:
                state.put_back([cell])
                over = expected
                break
            creates[cell.backend] -= 1
            checked.append(cell)
            scope = self.circuit.blocks(account="", backend=cell.backend)
            if scope is not None:
                state.put_back([*(r.cell for r in requests), cell])
                return Round((), tuple(checked), Halt(ev.StopReason.CIRCUIT, (
                    f"recovery circuit open for {scope} (signature {self.circuit.open_scopes[scope]}); "
                    "resume with --hypothesis TEXT")))
            probing = self.circuit.probing_for(account="", backend=cell.backend)
            if probing and (requests or not self.circuit.probe_free(probing)):
                state.put_back([cell])
                break
            cell_state = state.cells[cell.id]
            request = LeaseRequest(f"{self.run_id}/{cell.id}#{self.leases}", cell,
                                   self.horizons[(cell.task, cell.arm)], expected_sec, cell_state.last_account,
                                   typical, expected.usd, cell_state.shuns, judge)
            if judge is not None:
                judge_free[judge] -= 1
            requests.append(request)
            costed[request.lease_id] = known_sec
            asked_usd += expected.usd
            shunning += cell_state.shuns
            self.leases += 1
            if probing:
                self.probe_leases[request.lease_id] = probing
                break
        return Round(tuple(requests), tuple(checked), over=over, paced=paced, costed_sec=costed)

    def _reservation(self, state: RunState, views: Sequence[AccountView], now: float,
                     typical: float) -> Reservation:
        """Long cells kept for the window-bound accounts' slots (ray_bench/scheduler/reserve.py)."""
        if not self.window_rates or not state.pending:
            return Reservation()
        excluded = {n for n in self.window_rates if self.circuit.blocks(account=n, backend="") is not None}
        return reservation(self.window_rates, views, typical_sec=typical,
                           work_sec=state.pending.work() + state.book.residual(now),
                           profile=state.pending.profile(), exclude=excluded)

    def blocked_accounts(self) -> frozenset[str]:
        """The accounts whose recovery circuit is open (no hypothesis yet)."""
        return frozenset(n for n in self.accounts if self.circuit.blocks(account=n, backend="") is not None)

    def excluded(self) -> frozenset[str]:
        """The accounts the batch is not offered to: circuit open, or on probation (an account
        on probation takes only its probe; a run or backend probe goes to any account)."""
        return self.blocked_accounts() | {n for n in self.accounts if f"account:{n}" in self.circuit.probing}

    def account_probes(self) -> list[tuple[str, str]]:
        """(scope, account) of the account scopes on probation that may take a probe now, in
        scope order: each is offered one request of the batch, alone."""
        return [(scope, name) for scope in sorted(self.circuit.probing)
                if (name := scope_account(scope)) is not None and name in self.accounts
                and self.circuit.probe_free([scope])]

    def probe_offer(self, requests: Sequence[LeaseRequest], granted: dict[str, str]) -> LeaseRequest | None:
        """The request to offer an account on probation: the first not granted and not already
        another scope's probe."""
        return next((r for r in requests if r.lease_id not in granted and r.lease_id not in self.probe_leases),
                    None)

    def probe_granted(self, request: LeaseRequest, scope: str) -> None:
        """The account of ``scope`` took ``request`` as its probe."""
        self.probe_leases[request.lease_id] = [scope]

    # -- after the gate -------------------------------------------------------------------------

    def started(self, round_: Round, request: LeaseRequest, row: AttemptRow, now: float) -> list[ev.CircuitProbe]:
        """``request`` was granted and sent to a runner as attempt ``row``: reserve its cost and
        its create; when it is a circuit probe, mark it in flight. Returns the probe events."""
        self.spend.reserve(request.lease_id, request.cell, round_.costed_sec.get(request.lease_id, 0.0))
        self.quota_fit.on_create_sent(request.cell.backend, now)
        scopes = self.probe_leases.pop(request.lease_id, None)
        if not scopes:
            return []
        self.circuit.probe_started(scopes, row.attempt_id)
        probes = [(scope, self.circuit.probing[scope]) for scope in scopes]
        return [ev.CircuitProbe(scope=scope, fingerprint=probe.fingerprint, hypothesis=probe.hypothesis,
                                attempt_id=row.attempt_id, cell_id=row.cell_id, account=row.account)
                for scope, probe in probes]

    def refused(self, request: LeaseRequest) -> None:
        """No account took ``request``: it is no one's probe any more."""
        self.probe_leases.pop(request.lease_id, None)

    def conclude(self, round_: Round, waiting: int, inflight: int, now: float) -> Wait | Halt | AskGate:
        """What the round comes to, once the granted requests started and ``waiting`` of them
        went back to the queue; ``inflight``: the attempts running now."""
        if not round_.requests:
            if round_.over is not None:
                if not inflight:
                    return Halt(ev.StopReason.SPEND, self.spend.refusal(round_.over))
                return Wait("waiting: the run's spend limit holds the next cell until a running one finishes")
            return Wait(self._paced(round_.paced, now))
        if not waiting or inflight:
            return Wait(AT_LIMIT if waiting else self._paced(round_.paced, now))
        blocked = self.blocked_accounts()  # an account on probation may still take its probe
        if blocked and blocked >= self.accounts:
            return Halt(ev.StopReason.ACCOUNTS, "no account can be admitted: the recovery circuit is open for every "
                                    "account; resume with --hypothesis TEXT")
        judges = [r.judge for r in round_.requests]
        return AskGate(min(r.horizon_sec for r in round_.requests), blocked,
                       frozenset(j for j in judges if j is not None) if None not in judges else frozenset())

    def when_idle(self, blocked: tuple[float, str] | None, stalled: str | None, now: float) -> Wait | Halt:
        """Nothing runs and nothing could start: wait for the account that frees itself first,
        or stop when none will without an operator (``stalled``, asked only when none blocks)."""
        self.wake_at = blocked[0] if blocked is not None else None
        if blocked is not None:
            return Wait(waiting_note(blocked[1], blocked[0] - now))
        if stalled is not None and budget_only(stalled):
            return Halt(ev.StopReason.BUDGET, f"every account's own budget is spent: {stalled} (limits.spend_usd "
                                  "counts every run on the state root): raise it in the accounts file "
                                  "or add an account, then plan again")
        if stalled is not None:
            return Halt(ev.StopReason.ACCOUNTS, f"no account can admit a cell without an operator: {stalled}; "
                                    "fix the accounts (`ray-bench accounts status`), then resume")
        return Wait(AT_LIMIT)

    def _paced(self, backend: str | None, now: float) -> str | None:
        """The note (and the wake-up) when ``backend``'s create rate held cells back."""
        if backend is None:
            return None
        wait = self.quota_fit.create_wait(backend, now)
        self.wake_at = now + wait
        return waiting_note(f"{backend} creates per minute", wait)
