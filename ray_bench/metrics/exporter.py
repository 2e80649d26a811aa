"""The Prometheus exporter the driver owns for one run.

The driver calls it at events (an attempt started or finished, a snapshot of the
accounts, a circuit opening); it serves ``/metrics`` over HTTP from its own
:class:`~prometheus_client.CollectorRegistry` and advertises itself to Prometheus with a
file_sd target file under the state root, so one scrape config finds every run.

Pace-derived gauges (``raybench_pace_rows_per_minute`` and friends) are computed when
Prometheus scrapes, from the injected clock: if the driver blocks for a while, the pace
still decays towards zero instead of freezing at its last value, which is exactly when
the stall alert needs it.

Metric names and label keys are a fixed contract (DESIGN.md, "Metrics").
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args
from wsgiref.simple_server import WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)

from ray_bench.accounts.health import reason_class
from ray_bench.errors import UserInputError
from ray_bench.evidence.classify import fold_ids
from ray_bench.ledger.events import ClosedPhase
from ray_bench.metrics.lasting import LastingGauges
from ray_bench.metrics.pace import PaceSnapshot, PaceTracker
from ray_bench.metrics.pace_collector import PaceCollector
from ray_bench.metrics.scrapes import SCRAPE_ENVIRON
from ray_bench.metrics.targets import (
    advertised,
    host_file,
    hostport,
    prune_stale_targets,
    remove_target,
    retire_linger,
    target_file,
    text_file,
    write_atomic,
    write_target,
)

# Every counter would otherwise get a `_created` twin: twice the series, no panel uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

CellState = Literal["pending", "running", "valid", "failed", "cancelled"]
CELL_STATES: tuple[CellState, ...] = ("pending", "running", "valid", "failed", "cancelled")

AccountState = Literal["healthy", "degraded", "cooling", "expired", "held", "disabled", "unknown"]
#: ``unknown`` is a state the exporter does not know: never counted as usable (nor as healthy).
ACCOUNT_STATES: tuple[AccountState, ...] = (
    "healthy",
    "degraded",
    "cooling",
    "expired",
    "held",
    "disabled",
    "unknown",
)

Phase = Literal["sandbox_create", "agent", "verifier", "collect", "total"]
PHASES: tuple[Phase, ...] = ("sandbox_create", "agent", "verifier", "collect", "total")

#: Sandbox states the exporter always reports (0 when absent). Every one of them is a live
#: sandbox: one left after its run ended is residue. ``orphaned`` is a sandbox found by
#: label whose attempt is no longer running (a stale attempt's, before cleanup).
SANDBOX_STATES: tuple[str, ...] = ("creating", "running", "deleting", "orphaned")

#: Cells take from seconds (a crashed sandbox) to hours (a long agent run).
CELL_SECONDS_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, float("inf"),
)  # fmt: skip

#: Values of ``raybench_run_phase{phase}``: ``status``'s states of a run that has a session
#: (a driver starting counts as running, as ``status`` says).
RUN_PHASES: tuple[str, ...] = ("running", *get_args(ClosedPhase))

#: A reason label's length at most: a class and a sentence, not a stack trace.
REASON_LABEL_CHARS = 120

#: ``failure_class`` label of an attempt that did not fail.
NO_FAILURE = "none"

#: How long a starting exporter waits for the port of the linger it retires (it turns each second).
_RETIRE_SEC = 5.0

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class AccountView:
    """What the exporter needs from one account's snapshot (never a credential)."""

    name: str
    state: AccountState
    inflight: int
    limit: int
    #: The account's last error as its health kept it (folded before it becomes a label).
    last_error: str = ""


class MetricsExporter:
    """Serves the ``raybench_*`` metrics of one run; the driver calls it at events.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. Every method is
    safe to call from several threads.
    """

    def __init__(
        self,
        run_id: str,
        state_root: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        arms: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        started_at: float | None = None,
    ) -> None:
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"run id {run_id!r} is not usable as a file name")
        self.run_id = run_id
        self.state_root = Path(state_root)
        self.host = host
        self._requested_port = port
        self._clock = clock
        self._lock = threading.Lock()
        self._pace = PaceTracker(clock, started_at=started_at)
        self._remaining = 0
        self._deadline: float | None = None
        self._live = True
        self._accounts: set[str] = set()
        #: account -> the (reason_class, reason) labels its reason series has now.
        self._reasons: dict[str, tuple[str, str]] = {}
        self._circuit_reasons: dict[str, tuple[str, str]] = {}  # scope -> (failure_class, reason)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._scrapes = 0
        self._last_scrape_began = float("-inf")
        self._scraped = threading.Condition()
        #: The addresses Prometheus scraped this exporter from: its linger waits for each.
        self._scrapers: set[str] = set()

        self.registry = CollectorRegistry()
        r, run = self.registry, ["run"]
        self._cells = Gauge("raybench_cells", "Cells by state.", [*run, "state"], registry=r)
        self._attempts = Counter(
            "raybench_attempts",
            "Finished attempts by outcome and failure class ('none' when it did not fail).",
            [*run, "arm", "account", "outcome", "failure_class"],
            registry=r,
        )
        self._started = Counter(
            "raybench_attempts_started",
            "Attempts started (a started attempt is consumed even if it fails).",
            [*run, "arm", "account", "backend"],
            registry=r,
        )
        self._inflight = Gauge(
            "raybench_attempts_inflight",
            "Attempts started and not yet finished, as seen by this driver.",
            [*run, "arm", "backend"],
            registry=r,
        )
        self._valid_rows = Counter(
            "raybench_valid_rows", "Valid rows (accepted attempts).", [*run, "arm"], registry=r
        )
        self._reward = Counter(
            "raybench_reward",
            "Sum of the rewards of valid rows; divide by raybench_valid_rows_total for the mean.",
            [*run, "arm"],
            registry=r,
        )
        self._account_state = Gauge(
            "raybench_account_state",
            "1 for the account's current health state, 0 for the others.",
            ["account", "state"],
            registry=r,
        )
        self._account_reason = Gauge(
            "raybench_account_reason_info",
            "1 for why an account is not healthy: its reason class (auth, rate_limited, server_error, "
            "operator, other) and its last error with ids, numbers, paths and opaque tokens folded "
            "(as failure fingerprints fold them, so a repeat is one series and no secret is a label).",
            ["account", "reason_class", "reason"],
            registry=r,
        )
        self._account_inflight = Gauge(
            "raybench_account_inflight", "Cells in flight on the account.", ["account"], registry=r
        )
        self._account_limit = Gauge(
            "raybench_account_limit",
            "The account's current concurrency limit (adaptive).",
            ["account"],
            registry=r,
        )
        self._rate_limited = Counter(
            "raybench_rate_limit_signals",
            "Rate-limit signals (429s, Retry-After, quota errors) by account and source.",
            ["account", "source"],
            registry=r,
        )
        self._healthy_capacity = Gauge(
            "raybench_healthy_capacity",
            "Concurrent cells the healthy accounts and backends admit now.",
            run,
            registry=r,
        )
        self._sandboxes = Gauge(
            "raybench_sandboxes", "Live sandboxes by backend and state.", ["backend", "state"],
            registry=r,
        )  # fmt: skip
        self._cell_seconds = Histogram(
            "raybench_cell_seconds",
            "Seconds spent per cell attempt, by arm and phase.",
            ["arm", "phase"],
            buckets=CELL_SECONDS_BUCKETS,
            registry=r,
        )
        self._spend = Counter(
            "raybench_spend_usd", "Spend reported by attempts, in USD.", ["account"], registry=r
        )
        self._circuit = Gauge(
            "raybench_circuit_open",
            "1 while the recovery circuit of a scope (account:X, backend:Y, run) is open.",
            [*run, "scope"],
            registry=r,
        )
        self._circuit_reason = Gauge(
            "raybench_circuit_reason_info",
            "1 for the failure that opened a scope's circuit: its class and its message folded as "
            "fingerprints fold it (no id, number, path or opaque token in a label).",
            [*run, "scope", "failure_class", "reason"],
            registry=r,
        )
        self._halted = Gauge(
            "raybench_halted", "1 while a resource halt is active.", run, registry=r
        )
        self._finished = Gauge(
            "raybench_run_finished", "1 once the run has ended (success or stop).", run, registry=r
        )
        self._phase = Gauge(
            "raybench_run_phase",
            "1 for the run's phase as `status` says it (running, paused, stopped, finished), 0 for the "
            "others: live panels (pace, finish estimate, heartbeat age, account state) show running runs only.",
            [*run, "phase"],
            registry=r,
        )
        self._session_start = Gauge(
            "raybench_run_started_timestamp_seconds",
            "Unix time this driver session started (the ledger's run_started): pace counts from here, "
            "in the exporter, the recording rules and `status` alike.",
            run,
            registry=r,
        )
        self.registry.register(PaceCollector(run_id, self.refresh, self._note_scrape))
        self.lasting = LastingGauges(r, run_id)
        self.lasting.present(arms=arms)
        self.lasting.beat(self._clock())

        for state in CELL_STATES:
            self._cells.labels(run_id, state).set(0)
        for arm in arms:
            self._valid_rows.labels(run_id, arm)
            self._reward.labels(run_id, arm)
        self._healthy_capacity.labels(run_id).set(0)
        self._halted.labels(run_id).set(0)
        self._finished.labels(run_id).set(0)
        self._set_phase("running")
        self._session_start.labels(run_id).set(self._pace.started_at)

    def declare(self, *, arms: Sequence[str], accounts: Sequence[str], backends: Sequence[str],
                failure_classes: Sequence[str]) -> None:
        """Create every series a dashboard panel or alert asks about, at zero, so that rate()
        and increase() answer 0 rather than nothing before the first event of their kind."""
        for arm in arms:
            for account in accounts:
                for cls in failure_classes:
                    self._attempts.labels(self.run_id, arm, account, "failed", cls)
                self._attempts.labels(self.run_id, arm, account, "valid", NO_FAILURE)
                for backend in backends:
                    self._started.labels(self.run_id, arm, account, backend)
            for phase in PHASES:
                self._cell_seconds.labels(arm, phase)
        for account in accounts:
            self._rate_limited.labels(account, "provider")
            self._spend.labels(account)
        self._circuit.labels(self.run_id, "run").set(0)
        for backend in backends:
            self._circuit.labels(self.run_id, f"backend:{backend}").set(0)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port actually bound (the requested one before :meth:`start`)."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        """The metrics URL, e.g. ``http://127.0.0.1:9464/metrics``."""
        return f"http://{hostport(advertised(self.host), self.port)}/metrics"

    @property
    def target_file(self) -> Path:
        return target_file(self.state_root, self.run_id)

    def start(self) -> None:
        """Serve ``/metrics`` and write this run's file_sd target file. Targets left by dead
        drivers on this host are removed first, once their DriverDown alert had time to fire
        (this run's own at once: this exporter replaces it)."""
        if self._server is not None:
            return
        prune_stale_targets(self.state_root, over=(self.run_id,))
        # the linger of this run's last session gives way (and its port, when it is fixed)
        retiring = time.monotonic() + _RETIRE_SEC if retire_linger(self.target_file) else 0.0
        while True:
            try:
                server, thread = start_http_server(self._requested_port, addr=self.host, registry=self.registry)
                break
            except OSError as exc:
                if time.monotonic() < retiring:
                    time.sleep(0.1)
                    continue
                if retiring:  # claimed from a linger, and not served
                    remove_target(self.target_file, only_pid=os.getpid())
                raise UserInputError(
                    f"cannot listen on {hostport(self.host, self._requested_port)}: {exc.strerror}",
                    where="metrics exporter",
                    fix="choose a free port, or port 0 to pick one",
                ) from exc
        app = server.get_app()
        assert app is not None  # make_server set it
        server.set_app(self._seeing_scrapers(app))
        self._server, self._thread = server, thread
        # A linger's figures left by an earlier session are not what this driver serves.
        text_file(self.target_file).unlink(missing_ok=True)
        write_atomic(host_file(self.target_file), self.host)
        write_target(self.target_file, hostport(advertised(self.host), self.port), self.run_id, os.getpid())

    def stop(self, final_scrape_timeout: float = 0.0, linger_sec: float = 0.0) -> None:
        """Stop serving; then hand the final figures to a linger process for ``linger_sec``
        seconds, or withdraw the target file at once. Safe to call twice.

        With ``final_scrape_timeout`` > 0, first wait (at most that many seconds) for the next
        scrape that *began* after this call to complete (one under way may have read the
        state before the last events). Pass at least two scrape intervals.
        """
        if self._server is not None and final_scrape_timeout > 0:
            called = time.monotonic()
            with self._scraped:
                self._scraped.wait_for(lambda: self._last_scrape_began >= called, final_scrape_timeout)
        final = generate_latest(self.registry) if self._server is not None and linger_sec > 0 else None
        server, thread = self._server, self._thread
        port = self.port
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        if final is not None:
            # not at the top: `python -m ray_bench.metrics.linger` imports this package first
            from ray_bench.metrics.linger import spawn

            with self._scraped:
                scrapers = frozenset(self._scrapers)
            spawn(exposition=final, host=self.host, port=port, target=self.target_file, linger_sec=linger_sec,
                  handed_from=os.getpid(), scrapers=scrapers)
        else:
            remove_target(self.target_file, only_pid=os.getpid())

    def __enter__(self) -> MetricsExporter:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- events from the driver --------------------------------------------------------

    def attempt_started(self, arm: str, account: str, backend: str) -> None:
        self._started.labels(self.run_id, arm, account, backend).inc()
        self._inflight.labels(self.run_id, arm, backend).inc()

    def attempt_finished(
        self,
        arm: str,
        account: str,
        backend: str,
        *,
        outcome: str,
        failure_class: str | None,
        valid: bool,
        reward: float | None,
        phase_seconds: Mapping[str, float],
        cost_usd: float | None,
        finished_at: float,
    ) -> None:
        """Count one finished attempt.

        ``valid`` means it became the cell's row (the accepted attempt); only those feed
        pace. ``failure_class`` is ``None`` (exported as ``none``) when it did not fail.
        ``phase_seconds`` maps phases of :data:`PHASES` to durations; missing phases are
        not observed. ``finished_at`` is unix seconds. ``cost_usd`` None: unknown (counted in
        ``raybench_run_unknown_cost_attempts``, never as $0).
        """
        unknown = set(phase_seconds) - set(PHASES)
        if unknown:
            raise ValueError(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
        self._inflight.labels(self.run_id, arm, backend).dec()
        self._attempts.labels(self.run_id, arm, account, outcome, failure_class or NO_FAILURE).inc()
        for phase, seconds in phase_seconds.items():
            self._cell_seconds.labels(arm, phase).observe(seconds)
        if cost_usd is not None and cost_usd > 0:
            self._spend.labels(account).inc(cost_usd)
        self.lasting.row(arm, account, cost_usd, valid, reward)
        if valid:
            self._valid_rows.labels(self.run_id, arm).inc()
            self._reward.labels(self.run_id, arm).inc(reward or 0.0)
            with self._lock:
                self._pace.record(finished_at)

    def rate_limited(self, account: str, source: str = "provider") -> None:
        """Count one rate-limit signal (``source``: provider, sandbox, quota...)."""
        self._rate_limited.labels(account, source).inc()

    def set_cells(self, counts: Mapping[str, int]) -> None:
        """Cells by state (missing states are 0). Remaining = pending + running."""
        unknown = set(counts) - set(CELL_STATES)
        if unknown:
            raise ValueError(f"unknown cell states {sorted(unknown)}; known: {CELL_STATES}")
        for state in CELL_STATES:
            self._cells.labels(self.run_id, state).set(counts.get(state, 0))
        with self._lock:
            self._remaining = counts.get("pending", 0) + counts.get("running", 0)

    def set_accounts(self, snapshots: Iterable[AccountView]) -> None:
        """The full set of accounts now; accounts missing from it are withdrawn."""
        seen: set[str] = set()
        for view in snapshots:
            if view.state not in ACCOUNT_STATES:
                raise ValueError(f"account {view.name}: unknown state {view.state!r}")
            seen.add(view.name)
            for state in ACCOUNT_STATES:
                self._account_state.labels(view.name, state).set(int(state == view.state))
            self._account_inflight.labels(view.name).set(view.inflight)
            self._account_limit.labels(view.name).set(view.limit)
            self._set_reason(view)
            self._spend.labels(view.name)  # present at 0 so rate() sees the first spend
            self.lasting.present(accounts=[view.name])
        with self._lock:
            gone, self._accounts = self._accounts - seen, seen
        for name in gone:
            for state in ACCOUNT_STATES:
                self._account_state.remove(name, state)
            self._account_inflight.remove(name)
            self._account_limit.remove(name)
            self._drop_reason(name)

    def _set_reason(self, view: AccountView) -> None:
        """One reason series per account that is not healthy, replaced when the reason changes."""
        cls = reason_class(view.state, view.last_error) if view.state != "healthy" else ""
        labels = (cls, fold_ids(view.last_error)[:REASON_LABEL_CHARS].strip() or view.state) if cls else None
        with self._lock:
            before = self._reasons.get(view.name)
            if labels == before:
                return
            self._reasons.pop(view.name, None)
            if labels is not None:
                self._reasons[view.name] = labels
        if before is not None:
            self._account_reason.remove(view.name, *before)
        if labels is not None:
            self._account_reason.labels(view.name, *labels).set(1)

    def _drop_reason(self, name: str) -> None:
        with self._lock:
            before = self._reasons.pop(name, None)
        if before is not None:
            self._account_reason.remove(name, *before)

    def set_healthy_capacity(self, n: int) -> None:
        self._healthy_capacity.labels(self.run_id).set(n)

    def set_sandboxes(self, backend: str, counts: Mapping[str, int]) -> None:
        """Live sandboxes of ``backend`` by state (missing states of SANDBOX_STATES are 0)."""
        for state in {*SANDBOX_STATES, *counts}:
            self._sandboxes.labels(backend, state).set(counts.get(state, 0))

    def set_circuit(self, scope: str, open: bool, failure_class: str = "", message: str = "") -> None:
        """Open or close the circuit of ``scope``: ``account:X``, ``backend:Y`` or ``run``; an
        open one with the failure that opened it (its reason series, gone when it closes)."""
        self._circuit.labels(self.run_id, scope).set(int(open))
        labels = ((failure_class or "unknown", fold_ids(message)[:REASON_LABEL_CHARS].strip() or "-")
                  if open and (failure_class or message) else None)
        with self._lock:
            before = self._circuit_reasons.pop(scope, None)
            if labels is not None:
                self._circuit_reasons[scope] = labels
        if before is not None and before != labels:
            self._circuit_reason.remove(self.run_id, scope, *before)
        if labels is not None:
            self._circuit_reason.labels(self.run_id, scope, *labels).set(1)

    def set_halted(self, halted: bool) -> None:
        self._halted.labels(self.run_id).set(int(halted))

    def set_deadline(self, ts: float | None) -> None:
        """The run's deadline (unix seconds), or ``None`` for none."""
        with self._lock:
            self._deadline = ts
        self.lasting.set_deadline(ts)

    def session_started(self, ts: float) -> None:
        """This driver session's start (the ledger's ``run_started``): pace counts from here,
        exactly as ``status`` does, and so do the recording rules, which read it from
        ``raybench_run_started_timestamp_seconds`` (until now the gauge kept the exporter's
        construction, a Ray start earlier than the start the exporter's own pace used)."""
        with self._lock:
            self._pace.started_at = ts
        self._session_start.labels(self.run_id).set(ts)

    def set_finished(self, finished: bool = True, phase: ClosedPhase = "finished") -> None:
        """Mark the run's session ended, leaving the run ``phase``; live sandboxes after this are
        residue, and its pace is history (no finish estimate nor deadline gap, as ``status``)."""
        self._finished.labels(self.run_id).set(int(finished))
        self._set_phase(phase if finished else "running")

    def _set_phase(self, phase: str) -> None:
        with self._lock:
            self._live = phase == "running"
        for known in RUN_PHASES:
            self._phase.labels(self.run_id, known).set(int(known == phase))

    def refresh(self, now: float | None = None) -> PaceSnapshot:
        """The pace-derived values a scrape at ``now`` shows (default: the clock).

        Scrapes compute them anyway; this is for ``status`` output and tests.
        """
        with self._lock:
            snap = self._pace.snapshot(self._remaining, self._deadline, now)
            return snap if self._live else snap.history()

    # -- internals ---------------------------------------------------------------------

    def _seeing_scrapers(self, app: WSGIApplication) -> WSGIApplication:
        """``app`` (prometheus_client's WSGI app), noting the address of each Prometheus scrape."""
        def seen(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            if SCRAPE_ENVIRON in environ:
                with self._scraped:
                    self._scrapers.add(str(environ.get("REMOTE_ADDR", "")))
            return app(environ, start_response)
        return seen

    def _note_scrape(self, began: float) -> None:
        with self._scraped:
            self._scrapes += 1
            self._last_scrape_began = max(self._last_scrape_began, began)
            self._scraped.notify_all()
