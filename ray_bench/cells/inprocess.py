"""The runner pool's in-process fake (:class:`InProcessPool`): runners and nodes in this
process, on a :class:`~ray_bench.clock.FakeClock`, for tests and the simulator
(the fake that ships with the interface, as httpx ships MockTransport).

Its cost per call does not grow with the attempts in flight: finishes and sandbox creations
wait in heaps ordered by time (an entry whose flight has gone or moved is skipped when it
comes up), so that a simulation with 100,000 attempts in flight measures the driver, not
the fake (tests/perf/bench_inflight.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from ray_bench.cells.lost import lost_summary
from ray_bench.cells.spec import AttemptSpec
from ray_bench.clock import FakeClock
from ray_bench.models.attempt import AttemptSummary


class World(Protocol):
    """What an in-process attempt does: how long it takes and what it reports."""

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        """``(sandbox creation seconds, run seconds, summary)`` of an attempt starting now."""
        ...

    def end(self, spec: AttemptSpec, now: float, delivered: bool) -> None:
        """The attempt stopped (``delivered``: its summary reached a driver)."""
        ...


@dataclass
class _Flight:
    spec: AttemptSpec
    runner: int
    finish_at: float
    summary: AttemptSummary
    sandbox_at: float


class InProcessPool:
    """Runners and nodes in this process, on a :class:`~ray_bench.clock.FakeClock`:
    ``wait`` moves the clock to the next finish (or by its timeout), so the driver's loop runs
    on virtual time. Sandboxes are labelled records that ``cleanup`` and ``count`` see as the
    real backends' ``list`` would. Faults: :meth:`kill_runner`, :meth:`kill_node` (the
    attempts come back as lost, their sandboxes stay behind for the audit), and a node is
    used again only after :meth:`rejoin_node` (heard from since its death)."""

    def __init__(self, clock: FakeClock, world: World, nodes: int = 2, runners_per_node: int = 2) -> None:
        self.clock = clock
        self.world = world
        self.node_of = [n for n in range(nodes) for _ in range(max(1, runners_per_node))]
        self.dead_nodes: set[int] = set()
        self.load = [0] * len(self.node_of)
        self.flights: dict[int, _Flight] = {}
        #: sandbox id -> (run id, attempt id); what a backend's ``list`` would show
        self.sandboxes: dict[str, tuple[str, str]] = {}
        self.sent_to_dead = 0
        self._seq = 0
        #: (finish_at, ref) and (sandbox_at, ref); stale entries are skipped when they surface
        self._finishes: list[tuple[float, int]] = []
        self._creates: list[tuple[float, int]] = []
        self._by_attempt: dict[str, list[int]] = {}

    def submit(self, spec: AttemptSpec) -> int:
        now = self.clock.now()
        live = [i for i, n in enumerate(self.node_of) if n not in self.dead_nodes]
        if not live:
            self.sent_to_dead += 1
            live = list(range(len(self.node_of)))
        runner = min(live, key=lambda i: (self.load[i], i))
        create, run, summary = self.world.begin(spec, now)
        self._seq += 1
        ref = self._seq
        self.load[runner] += 1
        self.flights[ref] = _Flight(spec, runner, now + create + run, summary, now + create)
        heapq.heappush(self._finishes, (now + create + run, ref))
        heapq.heappush(self._creates, (now + create, ref))
        self._by_attempt.setdefault(spec.attempt_id, []).append(ref)
        if self.node_of[runner] in self.dead_nodes:  # nothing answers there
            self._lose(ref, RuntimeError("ActorDiedError: the runner's node is dead"))
        return ref

    def reschedule(self, ref: int, finish_at: float) -> None:
        """The attempt ``ref`` now ends at ``finish_at``."""
        self.flights[ref].finish_at = finish_at
        heapq.heappush(self._finishes, (finish_at, ref))

    def first_finish(self, refs: Collection[Any]) -> float | None:
        """When the first of ``refs`` still in flight here finishes (None: none is)."""
        due = self._due(refs, None, limit=1)
        return self.flights[due[0]].finish_at if due else None

    def _due(self, refs: Collection[Any], until: float | None, limit: int | None = None) -> list[int]:
        """The refs of ``refs`` in flight that finish by ``until`` (None: any time), earliest
        first, at most ``limit``; the heap keeps them unless ``until`` is given (delivery)."""
        heap = self._finishes
        out: list[int] = []
        aside: list[tuple[float, int]] = []
        seen: set[int] = set()
        while heap and (limit is None or len(out) < limit) and (until is None or heap[0][0] <= until):
            at, ref = heapq.heappop(heap)
            flight = self.flights.get(ref)
            if flight is None or flight.finish_at != at or ref in seen:
                continue  # gone, moved (its newer entry stands) or listed twice
            if ref not in refs or until is None:
                aside.append((at, ref))
            if ref in refs:
                seen.add(ref)
                out.append(ref)
        for entry in aside:
            heapq.heappush(heap, entry)
        return out

    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]:
        now = self.clock.now()
        first = self.first_finish(refs)
        if first is None or first > now + timeout:
            self.clock.sleep(timeout)
            return []
        self.clock.set(max(now, first))
        now = self.clock.now()
        self.materialise()
        out = []
        for ref in sorted(self._due(refs, now)):
            flight = self.flights.pop(ref)
            self._forget(ref, flight)
            self.load[flight.runner] -= 1
            if not flight.summary.lost:  # a lost one was ended when it was lost
                self._sandbox_gone(flight, lost=False)
                self.world.end(flight.spec, now, delivered=True)
            flight.summary.finished_at = self.clock.wall()
            out.append((ref, flight.summary))
        return out

    def cancel(self, refs: list[Any]) -> None:
        now = self.clock.now()
        for ref in refs:
            flight = self.flights.get(ref)
            if flight is not None and not flight.summary.lost:
                flight.summary = flight.summary.model_copy(update={"cancelled": True})
                self.reschedule(ref, now)

    def cleanup(self, backends: dict[str, Any], backend: str, run_id: str, attempt_id: str | None) -> int:
        """Remove the run's (or one attempt's) sandboxes; an attempt whose sandbox goes
        stops, and its summary reaches no one (its driver is gone)."""
        if attempt_id is None:
            doomed = [sid for sid, (run, _) in self.sandboxes.items() if run == run_id]
        else:  # an attempt's sandbox is named after it (materialise)
            sid = f"sb-{attempt_id}"
            doomed = [sid] if self.sandboxes.get(sid, ("", ""))[0] == run_id else []
        for sid in doomed:
            del self.sandboxes[sid]
        if attempt_id is not None:
            for ref in self._by_attempt.pop(attempt_id, []):
                flight = self.flights.pop(ref, None)
                if flight is not None:
                    self.load[flight.runner] -= 1
                    self.world.end(flight.spec, self.clock.now(), delivered=False)
        return len(doomed)

    def count(self, backends: dict[str, Any], backend: str, run_id: str) -> int:
        return sum(1 for run, _ in self.sandboxes.values() if run == run_id)

    def retire(self, node: str) -> None:
        """A halt names a host; the simulated nodes are numbered and never run short."""

    def lost_nodes(self) -> list[str]:
        """The simulated nodes never die."""
        return []

    # -- what the simulator does to it -------------------------------------------------------

    def materialise(self) -> None:
        """Sandboxes whose creation has finished by now exist (called as time passes)."""
        now = self.clock.now()
        while self._creates and self._creates[0][0] <= now:
            _, ref = heapq.heappop(self._creates)
            flight = self.flights.get(ref)
            if flight is not None and not flight.summary.lost:  # a lost attempt stays lost
                self.sandboxes.setdefault(f"sb-{flight.spec.attempt_id}", (flight.spec.run_id, flight.spec.attempt_id))

    def kill_runner(self, runner: int) -> int:
        """The runner process dies with its attempts (Ray starts a new one in its place)."""
        refs = [r for r, f in self.flights.items() if f.runner == runner and not f.summary.lost]
        for ref in refs:
            self._lose(ref, RuntimeError("ActorDiedError: the actor died unexpectedly"))
        return len(refs)

    def kill_node(self, node: int) -> int:
        self.dead_nodes.add(node)
        refs = [r for r, f in self.flights.items() if self.node_of[f.runner] == node and not f.summary.lost]
        for ref in refs:
            self._lose(ref, RuntimeError("NodeDiedError: the node running the actor died"))
        return len(refs)

    def rejoin_node(self, node: int) -> None:
        self.dead_nodes.discard(node)

    def _lose(self, ref: int, exc: BaseException) -> None:
        flight = self.flights[ref]
        self.materialise()
        self.world.end(flight.spec, self.clock.now(), delivered=False)
        flight.summary = lost_summary(flight.spec, exc)
        self.reschedule(ref, self.clock.now())

    def _forget(self, ref: int, flight: _Flight) -> None:
        refs = self._by_attempt.get(flight.spec.attempt_id)
        if refs is not None:
            refs.remove(ref)
            if not refs:
                del self._by_attempt[flight.spec.attempt_id]

    def _sandbox_gone(self, flight: _Flight, lost: bool) -> None:
        if not lost:  # a finished runner deleted its sandbox; a lost one left it behind
            self.sandboxes.pop(f"sb-{flight.spec.attempt_id}", None)
