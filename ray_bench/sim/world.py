"""The world a simulated run meets: providers with their true limits, storms, lost logins
and slow sandboxes, answering each attempt with the summary a real runner would write.

Accounts are played as providers play them: a start over an account's true concurrency or
cell window comes back rate-limited within seconds; every start during a storm is
rate-limited (after 5-30 s, with a Retry-After); once an account has lost its login, every
attempt on it fails with an auth error, and attempts in flight then fail too. Otherwise the
cell runs for its true duration and is solved. The summaries go through the real classifier.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AgentError, AttemptSummary, ExecFacts, Usage
from ray_bench.sim.workload import AuthLossEvent, SimSpec, StormEvent, Workload


@dataclass
class Violations:
    """What the world saw the scheduler do wrong (the fuzz test's invariants)."""

    over_limit: list[str] = field(default_factory=list)
    rerun_valid: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return self.over_limit + self.rerun_valid


class SimWorld:
    """A :class:`~ray_bench.cells.pool.World` for the in-process pool."""

    def __init__(self, spec: SimSpec, workload: Workload, rng: np.random.Generator,
                 slow_create: tuple[float, float, float] | None = None) -> None:
        """``slow_create``: (from s, to s, extra seconds) of sandbox creation in that span."""
        self.rng = rng
        self.limit = {a.name: a.max_concurrent for a in spec.accounts}
        self.usd_per_s = {a.name: a.usd_per_hour / 3600 for a in spec.accounts}
        self.window = {a.name: (a.window.hours * 3600, a.window.max_cells)
                       for a in spec.accounts if a.window and a.window.max_cells}
        self.starts: dict[str, deque[float]] = {a.name: deque() for a in spec.accounts}
        self.running: dict[str, set[str]] = {a.name: set() for a in spec.accounts}
        self.storms = [e for e in spec.events if isinstance(e, StormEvent)]
        self.auth_loss = {e.account: e for e in spec.events if isinstance(e, AuthLossEvent)}
        self.duration = workload.duration
        self.slow_create = slow_create
        self.valid: set[str] = set()
        self.violations = Violations()
        self.attempts = 0

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        self.attempts += 1
        acct = spec.account
        if spec.cell_id in self.valid:
            self.violations.rerun_valid.append(f"{spec.attempt_id} at {now:.0f}s")
        create = float(self.rng.uniform(0.5, 3.0))
        if self.slow_create is not None and self.slow_create[0] <= now < self.slow_create[1]:
            create += self.slow_create[2]
        summary = AttemptSummary(attempt_id=spec.attempt_id, cell_id=spec.cell_id, task=spec.task_id,
                                 arm=spec.arm, rep=spec.rep, account=acct, backend=spec.backend,
                                 started_at=now, sandbox_id=f"sb-{spec.attempt_id}")
        loss = self.auth_loss.get(acct)
        if loss is not None and now >= loss.at_h * 3600:
            return create, self._delay(loss.signal_delay_s), _auth(summary)
        running = self.running[acct]
        if len(running) >= self.limit[acct]:
            self.violations.over_limit.append(f"{acct}: start {len(running) + 1} over {self.limit[acct]} at {now:.0f}s")
            return create, self._delay((1.0, 5.0)), _limited(summary, 30.0, "429 too many concurrent sessions")
        if acct in self.window:
            span, cap = self.window[acct]
            q = self.starts[acct]
            while q and q[0] + span <= now:
                q.popleft()
            if len(q) >= cap:
                return create, self._delay((1.0, 5.0)), _limited(
                    summary, q[len(q) - cap] + span - now, "usage limit reached")
        for storm in self.storms:
            t0 = storm.start_h * 3600
            if storm.account == acct and t0 <= now < t0 + storm.length_min * 60:
                return create, self._delay(storm.signal_delay_s), _limited(
                    summary, storm.retry_after_s, "429 rate limit")
        running.add(spec.attempt_id)
        if acct in self.window:
            self.starts[acct].append(now)
        seconds = self.duration[spec.cell_id]
        summary.agent = ExecFacts(exit_code=0, duration_sec=seconds)
        summary.verifier = ExecFacts(exit_code=0, duration_sec=1.0)
        summary.reward = 1.0
        summary.reward_source = "reward.txt"
        summary.usage = Usage(output_tokens=1000, cost_usd=round(seconds * self.usd_per_s[acct], 6))
        summary.phases = {"agent": seconds, "verifier": 1.0}
        return create, seconds, summary

    def end(self, spec: AttemptSpec, now: float, delivered: bool) -> None:
        self.running[spec.account].discard(spec.attempt_id)

    def delivered_valid(self, cell_id: str) -> None:
        self.valid.add(cell_id)

    def lose_login(self, account: str, now: float, flights: list[AttemptSummary]) -> None:
        """Attempts in flight on ``account`` fail with an auth error (the caller reschedules them)."""
        for summary in flights:
            if summary.account == account and not summary.lost:
                self.running[account].discard(summary.attempt_id)
                _auth(summary)

    def _delay(self, lo_hi: tuple[float, float]) -> float:
        return float(self.rng.uniform(*lo_hi))


def _limited(summary: AttemptSummary, retry_after: float | None, message: str) -> AttemptSummary:
    summary.agent = ExecFacts(exit_code=1, output_tail=message)
    summary.agent_error = AgentError(type="rate_limit", message=message, retry_after=retry_after)
    return summary


def _auth(summary: AttemptSummary) -> AttemptSummary:
    summary.agent = ExecFacts(exit_code=1, output_tail="401 invalid credentials")
    summary.agent_error = AgentError(type="authentication_error", message="401 invalid credentials")
    summary.reward = None
    summary.usage = None
    return summary
