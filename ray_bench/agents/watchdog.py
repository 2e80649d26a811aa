"""The degeneration watchdog: stops an agent that has stopped making progress, while it runs.

It reads the agent's output as the sandbox streams it (:class:`~ray_bench.sandboxes.ExecWatch`)
through the adapter's live reader, and looks at the workspace every ``poll_sec``. Four rules,
thresholds from the arm's ``watchdog:`` block (:class:`~ray_bench.models.suite.Watchdog`):

- ``repeated_tool_call``: the same tool call (tool and input) ``repeats`` times in a row;
- ``repeated_output``: the same non-empty plain output line ``output_repeats`` times in a row;
- ``idle_workspace``: nothing below the workdir changed for ``idle_minutes``;
- ``token_bound``: the tokens the CLI reported passed ``max_tokens``;
- ``spend_bound``: the CLI's live usage at its model's list price passed ``max_spend_usd`` (the
  executor role's bound; :mod:`ray_bench.agents.prices`).

The two bounds are the executor role's, held even on an arm without a ``watchdog:`` block
(``degeneration: false``: the other rules are off). A bound reached is classed ``behaviour``
with the flag ``role_bound`` (not ``degeneration``).

When one fires the agent's command is killed, the verifier is skipped, and the attempt carries
:class:`~ray_bench.models.attempt.WatchdogFacts`; the classifier makes it a ``behaviour``
failure (never a valid row; it uses up one of the cell's attempts).
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import deque
from collections.abc import Callable, Mapping

from ray_bench.agents import adapter
from ray_bench.agents.base import LiveEvent, LiveReader
from ray_bench.agents.prices import estimate_usd
from ray_bench.errors import SandboxError
from ray_bench.models.agent import Usage as AgentUsage
from ray_bench.models.attempt import Usage as AttemptUsage
from ray_bench.models.attempt import WatchdogFacts
from ray_bench.models.suite import Watchdog
from ray_bench.sandboxes import ExecResult, ExecWatch, Sandbox
from ray_bench.sandboxes.base import DEFAULT_OUTPUT_CAP, Stream

#: Lines kept as evidence of what the agent did last.
RECENT_LINES = 12
#: A line longer than this is judged on its first part (a runaway line must not grow memory).
_LINE_BYTES = 1 << 16
#: Where the workspace look keeps its time stamps (outside any task's workdir).
STAMP_DIR = "/tmp/.ray-bench-watchdog"
# $1 workdir, $2 stamp dir. "RB-CHANGED" when anything below $1 is newer than the last look.
_LOOK = ('mkdir -p "$2" || exit 0; if [ ! -f "$2/t" ]; then touch "$2/t"; echo RB-FIRST; exit 0; fi; '
         'touch "$2/n"; c=$(find "$1" -path "$2" -prune -o -newer "$2/t" -print 2>/dev/null | head -n 1); '
         'mv -f "$2/n" "$2/t"; if [ -n "$c" ]; then echo RB-CHANGED; else echo RB-SAME; fi')


def past_bound(config: Watchdog, *, tokens: int | None = None,
               spent_usd: float | None = None) -> tuple[str, str] | None:
    """The executor role's bound an attempt passed, as (rule, message): ``token_bound`` past
    ``max_tokens`` (fresh input + cache writes + output), ``spend_bound`` past ``max_spend_usd``
    (its usage at list price). The one rule, held live and on the whole usage once it ended."""
    if config.max_tokens is not None and tokens is not None and tokens > config.max_tokens:
        return "token_bound", f"{tokens} tokens, past the arm's bound of {config.max_tokens}"
    if config.max_spend_usd is not None and spent_usd is not None and spent_usd > config.max_spend_usd:
        return "spend_bound", (f"${spent_usd:.4f} at list price, past the executor role's "
                               f"max_spend_usd ${config.max_spend_usd:g}")
    return None


def bound_after(config: Watchdog | None, usage: AttemptUsage | None, model: str | None) -> WatchdogFacts | None:
    """The role's bounds on an attempt's whole usage once it ended: what the live watch cannot
    see (a ``command`` agent reports its usage only in ``usage.json`` at its end; a CLI may pass a
    bound in its last answer as it exits). Past one, the attempt is the same ``role_bound``
    failure as one stopped live, its verifier's reward not counted (it ran: ``verifier: ran``)."""
    if config is None or usage is None or not usage.known:
        return None
    counts = usage.model_dump()
    parts = [counts.get(k) for k in ("input_tokens", "cache_write_tokens", "output_tokens")]
    tokens = sum(int(v) for v in parts if isinstance(v, int | float) and not isinstance(v, bool)) \
        if any(isinstance(v, int | float) for v in parts) else None
    try:
        priced = estimate_usd(AgentUsage.model_validate(counts), model)
    except ValueError:  # a hand-written usage.json the contract does not read
        priced = None
    spent = priced if priced is not None else usage.cost_usd
    over = past_bound(config, tokens=tokens, spent_usd=spent)
    if over is None:
        return None
    rule, message = over
    return WatchdogFacts(rule=rule, message=f"{message} (its usage once it ended)", tokens=tokens, spent_usd=spent,
                         verifier="ran")


class Seen:
    """The agent's output as it arrived, the first ``cap`` bytes of each stream (the backends'
    own output cap): what a cancelled attempt's usage so far is read from, while the command's
    own result never comes (ray_bench.cells.runner, issue 25)."""

    def __init__(self, cap: int = DEFAULT_OUTPUT_CAP) -> None:
        self.cap = cap
        self.streams: dict[Stream, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.started = time.monotonic()
        #: The watch of the exec it is fed by: a cancelled one says there whether its stop needed
        #: the SIGKILL (:meth:`~ray_bench.sandboxes.base.ExecWatch.halted`).
        self.watch: ExecWatch | None = None

    def add(self, stream: Stream, data: bytes) -> None:
        kept = self.streams.get(stream)
        if kept is not None and len(kept) < self.cap:
            kept += data[:self.cap - len(kept)]

    def text(self, stream: Stream) -> str:
        return self.streams[stream].decode("utf-8", "replace")


class LineWatch(ExecWatch):
    """Hands each line of the agent's stdout to :meth:`_line`, and each line of its stderr to
    the reader's :meth:`~ray_bench.agents.base.LiveReader.read_stderr` (a CLI that reports its
    retries there: Gemini CLI), until stopped; and keeps all of it in ``seen`` when given."""

    def __init__(self, reader: LiveReader, seen: Seen | None = None) -> None:
        super().__init__()
        self._reader = reader
        self._seen = seen
        if seen is not None:
            seen.watch = self
        self._partial: dict[Stream, bytes] = {"stdout": b"", "stderr": b""}

    def feed(self, stream: Stream, data: bytes) -> None:
        if self._seen is not None:
            self._seen.add(stream, data)
        if stream not in self._partial or self.reason is not None:
            return
        *lines, self._partial[stream] = (self._partial[stream] + data).split(b"\n")
        if len(self._partial[stream]) > _LINE_BYTES:
            lines.append(self._partial[stream][:_LINE_BYTES])
            self._partial[stream] = b""
        for raw in lines:
            text = raw[:_LINE_BYTES].decode("utf-8", "replace").strip()
            if stream == "stdout":
                self._line(text)
            elif text:
                self._refused(self._reader.read_stderr(text))
            if self.reason is not None:
                return

    def _refused(self, event: LiveEvent | None) -> bool:
        """Stop the run when ``event`` says the provider keeps refusing it (no facts: not
        degeneration; the adapter classes the attempt from the same retries)."""
        if event is None or event.refused is None:
            return False
        self.stop(f"refused: {event.refused}")
        return True

    def _line(self, text: str) -> None:
        raise NotImplementedError


class DegenerationWatch(LineWatch):
    """The output rules and the idle clock of one agent run. ``clock`` is injected for tests."""

    def __init__(self, config: Watchdog, reader: LiveReader, clock: Callable[[], float] = time.monotonic,
                 model: str | None = None, seen: Seen | None = None) -> None:
        super().__init__(reader, seen)
        self.config = config
        #: The arm's model: what a live usage that names none is priced at.
        self._model = model
        self.spent_usd: float | None = None
        self._clock = clock
        self.started = self.last_change = clock()
        self._runs: dict[str, tuple[str | None, int]] = {"call": (None, 0), "line": (None, 0)}
        self.tokens: int | None = None
        self.recent: deque[str] = deque(maxlen=RECENT_LINES)
        self.facts: WatchdogFacts | None = None

    def _line(self, text: str) -> None:
        if not text:
            return
        self.recent.append(text[:300])
        event = self._reader.read(text)
        if self._refused(event):
            return
        if event is None:  # plain output, not the CLI's own event
            if self.config.degeneration and self._repeat("line", text) >= self.config.output_repeats:
                self._fire("repeated_output", f"the same output line {self.config.output_repeats} times in a row",
                           [text[:500]])
            return
        if event.tokens is not None:
            self.tokens = event.tokens
            if (over := past_bound(self.config, tokens=event.tokens)) is not None:
                self._fire(*over, [])
                return
        if event.usage is not None:
            spent = estimate_usd(event.usage, self._model)
            self.spent_usd = spent if spent is not None else self.spent_usd
            if (over := past_bound(self.config, spent_usd=spent)) is not None:
                self._fire(*over, [])
                return
        if not self.config.degeneration:
            return
        for call in event.tool_calls:
            if self._repeat("call", call) >= self.config.repeats:
                self._fire("repeated_tool_call", f"the same tool call {self.config.repeats} times in a row",
                           [call[:500]])
                return

    def _repeat(self, kind: str, value: str) -> int:
        last, count = self._runs[kind]
        count = count + 1 if value == last else 1
        self._runs[kind] = (value, count)
        return count

    def workspace_changed(self) -> None:
        self.last_change = self._clock()

    def check_idle(self) -> None:
        if not self.config.degeneration:
            return
        idle = self._clock() - self.last_change
        if idle >= self.config.idle_minutes * 60:
            self._fire("idle_workspace", f"no change in the workspace for {idle / 60:.1f} min "
                       f"(bound {self.config.idle_minutes:g} min)", [])

    def _fire(self, rule: str, message: str, evidence: list[str]) -> None:
        if self.reason is not None:
            return
        self.facts = WatchdogFacts(rule=rule, message=message, after_sec=round(self._clock() - self.started, 3),
                                   tokens=self.tokens, spent_usd=self.spent_usd, evidence=[*evidence, *self.recent])
        self.stop(f"{rule}: {message}")


class RefusalWatch(LineWatch):
    """Only the live refusal of an unwatched run: the provider refuses the login again and
    again (401/403 through the CLI's retries), so the run is ended instead of retrying for
    minutes; the adapter then classes the attempt ``auth`` from the same events."""

    def _line(self, text: str) -> None:
        self._refused(self._reader.read(text) if text else None)


async def watch_workspace(sandbox: Sandbox, workdir: str, watch: DegenerationWatch) -> None:
    """Every ``poll_sec``: did anything below ``workdir`` change? Until the watch stops. A
    look that fails is skipped (the agent's own command decides what a broken sandbox means).

    ``find -newer`` compares whole seconds in busybox (GNU find compares nanoseconds), so there a
    write in the same second as the previous look shows only if a later write does; harmless at
    real bounds (minutes idle, a look every ``poll_sec``), and why tests keep their bounds at
    several seconds."""
    look = " ".join(shlex.quote(a) for a in ("sh", "-c", _LOOK, "rb", sandbox.path(workdir),
                                                sandbox.path(STAMP_DIR)))
    while watch.reason is None:
        try:
            result = await sandbox.exec(look, timeout=max(60.0, watch.config.poll_sec))
        except SandboxError:
            result = None
        # The first answer starts the idle clock: a sandbox slow to run commands (a loaded
        # docker daemon takes seconds per exec) is not an agent that made no progress.
        if result is not None and ("RB-CHANGED" in result.stdout or "RB-FIRST" in result.stdout):
            watch.workspace_changed()
        watch.check_idle()
        if watch.reason is not None:
            return
        await asyncio.sleep(watch.config.poll_sec)


async def run_agent(sandbox: Sandbox, command: str, *, timeout: float, env: Mapping[str, str], user: str | None,
                    agent: str, workdir: str, config: Watchdog | None,
                    model: str | None = None, seen: Seen | None = None) -> tuple[ExecResult, WatchdogFacts | None]:
    """The agent's command, watched when the arm has a watchdog (or role bounds): its result,
    and the watchdog's facts when it stopped the command. ``model``: the arm's, which a live
    usage naming none is priced at; ``seen``: keeps the output as it arrives."""
    if config is None:  # no degeneration rules; a refusal seen live still ends the run
        refusals = RefusalWatch(adapter(agent).live_reader(), seen)
        return await sandbox.exec(command, timeout=timeout, env=env, user=user, watch=refusals), None
    watch = DegenerationWatch(config, adapter(agent).live_reader(), model=model, seen=seen)
    if not config.degeneration:  # the role's bounds alone: no workspace to look at
        result = await sandbox.exec(command, timeout=timeout, env=env, user=user, watch=watch)
        return result, (watch.facts if result.stopped is not None else None)
    monitor = asyncio.ensure_future(watch_workspace(sandbox, workdir, watch))
    try:
        result = await sandbox.exec(command, timeout=timeout, env=env, user=user, watch=watch)
    finally:
        monitor.cancel()
        await asyncio.wait({monitor}, timeout=10)
    return result, (watch.facts if result.stopped is not None else None)
