"""The library functions behind the CLI: one per command."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_bench.artifacts.store import checked_store
from ray_bench.cells.nodes import CheckInputs
from ray_bench.commands.pause import pause_run  # noqa: F401 - the library's pause (the CLI imports it alone)
from ray_bench.commands.receipt import render_receipt
from ray_bench.commands.verify import verify_plan, verify_receipt
from ray_bench.config.secrets import refuse_operator_text, refuse_secret_text
from ray_bench.errors import PlanError, RayBenchError, RunStopped, UserInputError
from ray_bench.evidence.decisions import refuse_official
from ray_bench.heap import freeze, kept
from ray_bench.ledger.store import Ledger
from ray_bench.options import check_port, check_ray_address, check_state_root
from ray_bench.plan.compile import ArmFilter, PlanRequest, compile_plan
from ray_bench.plan.store import (
    check_confirmation,
    check_confirmation_form,
    load_plan_file,
    sealed_plan,
    write_plan,
)
from ray_bench.runroot import RunPaths, disk_full_detail, hold_lock, is_disk_full, refuse_unlockable
from ray_bench.sandboxes.audit import audit_plan
from ray_bench.sandboxes.host import read_available_mb
from ray_bench.sandboxes.supervisor import clear_halt as archive_halt
from ray_bench.sandboxes.supervisor import docker_url_of, reserve_of, uses_docker
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from ray_bench.scheduler.observers import NullObserver, Observers, RunObserver
from ray_bench.state import default_state_root
from ray_bench.textsafe import is_utf8, shown_name

if TYPE_CHECKING:
    from ray_bench.models.plan import Plan
    from ray_bench.onray.starting import RayStart
    from ray_bench.onray.supervisors import RaySupervision
    from ray_bench.scheduler.signals import SignalStop

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_RELATIVE = re.compile(r"^\+?(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT_SEC = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class MetricsSettings:
    """Where the run's Prometheus exporter listens and advertises itself."""

    host: str = "127.0.0.1"
    port: int = 0
    state_root: Path = field(default_factory=default_state_root)
    deadline: float | None = None
    #: Seconds to wait at the end for a scrape of the final state (at least two scrape
    #: intervals); needed only without a linger, which serves the final state anyway.
    final_scrape_sec: float = 0.0
    #: How long a finished run's target stays, serving its final figures (seconds).
    linger_sec: float = 0.0


def parse_deadline(text: str, now: float | None = None) -> float:
    """``2026-12-04T18:00`` (local time, or with an offset) or a duration from now: ``36h``."""
    base = time.time() if now is None else now
    found = _RELATIVE.match(text.strip())
    if found:
        return base + float(found.group(1)) * _UNIT_SEC[found.group(2)]
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UserInputError(f"cannot read deadline {text!r}", where="--deadline",
                             fix="use an ISO time like 2026-12-04T18:00 or a duration like 36h") from None


def parse_duration(text: str, where: str) -> float:
    """``15m``, ``90s``, ``2h``, ``0`` -> seconds."""
    found = _RELATIVE.match(text.strip())
    if text.strip() == "0":
        return 0.0
    if not found:
        raise UserInputError(f"cannot read duration {text!r}", where=where, fix="use a duration like 15m, 90s or 0")
    return float(found.group(1)) * _UNIT_SEC[found.group(2)]


@dataclass
class PlanResult:
    run_root: Path
    identity: str
    cells: int
    warnings: list[str]


def default_run_id(suite_name: str) -> str:
    return f"{suite_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def plan_run(*, suite: Path, accounts: Path, runs_dir: Path, run_id: str | None = None,
             selection: Path | None = None, reps: int | None = None, arms: ArmFilter = "all",
             parallel: int | None = None, counterpart_runs: list[Path] | None = None,
             history: dict[str, float] | None = None, task_ids: tuple[str, ...] = (),
             limit: int | None = None, force_build: bool = False,
             skip_unsupported: bool = False,
             rewards: dict[tuple[str, str, int], float] | None = None, strict: bool = False,
             costs: dict[str, float] | None = None, history_runs: list[Path] | None = None) -> PlanResult:
    refuse_secret_text(run_id, "--run-id")
    for option, path in (("--suite", suite), ("--accounts", accounts), ("--selection-file", selection),
                         ("--runs-dir", runs_dir), *(("--runs", p) for p in counterpart_runs or [])):
        refuse_undecodable_path(path, option)
    if run_id is not None and not _RUN_ID.fullmatch(run_id):  # whole: "$" lets "x\n" through
        raise UserInputError(f"run id {run_id!r} is not allowed", where="--run-id",
                             fix="use letters, digits, '.', '_' and '-'")
    placeholder = run_id or "pending"
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id=placeholder, selection=selection,
                                    reps=reps, arms=arms, parallel=parallel,
                                    counterpart_runs=counterpart_runs or [], history=history or {},
                                    task_ids=task_ids, limit=limit, force_build=force_build,
                                    skip_unsupported=skip_unsupported, rewards=rewards or {}, strict=strict,
                                    costs=costs or {}, history_runs=history_runs))
    final_id = run_id or default_run_id(plan.suite)
    run_root = runs_dir / final_id
    refuse_unusable_runs_dir(runs_dir)
    plan = plan.model_copy(update={"run_id": final_id, "run_root": str(run_root.resolve())})
    data, identity = sealed_plan(plan)
    if RunPaths(run_root).ledger.exists():
        raise PlanError("this run has already started", where=str(run_root),
                        fix="plan a new --run-id (or use `ray-bench rerun`)")
    RunPaths(run_root).refuse_orphaned_attempts()
    write_plan(plan, run_root, render_receipt(plan, identity), data)
    return PlanResult(run_root, identity, len(plan.cells), plan.warnings)


def refuse_undecodable_path(path: Path | None, option: str) -> None:
    """A path the plan records (its inputs, its run root) must be UTF-8 text: one that is not
    could be neither written into the plan's JSON nor shown (issue 58: "unexpected
    UnicodeEncodeError ... (a bug in ray-bench)")."""
    if path is not None and not is_utf8(str(path.absolute())):
        raise UserInputError(f"the path {shown_name(str(path.absolute()))} is not valid UTF-8", where=option,
                             fix="rename it, or copy it to a path whose name is UTF-8 text")


def refuse_unusable_runs_dir(runs_dir: Path) -> None:
    for parent in (runs_dir, *runs_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserInputError(f"{parent} is not a directory", where="--runs-dir",
                                     fix="name a directory for run roots")
            return


def execute_run(*, plan_path: Path, confirm: str | None, options: RunOptions,
                observer: RunObserver | None = None, clear_halt: Path | None = None,
                clearance_reason: str | None = None, metrics: MetricsSettings | None = None,
                on_metrics: Any = None, say: Callable[[str], None] | None = None,
                signals: SignalStop | None = None) -> RunOutcome:
    """Run (or resume) a confirmed plan. ``say`` hears progress lines before the driver's
    observer exists (Ray takes 10-20 s to start on a loaded host: the operator should know).
    With ``signals`` (the CLI's), SIGTERM, SIGINT and SIGHUP stop the run cleanly from the
    moment the lock is held (ray_bench.scheduler.signals)."""
    typed = {"--hypothesis": options.hypothesis, "--clearance-reason": clearance_reason}
    refuse_operator_text(typed)
    session_started = time.time() if options.session_started is None else options.session_started
    confirmed = check_confirmation_form(confirm, plan_path)
    with kept():  # the plan lives as long as the session: out of the collector's way for good
        plan, identity = load_plan_file(plan_path)
        freeze(collect=False)
    refuse_operator_text(typed, [a.route.env for a in plan.accounts])  # and the values of its routes
    verify_plan(plan, identity, plan_path, receipt=False)  # drift first; the receipt: while Ray starts (below)
    check_confirmation(plan_path, identity, confirmed)
    if metrics is not None:
        check_port(metrics.port)
        check_state_root(metrics.state_root)
    if options.state_root is not None:
        check_state_root(Path(options.state_root))
    check_ray_address(options.address)
    store = checked_store(options.artifacts)
    run_root = plan_path.resolve().parent
    refuse_official(run_root, "executed again")
    RunPaths(run_root).refuse_orphaned_attempts()
    if (clear_halt is not None or clearance_reason is not None) and (clear_halt is None or not clearance_reason):
        raise UserInputError("--clear-halt and --clearance-reason go together", where="execute",
                             fix="name the halt file and say why it is safe to go on")
    refuse_unlockable(run_root)
    options = session_options(options, session_started, metrics, signals)
    if say is not None:
        say(f"starting Ray ({'joining ' + options.address if options.address else 'a local instance'})")
    ray_started = time.monotonic()
    from ray_bench.onray.start import RAY_MESSAGES_FILE, send_ray_messages_to  # neither imports Ray
    from ray_bench.onray.starting import RayStart

    # a dead node's raylet report, not stdout; the accounts' credential values scrubbed
    send_ray_messages_to(run_root / RAY_MESSAGES_FILE,
                         [os.environ.get(v, "") for a in plan.accounts for v in a.route.env.values()])
    # Ray comes up on a thread of its own while the receipt is checked, the lock taken and the
    # exporter started (ray_bench.onray.starting); a refusal from here stops it again.
    start = RayStart(options.address)
    try:
        receipt = verify_receipt(plan, identity, plan_path)
        return _execute_started(plan, identity, run_root, start, ray_started, options, receipt, observer=observer,
                                clear_halt=clear_halt, clearance_reason=clearance_reason, metrics=metrics,
                                on_metrics=on_metrics, say=say, signals=signals, store=store)
    finally:
        start.stop()  # Ray's end (join_ray stopped it already) or a refusal's


def _execute_started(plan: Plan, identity: str, run_root: Path, start: RayStart, ray_started: float,
                     options: RunOptions, receipt: str, *, observer: RunObserver | None, clear_halt: Path | None,
                     clearance_reason: str | None, metrics: MetricsSettings | None, on_metrics: Any,
                     say: Callable[[str], None] | None, signals: SignalStop | None,
                     store: Any) -> RunOutcome:
    """The run, from its lock on, while Ray starts (:func:`execute_run`); ``receipt``: the digest
    of the receipt checked, recorded in ``run_started`` for the run's resumes."""
    with hold_lock(run_root), _handling(signals):
        if clear_halt is not None:
            assert clearance_reason  # execute_run checked both
            archived = archive_halt(run_root, clear_halt, clearance_reason)
            Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity).event(
                "halt_cleared", {"archived": str(archived), "reason": clearance_reason})
        exporter = metrics_observer = None
        if metrics is not None:
            # prometheus_client: ~45 ms of CPU on top of this module; only a run with metrics pays it
            from ray_bench.metrics.exporter import MetricsExporter
            from ray_bench.metrics.observer import MetricsObserver

            exporter = MetricsExporter(plan.run_id, metrics.state_root, metrics.host, metrics.port,
                                       arms=[a.name for a in plan.arms])
            exporter.set_deadline(metrics.deadline)
            try:
                exporter.start()
            except OSError as exc:
                raise UserInputError(f"cannot serve metrics on {metrics.host}:{metrics.port}: "
                                     f"{exc.strerror or exc}", where="--metrics-port",
                                     fix="pick a free port, 0 for any, or --no-metrics") from None
            if on_metrics is not None:
                on_metrics(exporter)
            metrics_observer = MetricsObserver(exporter, plan, run_root)
            metrics_observer.prime()  # the run as its ledger has it, while Ray starts
            observer = Observers(observer or NullObserver(), metrics_observer)
        try:
            with join_ray(options.address, start):
                if signals is not None:
                    signals.install()  # again: a Ray started on this thread replaces the SIGTERM handler
                if say is not None:
                    say(f"Ray ready in {time.monotonic() - ray_started:.1f} s")
                from ray_bench.onray.admission import admission_actor  # these import Ray (started above)
                from ray_bench.onray.artifact_ship import Shipper
                from ray_bench.onray.gate import actor_gate
                from ray_bench.onray.nodes import check_nodes, ray_nodes
                from ray_bench.onray.pool import RayPool

                # Every actor the start waits for is asked for at once, before anything is awaited:
                # each is a worker process that takes seconds to start on a loaded host
                # (tests/perf/bench_actor_start.py). The admission actor (the gate gets it by name),
                # each node's resource supervisor, which runs the node check too, and the runners;
                # those on nodes that fail the check are let go.
                admission_actor(options.state_root)
                alive = [n for n in ray_nodes() if n.get("Alive")]
                supervision = node_supervision(plan, [(str(n["NodeID"]), str(n.get("NodeManagerAddress", "")))
                                                      for n in alive], options)
                pool = RayPool(options.runners_per_node, nodes={str(n["NodeID"]) for n in alive},
                               artifacts=Shipper(run_root, options.artifacts, store.uri if store else None))
                checks = check_nodes(CheckInputs.of(plan), alive, on=supervision.checkers())
                passed = [c for c in checks if c.ok]
                supervision.keep({c.node_id for c in passed})
                pool.keep({c.node_id for c in passed})
                if store is not None:  # every node writes a marker, the driver reads it back
                    from ray_bench.onray.store_probe import refuse_unshared_store  # Ray (above)

                    refuse_unshared_store(store, plan.run_id, [(c.node_id, c.address) for c in passed])
                driver = Driver(plan, identity, run_root, pool, actor_gate(plan, options.state_root), supervision,
                                observer=observer, options=options, node_checks=checks, receipt=receipt)
                return driver.run()
        except Exception as exc:
            # A full disk met by whatever process of the run (the admission actor's accounts.sqlite
            # in the state root, a gate call while the driver closes): the one documented stop.
            if isinstance(exc, RayBenchError) or not is_disk_full(exc):
                raise
            raise RunStopped("disk_full", disk_full_detail(
                run_root, exc, state_root=Path(options.state_root or default_state_root()))) from None
        finally:
            if signals is not None:
                signals.restore()  # the run is over: a signal during the metrics linger ends it
            if metrics_observer is not None:
                metrics_observer.start_ended()
            if exporter is not None:
                exporter.stop(final_scrape_timeout=metrics.final_scrape_sec if metrics else 0.0,
                              linger_sec=metrics.linger_sec if metrics else 0.0)


def session_options(options: RunOptions, session_started: float, metrics: MetricsSettings | None,
                    signals: SignalStop | None) -> RunOptions:
    """The session's options, built once before the lock: when it began, the metrics' state
    root and deadline where the options name none, and the stop signals the CLI receives."""
    return replace(
        options, session_started=session_started,
        state_root=options.state_root if options.state_root is not None or metrics is None else metrics.state_root,
        deadline=options.deadline if options.deadline is not None or metrics is None else metrics.deadline,
        stop_signal=signals.received if signals is not None else options.stop_signal)


@contextlib.contextmanager
def _handling(signals: SignalStop | None) -> Iterator[None]:
    """Stop signals are the driver's while the run holds its lock, then the previous handlers."""
    if signals is None:
        yield
        return
    signals.install()
    try:
        yield
    finally:
        signals.restore()


def node_supervision(plan: Plan, nodes: list[tuple[str, str]], options: RunOptions) -> RaySupervision:
    """A resource supervisor on each of ``nodes`` ((node id, address) pairs), which checks its
    node first and then, on those that host runners, reads it (ray_bench.onray.supervisors)."""
    from ray_bench.onray.supervisors import RaySupervision  # Ray: ~640 ms of CPU, only `execute` pays it

    injected = None if options.read_available_mb is read_available_mb else options.read_available_mb
    return RaySupervision(nodes, reserve_of(plan), plan.run_id,
                          docker_url=docker_url_of(plan), uses_docker=uses_docker(plan), read_available=injected)


@contextlib.contextmanager
def join_ray(address: str | None, start: RayStart | None = None) -> Iterator[None]:
    """Ray for the run (the one ``start`` began, else started here); failing to join or start
    it is one line, not a traceback (exit 2 for an --address that does not work, 1 when a local
    Ray cannot start)."""
    from ray_bench.onray.pool import RayContext  # Ray: ~640 ms of CPU, only `execute` pays it

    context = None if start is not None else RayContext(address)
    try:
        if start is not None:
            start.wait()
        else:
            assert context is not None
            context.__enter__()
    except Exception as exc:  # Ray's own startup failures are bare Exceptions
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if address:
            raise UserInputError(f"cannot join the Ray cluster at {address}: {first}", where="--address",
                                 fix="check the address, or leave it out to start a local Ray") from None
        raise RunStopped("ray", f"a local Ray instance did not start: {first}") from None
    try:
        yield
    finally:
        if start is not None:
            start.stop()
        else:
            assert context is not None
            context.__exit__(None, None, None)


def audit_run(run_root: Path, *, cleanup: bool) -> Any:
    """Every sandbox, volume and network labelled with the run, on each backend it used."""
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    return audit_plan(plan, cleanup=cleanup)


def run_status(run_root: Path) -> dict[str, Any]:
    """The run's status as JSON (``status --json``); see :mod:`ray_bench.status`."""
    from ray_bench.status.read import read_status  # ~65 ms of CPU on top of this module (metrics)

    return read_status(run_root).to_json()


