"""Where the driver sends attempts (:class:`~ray_bench.scheduler.ports.RunnerPool`): the thin
Ray shell (:class:`RayPool`: runners on nodes, wait, cancel, cleanup); its in-process fake is
:class:`ray_bench.cells.inprocess.InProcessPool`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.artifacts.bundle import Returned
from ray_bench.cells.artifact_node import receive
from ray_bench.cells.lost import lost_summary, one_line
from ray_bench.cells.runner import RESULT_FILE, new_summary
from ray_bench.cells.spec import DEFAULT_RUNNERS_PER_NODE, AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.suite import BackendConfig
from ray_bench.onray.cell_runner import CellRunner
from ray_bench.onray.start import init_ray
from ray_bench.sandboxes import run_labels
from ray_bench.sandboxes.base import LABEL_ATTEMPT
from ray_bench.sandboxes.capabilities import NODE_RESOURCES, capabilities
from ray_bench.sandboxes.gpus import attempt_gpus, on_gpu_nodes

if TYPE_CHECKING:
    from ray_bench.onray.artifact_ship import Shipper

NAMESPACE = "ray-bench"
BATCH_LINGER_SEC = 0.02
#: How often a cancel is sent again to an attempt that has not ended since: a ``ray.cancel`` that
#: reaches the runner before the task does is dropped (seen in CI: a ``pause --now`` 0.1 s after
#: the first starts cancelled none of the four, which ran to their 60 s timeout; the race of
#: ray-project/ray#52628, a cancel before the actor queued the task's future).
CANCEL_RESEND_SEC = 1.0
#: How many times it is sent again at most (the race is at the task's start; the runner's
#: clean-up of a cancelled attempt is shielded from every one of them).
CANCEL_RESENDS = 5
#: How often, at most, the runners' pending answers to "do you see the run root?" are looked at
#: while attempts are sent (one ``ray.wait`` for all of them). Asked at every submit, they cost
#: ``execute`` ~1 ms a cell on a loaded host while the runners were starting (py-spy of a
#: 2,000-cell launch on three nodes: 111 of 462 samples of ``submit``; tests/perf/README.md,
#: "cluster57").
SEES_POLL_SEC = 0.05
#: How long an audit waits for a replacement runner; Ray declares a lost node dead in ~10-30 s.
SETTLE_SEC = 60.0
#: How long an audit waits for Ray to declare dead a node whose runner no longer answers.
NODE_DEATH_SEC = 60.0
log = logging.getLogger(__name__)


class RayContext:
    """Joins the cluster at ``address``, or starts a local Ray instance when there is none.
    It never attaches silently to some other cluster on the machine (``address="local"``
    always starts a new one), and it shuts down only what it started."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.owns = False

    def __enter__(self) -> RayContext:
        if ray.is_initialized():
            return self
        kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False,
                                  "logging_level": logging.WARNING}
        init_ray(self.address, **kwargs)
        self.owns = True
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.owns:
            ray.shutdown()


class RayPool:
    """``runners_per_node`` :class:`CellRunner` actors per alive node (of ``nodes``, the node ids
    that passed their check, when given); each attempt goes to the least loaded one. With
    ``artifacts`` (ray_bench.artifacts), runners on nodes that do not see the driver's files
    get the task through Ray and send their attempt's directory back the same way."""

    def __init__(self, runners_per_node: int = DEFAULT_RUNNERS_PER_NODE,
                 nodes: set[str] | None = None, artifacts: Shipper | None = None) -> None:
        self._runners: list[Any] = []
        self._load: list[int] = []
        self._nodes: list[str] = []
        self._owner: dict[Any, tuple[int, Any, AttemptSpec]] = {}
        #: Attempts asked to stop: when the cancel was last sent and how often it was sent again.
        self._cancelling: dict[Any, tuple[float, int]] = {}
        #: A replacement runner's first ping until it answers (None: the runner is ready).
        self._pending: list[Any] = []
        #: Nodes runners may be placed on (None: every alive node).
        self._allowed = nodes
        #: Nodes halted by their resource supervisor: their runners take no new attempts.
        self._retired: set[str] = set()
        self._ship = artifacts
        #: Per runner: its answer to "do you see the driver's run root?" (a ref until it comes).
        self._sees: list[Any] = []
        #: When the pending answers were last looked at (monotonic; :data:`SEES_POLL_SEC`).
        self._sees_polled = float("-inf")
        #: Nodes an attempt was lost on (died with its runner or node): what they held is unknown.
        self._lost_work: set[str] = set()
        #: Nodes found dead by an audit with no attempt lost on them (:meth:`lost_nodes`).
        self._lost_idle: set[str] = set()
        alive = [n for n in ray.nodes() if n.get("Alive")  # type: ignore[no-untyped-call]
                 and (nodes is None or n["NodeID"] in nodes)]
        #: Per node resource a backend asks for (capability ``node_resource``), the nodes that
        #: advertise it; when any does, that backend's cells go only there.
        self._resource_nodes = {resource: {n["NodeID"] for n in alive if n.get("Resources", {}).get(resource)}
                                for resource in NODE_RESOURCES}
        #: Per node, the GPUs Ray detected there (its resource ``GPU``): cells asking for GPUs go to
        #: a node with as many when any has (:func:`ray_bench.sandboxes.gpus.on_gpu_nodes`).
        self._node_gpus = {n["NodeID"]: float(n.get("Resources", {}).get("GPU", 0)) for n in alive}
        for node in alive:
            for _ in range(max(1, runners_per_node)):
                self._spawn(node["NodeID"])

    def _spawn(self, node_id: str) -> int:
        runner = CellRunner.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
        self._runners.append(runner)
        self._load.append(0)
        self._nodes.append(node_id)
        self._pending.append(None)
        self._sees.append(self._ship.ask(runner) if self._ship else None)
        return len(self._runners) - 1

    def keep(self, nodes: set[str]) -> None:
        """Before the first attempt: runners only on ``nodes`` (those that passed their check),
        the others let go. ``execute`` makes the pool on every alive node before the node check
        answers, so that the runners' worker processes start beside the check's
        (tests/perf/bench_actor_start.py)."""
        self._allowed = nodes if self._allowed is None else self._allowed & nodes
        keep = [i for i, n in enumerate(self._nodes) if n in self._allowed]
        for i in sorted(set(range(len(self._runners))) - set(keep)):
            with contextlib.suppress(RayError):
                ray.kill(self._runners[i])
        self._runners = [self._runners[i] for i in keep]
        self._load = [self._load[i] for i in keep]
        self._nodes = [self._nodes[i] for i in keep]
        self._pending = [self._pending[i] for i in keep]
        self._sees = [self._sees[i] for i in keep]
        allowed = self._allowed
        self._resource_nodes = {r: nodes_with & allowed for r, nodes_with in self._resource_nodes.items()}

    def answered(self, timeout: float) -> int:
        """Wait (bounded) until every runner has answered a ping, its worker process up and the
        runner imported; how many did. ``execute`` makes its runners beside the node checks, so
        they are up by its first attempt; a caller with nothing to overlap them with waits here
        (tests/perf/bench_throughput.py, whose raw Ray side warms its workers too)."""
        pings = [runner.node_id.remote() for runner in self._runners]
        done, _ = ray.wait(pings, num_returns=len(pings), timeout=timeout)
        return len(done)

    def retire(self, node: str) -> None:
        """``node`` is under its resource reserve: its attempts finish, it gets no new ones."""
        self._retired.add(node)

    def submit(self, spec: AttemptSpec) -> Any:
        eligible = [i for i, n in enumerate(self._nodes) if n not in self._retired] or list(range(len(self._runners)))
        resource = capabilities(spec.backend).node_resource
        if resource is not None and (nodes_with := self._resource_nodes.get(resource)):
            eligible = [i for i in eligible if self._nodes[i] in nodes_with] or eligible
        eligible = on_gpu_nodes(attempt_gpus(spec.task_config), eligible, self._nodes, self._node_gpus)
        ready = [i for i in eligible if self._ready(i)]
        if not ready:  # every runner is suspect or new: wait (bounded) until one answers
            self._settle(SETTLE_SEC)
            ready = [i for i in eligible if self._ready(i)]
        index = min(ready or eligible, key=lambda i: self._load[i])
        if self._ship is not None:
            self._poll_sees()
            spec = self._ship.route(spec, self._sees[index] is True)
        ref = self._runners[index].run.remote(spec)
        self._owner[ref] = (index, self._runners[index], spec)
        self._load[index] += 1
        return ref

    def _poll_sees(self) -> None:
        """Take the runners' answers that have come (a pending one routes through Ray: slower,
        never wrong), looking at most every :data:`SEES_POLL_SEC`."""
        now = time.monotonic()
        if self._ship is None or now - self._sees_polled < SEES_POLL_SEC:
            return
        self._sees_polled = now
        pending = [i for i, asked in enumerate(self._sees) if asked is not None and not isinstance(asked, bool)]
        if not pending:
            return
        done, _ = ray.wait([self._sees[i] for i in pending], num_returns=len(pending), timeout=0)
        came = {ref.hex() for ref in done}
        for i in pending:
            if self._sees[i].hex() in came:
                self._sees[i] = self._ship.answer(self._sees[i])

    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]:
        if not refs:
            return []
        if self._cancelling:
            self._cancel_again()
            timeout = min(timeout, CANCEL_RESEND_SEC)
        ready, rest = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if ready and rest:
            # Linger a moment for the attempts finishing right behind the first: the driver then
            # admits and releases them in one batch (one round trip per actor, not per cell), for
            # a few ms of latency on cells that take minutes. Stopping at a fraction of those in
            # flight instead made rounds smaller and the driver and actors busier (driver CPU per
            # no-op cell 1.8 -> 3.2 ms). Measured on the no-op benchmark: tests/perf/README.md.
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=BATCH_LINGER_SEC)
            ready += more
        try:  # one call for the batch; any failure is sorted out attempt by attempt below
            results: list[AttemptSummary | Returned] | None = ray.get(ready, timeout=30)
        except (RayError, GetTimeoutError):
            results = None
        out = []
        for i, ref in enumerate(ready):
            index, runner, spec = self._owner.pop(ref)
            self._load[index] = max(0, self._load[index] - 1)
            out.append((ref, receive(results[i], spec) if results is not None
                        else self._result(ref, index, runner, spec)))
        return out

    def _result(self, ref: Any, index: int, runner: Any, spec: AttemptSpec) -> AttemptSummary:
        try:
            return receive(ray.get(ref, timeout=30), spec)
        except TaskCancelledError:
            return cancelled_summary_of(runner, spec)
        except RayActorError as exc:
            # The runner (or its node) died with the attempt in it.
            self._lost_work.add(self._nodes[index])
            if self._runners[index] is runner:  # replace a dead runner once, not per attempt
                self._replace(index)
            self._suspect(self._nodes[index])
            return lost_summary(spec, exc)
        except (RayError, GetTimeoutError) as exc:
            # The runner never raises: whatever Ray raised is about Ray (an object lost with
            # its node, a result that would not come back), not about the cell.
            self._lost_work.add(self._nodes[index])
            return lost_summary(spec, exc)

    def _replace(self, index: int) -> None:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")  # type: ignore[no-untyped-call]
                 and (self._allowed is None or n["NodeID"] in self._allowed) and n["NodeID"] not in self._retired}
        if self._nodes[index] not in alive:
            for nodes_with in self._resource_nodes.values():  # a docker runner stays on a docker node
                if self._nodes[index] in nodes_with:
                    alive = (alive & nodes_with) or alive
        node = self._nodes[index] if self._nodes[index] in alive else min(alive, default=None)
        if node is None:
            return
        self._runners[index] = CellRunner.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        self._nodes[index] = node
        self._sees[index] = self._ship.ask(self._runners[index]) if self._ship else None
        self._pending[index] = self._runners[index].node_id.remote()

    def _suspect(self, node: str) -> None:
        """A death notice from ``node``: its other runners get no attempt until they answer a
        ping (a runner whose node died answers with an error and is placed again). Before
        this, attempts went on to the dead node's other runners until Ray declared it dead
        (tests/reliability/test_node_loss.py)."""
        for index, on in enumerate(self._nodes):
            if on == node and self._pending[index] is None:
                self._pending[index] = self._runners[index].node_id.remote()

    def _settle(self, timeout: float) -> None:
        """Wait (bounded) for replacement runners to answer, placing again those lost with
        their node, so that an audit asks runners that exist."""
        deadline = time.monotonic() + timeout
        for index in range(len(self._runners)):
            while self._pending[index] is not None and (left := deadline - time.monotonic()) > 0:
                ray.wait([self._pending[index]], timeout=left)
                self._ready(index)

    def _ready(self, index: int) -> bool:
        """A replacement gets no attempts until it answers a ping. A runner lost with its node
        is first replaced on that same node, which Ray still lists as alive for ~10-30 s after
        its raylet died; attempts sent there hung until then and failed as ``executor``
        (tests/reliability/test_node_loss.py). A failed ping places the runner again, by then
        on a node that is really alive."""
        ping = self._pending[index]
        if ping is None:
            return True
        done, _ = ray.wait([ping], timeout=0)
        if not done:
            return False
        try:
            ray.get(ping)
        except RayError:
            self._replace(index)
            return False
        self._pending[index] = None
        return True

    def cancel(self, refs: list[Any]) -> None:
        now = time.monotonic()
        for ref in refs:
            self._cancelling[ref] = (now, 0)
            with contextlib.suppress(RayError):
                ray.cancel(ref)

    def _cancel_again(self) -> None:
        """Send the cancel again to the attempts asked to stop that still run (see
        :data:`CANCEL_RESEND_SEC`); those that ended, or were sent it :data:`CANCEL_RESENDS`
        times more, are forgotten."""
        now = time.monotonic()
        for ref, (sent, times) in list(self._cancelling.items()):
            if ref not in self._owner or times >= CANCEL_RESENDS:
                del self._cancelling[ref]
            elif now - sent >= CANCEL_RESEND_SEC:
                self._cancelling[ref] = (now, times + 1)
                with contextlib.suppress(RayError):
                    ray.cancel(ref)

    def count(self, backends: dict[str, BackendConfig], backend: str, run_id: str) -> int:
        """Resources of the run that the backends report through the runners (+1 per runner
        that failed to say). A runner whose node died while idle (no attempt of the run was
        lost there) says nothing about residue: that node is a node event (:meth:`lost_nodes`),
        not a sandbox. Counting it as one turned a complete 48/48 run into exit 1, "cleanup
        audit found 2 sandboxes", that ``audit`` afterwards found clean (issue 29 item 9)."""
        self._settle(SETTLE_SEC)
        options = dict(backends[backend].options) if backend in backends else {}
        seen: set[str] = set()
        unknown = 0
        for index, runner in enumerate(self._runners):
            try:
                refs = ray.get(runner.list_sandboxes.remote(backend, options, run_labels(run_id)), timeout=60)
                # Deletions under way (Daytona's are asynchronous) are not residue.
                seen.update(f"{r.kind}:{r.id}" for r in refs if not r.removing)
            except RayTaskError:
                # The runner answered, with its backend's error (a docker daemon that is down):
                # its node is up, so there is no death to wait for. Waiting NODE_DEATH_SEC for
                # one here held the audit of a run whose dockerd died 60 s per runner.
                unknown += 1
            except RayError as exc:
                # No answer: a node that died idle is not residue. A call that timed out has
                # waited its 60 s already, longer than Ray takes to list a dead raylet's node as
                # dead (~10-30 s): it is asked once, not waited on again.
                node = self._nodes[index]
                wait = 0.0 if isinstance(exc, GetTimeoutError) else NODE_DEATH_SEC
                if node not in self._lost_work and _declared_dead(node, wait):
                    self._lost_idle.add(node)
                else:
                    unknown += 1
        return len(seen) + unknown

    def lost_nodes(self) -> list[str]:
        """Nodes an audit found dead that held no attempt of the run when they died."""
        return sorted(self._lost_idle)

    def cleanup(self, backends: dict[str, BackendConfig], backend: str, run_id: str,
                attempt_id: str | None) -> int:
        """Remove every sandbox of the run (or of one attempt) that any runner can see."""
        self._settle(SETTLE_SEC)
        labels = run_labels(run_id)
        if attempt_id is not None:
            labels[LABEL_ATTEMPT] = attempt_id
        options = dict(backends[backend].options) if backend in backends else {}
        removed = 0
        for index, runner in enumerate(self._runners):
            try:
                refs = ray.get(runner.list_sandboxes.remote(backend, options, labels), timeout=60)
                if refs:
                    removed += ray.get(runner.remove_sandboxes.remote(backend, options, refs), timeout=300)
            except RayError as exc:
                node = self._nodes[index]
                # A runner on a node that died holding none of the run's attempts has nothing
                # to remove; the audit reports the node ("node lost while idle"). Its Ray
                # error (7 lines per runner) used to precede that line (issue 29 item 9).
                if node in self._lost_work or not _declared_dead(node, 0):
                    log.warning("cleanup through the runner on node %s failed: %s", node[:12], one_line(exc))
        return removed


def _declared_dead(node: str, timeout: float) -> bool:
    """Whether Ray lists ``node`` as dead, waiting (bounded) for it to say so: it lists a node
    whose raylet died as alive for ~10-30 s."""
    deadline = time.monotonic() + timeout
    while True:
        states = {n["NodeID"]: bool(n.get("Alive")) for n in ray.nodes()}  # type: ignore[no-untyped-call]
        if not states.get(node, False):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)


#: How long the driver waits for a runner to hand over a cancelled attempt's summary.
CANCELLED_ASK_SEC = 10.0


def cancelled_summary_of(runner: Any, spec: AttemptSpec) -> AttemptSummary:
    """What a cancelled attempt left (issue 25): a cancelled Ray task returns no value, but its
    runner kept the summary it wrote when it was cancelled (its usage so far, request ids,
    ``agent_started``), and Ray reports the cancellation only once the runner's cleanup ended.
    Asked of the runner (any node; through Ray its directory comes with it); else read from
    the attempt's ``result.json`` where the driver sees it (a runner on the run root); else
    nothing is known: ``agent_started`` None, so its cost is unknown (ray_bench.ledger.cost),
    never $0."""
    kept: AttemptSummary | None = None
    with contextlib.suppress(RayError, GetTimeoutError):
        reply = ray.get(runner.cancelled.remote(spec.attempt_id), timeout=CANCELLED_ASK_SEC)
        # through Ray its directory comes with it, written into the run root here
        kept = receive(reply, spec) if isinstance(reply, Returned) else reply
    if kept is None and (spec.artifacts is None or spec.artifacts.local_files):
        with contextlib.suppress(OSError):
            written = AttemptSummary.loads((Path(spec.attempt_dir) / RESULT_FILE).read_text())
            kept = written if written.cancelled else None
    if kept is None or kept.attempt_id != spec.attempt_id:
        return new_summary(spec).model_copy(update={"cancelled": True})
    return kept.model_copy(update={"cancelled": True})

