"""The adapter interface: how one agent CLI is run headless and how its output is read.

An adapter knows three things about its CLI: how it gets into the sandbox (the npm package and
the binary it brings, see :mod:`ray_bench.agents.layer`), the headless command line (model,
instruction, MCP servers), and how its native output becomes the usage and error contracts
(:mod:`ray_bench.models.agent`). Adapters are pure: they build strings and read strings.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ray_bench.models.agent import AgentError, AgentReport, McpServer, Usage
from ray_bench.numbers import duration_or_none, epoch_or_none

#: Where a CLI adapter's raw output is kept inside ``$LOGS_DIR/agent``.
OUTPUT_FILE = "agent-output.txt"
STDERR_FILE = "agent-stderr.txt"
#: Touched as the CLI starts: its session files newer than this are this run's.
STARTED_MARK = ".started"
#: The CLI's session files of this run, copied under ``$LOGS_DIR/agent``.
SESSIONS_DIR = "sessions"


@dataclass(frozen=True)
class Invocation:
    """What the command line is built from."""

    model: str | None
    mcp_servers: tuple[McpServer, ...] = ()
    args: tuple[str, ...] = ()
    #: The executor role's bound on turns (the CLI's own flag, where it has one).
    max_turns: int | None = None


@dataclass(frozen=True)
class CliRun:
    """One finished run of the CLI, as the sandbox reported it."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration_sec: float = 0.0
    #: Epoch seconds at the end of the run; relative reset times are turned into absolute ones.
    now: float = 0.0
    #: The CLI's own session files of this run (path under ``sessions/``, text), collected
    #: after it ended or was killed: they hold what the stream had not printed yet.
    sessions: tuple[tuple[str, str], ...] = ()
    #: Stopped live (the watchdog, or a refusal seen live), and why.
    stopped: str | None = None

    @property
    def cut(self) -> bool:
        """Ended without finishing: its timeout, stopped live, or killed by a signal."""
        return self.timed_out or self.stopped is not None or self.exit_code is None or self.exit_code < 0

    @property
    def harness_stopped(self) -> bool:
        """The harness ended it (its timeout, the watchdog, a refusal seen live, a cancel), not
        the CLI itself: it got SIGTERM while it was still at work."""
        return self.timed_out or self.stopped is not None


def stopped_in_turn(usage: Usage | None, run: CliRun, *, turn_ended: bool = False) -> Usage | None:
    """``usage`` with :attr:`~ray_bench.models.agent.Usage.stopped_in_turn` said when it was read
    from the CLI's messages (``session`` or ``stream``) of a run the harness stopped, unless its
    records show its turn had ended (``turn_ended``: the last answer final, with no tool asked
    for). A CLI stopped mid-turn can make one more call on the SIGTERM (it ends its tool and sends
    the tool's result, or its retry goes out) and die before any record holds it, SIGKILL or not:
    its usage is then only a lower bound. The CLI's own final totals (``result``) are not touched."""
    if usage is None or usage.source not in ("session", "stream") or not run.harness_stopped or turn_ended:
        return usage
    return usage.model_copy(update={"stopped_in_turn": True})


@dataclass(frozen=True)
class LiveEvent:
    """What one line of a CLI's live output says, for the degeneration watchdog: the tool
    calls on it (each a signature: the tool and its canonical input) and the tokens used so far
    in this run, when the line says either. An event with neither is one to ignore."""

    tool_calls: tuple[str, ...] = ()
    #: Cumulative over the run: fresh input + cache writes + output (cache reads excluded).
    tokens: int | None = None
    #: Cumulative over the run by kind (and the model, where the line names it), for the spend
    #: bound: priced at list price (:mod:`ray_bench.agents.prices`).
    usage: Usage | None = None
    #: The provider refuses this login (401/403, seen again after the CLI's own refresh), or keeps
    #: refusing its calls (Gemini CLI: 429/5xx retried :data:`AUTH_RETRIES` times in a row): the
    #: run is ended now, classed from those retries, and the account learns it (disabled, or
    #: cooled by the server's delay) when the cell ends, not after the CLI's minutes of retries.
    refused: str | None = None


#: Auth refusals in a row that end a run live: Claude Code refreshes an OAuth token on the first
#: 401 itself, so a refusal that outlasts that is the login's (its default is 10 retries, minutes;
#: Codex's 5 with backoff).
AUTH_RETRIES = 3


class LiveReader:
    """Reads one run's live output line by line (state: per-message usage, running totals).
    The default knows no events: every line is plain output."""

    def read(self, line: str) -> LiveEvent | None:
        """The event on ``line``; None when it is plain output (not the CLI's own event)."""
        return None

    def read_stderr(self, line: str) -> LiveEvent | None:
        """The event on a line of stderr (only ``refused`` is read there); None: nothing."""
        return None


class AgentAdapter(ABC):
    name: ClassVar[str]
    #: The executable the sandbox must have on PATH ("" for the ``command`` adapter).
    binary: ClassVar[str] = ""
    #: The npm package that brings it.
    npm_package: ClassVar[str] = ""
    #: Hosts the agent phase must reach (an allowlist, where a backend can enforce one).
    provider_hosts: ClassVar[tuple[str, ...]] = ()
    #: Models this CLI can run; anything else is refused at plan time.
    model_pattern: ClassVar[re.Pattern[str]] = re.compile(r".+")
    #: Env the headless mode needs (no secret values: those come from the account's route).
    headless_env: ClassVar[dict[str, str]] = {}
    #: The largest instruction in bytes the command line can carry: :data:`ARG_INSTRUCTION_BYTES`
    #: for a CLI that takes it as one argument (:func:`instruction`), None when the agent reads
    #: ``$INSTRUCTION_FILE`` itself. Checked at plan time.
    instruction_limit: ClassVar[int | None] = None

    def refuse_model(self, model: str | None) -> str | None:
        """Why this adapter cannot run ``model``, or None."""
        if model is None:
            return f"agent {self.name} needs a model"
        if not self.model_pattern.fullmatch(model):
            return f"agent {self.name} does not run model {model!r} (expects {self.model_pattern.pattern})"
        return None

    @abstractmethod
    def command(self, inv: Invocation) -> str:
        """The ``sh -c`` line: reads ``$INSTRUCTION_FILE``, keeps its raw output in
        ``$LOGS_DIR/agent``, prints it, and exits with the CLI's exit code."""

    @abstractmethod
    def translate(self, run: CliRun) -> AgentReport:
        """The usage and error contracts from the CLI's native output."""

    def live_reader(self) -> LiveReader:
        """A reader of one run's live stdout (:class:`LiveReader`)."""
        return LiveReader()

    #: Where the CLI keeps its session files, as a shell word (under the agent's ``$HOME``);
    #: "" when it keeps none worth reading.
    session_root: ClassVar[str] = ""

    def session_ids(self, stdout: str) -> tuple[str, ...]:
        """The sessions the CLI's stdout names (their files are this run's)."""
        return ()

    def collect_sessions(self, stdout: str) -> str | None:
        """The ``sh -c`` line run in the sandbox after the agent ended or was killed: copies the
        files of the sessions ``stdout`` names, written during this run (newer than the mark
        :func:`wrap` left), into ``$LOGS_DIR/agent/sessions``, so they come back with ``/logs``.
        On a shared ``$HOME`` (the local backend) other attempts' sessions are left alone."""
        ids = [i for i in self.session_ids(stdout) if _SESSION_ID.fullmatch(i)]
        if not self.session_root or not ids:
            return None
        logs = "$LOGS_DIR/agent"
        paths = " -o ".join(f"-path '*{i}*'" for i in ids)
        return (f'src={self.session_root}; [ -d "$src" ] && [ -f "{logs}/{STARTED_MARK}" ] || exit 0\n'
                f'cd "$src" && find . -type f -name "*.jsonl" -newer "{logs}/{STARTED_MARK}" \\( {paths} \\) | '
                f'while IFS= read -r f; do d="{logs}/{SESSIONS_DIR}/${{f#./}}"; mkdir -p "${{d%/*}}" && '
                f'cp "$f" "$d"; done\nexit 0\n')


#: A session id as the CLIs make them (UUIDs); anything else is not put into a shell line.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{7,79}")


def json_line(line: str) -> dict[str, Any] | None:
    """One line of a CLI's JSON-lines output as an object (None for anything else)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def signature(tool: str, arguments: object) -> str:
    """A tool call as the watchdog compares them: the tool and its input, keys sorted."""
    return f"{tool} {json.dumps(arguments, sort_keys=True, default=str)[:2000]}"


#: Linux's MAX_ARG_STRLEN: one argument of an exec is at most 32 pages, its NUL included; a
#: longer one fails the exec with E2BIG ("Argument list too long") after the sandbox is up.
MAX_ARG_STRLEN = 32 * 4096
ARG_INSTRUCTION_BYTES = MAX_ARG_STRLEN - 1


def instruction() -> str:
    """The instruction as one argument of the CLI's command line (bound by MAX_ARG_STRLEN:
    an adapter using this sets ``instruction_limit``). :func:`wrap` keeps the CLI's stdin
    closed, so this argument is the instruction's one way in."""
    return '"$(cat "$INSTRUCTION_FILE")"'


def wrap(cli: str, setup: str = "", *, live_stderr: bool = False) -> str:
    """Run ``cli`` with its output kept in ``$LOGS_DIR/agent`` and printed as it comes (``tee``:
    the degeneration watchdog reads it live), its stderr printed after it; the CLI's exit code
    is the command's. A CLI that is not installed says so in one line (class ``tool``).
    ``live_stderr``: its stderr is printed as it comes too (through a FIFO, POSIX sh), for a CLI
    that reports its retries there alone (Gemini CLI); where ``mkfifo`` fails, after it."""
    binary = cli.split(" ", 1)[0]
    logs = "$LOGS_DIR/agent"
    run = (f'{{ {cli} </dev/null 2>"{logs}/{STDERR_FILE}"; echo $? >"{logs}/.rc"; }} | tee "{logs}/{OUTPUT_FILE}"\n'
           f'cat "{logs}/{STDERR_FILE}" >&2\n')
    if live_stderr:
        fifo = f"{logs}/.stderr.fifo"
        run = (f'rm -f "{fifo}"\nif mkfifo "{fifo}" 2>/dev/null; then\n'
               f'tee "{logs}/{STDERR_FILE}" <"{fifo}" >&2 & rb_tee=$!\n'
               f'{{ {cli} </dev/null 2>"{fifo}"; echo $? >"{logs}/.rc"; }} | tee "{logs}/{OUTPUT_FILE}"\n'
               f'wait "$rb_tee"; rm -f "{fifo}"\nelse\n{run}fi\n')
    return (
        f'command -v {binary} >/dev/null 2>&1 || {{ echo "ray-bench: agent CLI {binary} is not '
        f'installed in this sandbox (cli_missing)" >&2; exit 127; }}\n'
        f'{setup}: >"{logs}/{STARTED_MARK}"\n'
        # busybox's find -newer compares whole seconds (findutils/find.c: st_mtime), so a mark
        # from this second would hide a session written within it: the mark is a second old.
        f'touch -d "@$(( $(date +%s) - 1 ))" "{logs}/{STARTED_MARK}" 2>/dev/null || :\n{run}'
        f'rc=$(cat "{logs}/.rc" 2>/dev/null); rm -f "{logs}/.rc"\nexit "${{rc:-1}}"\n'
    )


def quote(value: str) -> str:
    return shlex.quote(value)


#: "Claude AI usage limit reached|1767225600" (older CLIs).
_RESET_EPOCH = re.compile(r"limit reached\|(\d{9,11})", re.IGNORECASE)
#: Claude Code prints a reset as ``toLocaleTimeString`` in its own zone: "resets 6:33pm (UTC)",
#: "resets 10pm (UTC)" (no minutes when they are 0), and past 24 hours away with the date:
#: "resets Dec 4, 5:56pm (UTC)", "resets Dec 4, 2027, 6pm (UTC)" in another year. Codex prints
#: its usage limit's reset in its local zone, unnamed, as ``%-I:%M %p`` the same day ("... or try
#: again at 6:54 AM.") and ``%b %-d{st|nd|rd|th}, %Y %-I:%M %p`` another day ("Try again at Jul 9th,
#: 2026 1:47 AM."): codex-rs/core/src/error.rs, ``UsageLimitReachedError`` / ``format_retry_timestamp``.
_RESET_CLOCK = re.compile(
    r"(?:resets?\s+(?:at\s+)?|try again at\s+)"
    r"(?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?"
    r"\s+(?:(?P<year>\d{4}),?\s+)?)?(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>am|pm)?"
    r"\s*(?:\((?P<zone>[^)]+)\))?", re.IGNORECASE)
#: A relative reset: "resets in 2h 5m", "resets in 45s".
_RESET_IN = re.compile(r"resets?\s+in\s+(?P<span>\d+\s*[dhms](?:\s*\d+\s*[dhms])*)\b", re.IGNORECASE)
_UNIT_SEC = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def reset_time(text: str, now: float, zone: str | None = None) -> float | None:
    """The epoch second a usage-limit message says the window resets at, never earlier than
    it does: an epoch after a ``|``; a span from ``now`` (plus one of its smallest unit, which
    the CLI rounds away); or a wall-clock time, with its date if printed, in the zone printed
    (else ``zone``, the CLI's own where its records say it; UTC if none or unknown), at the END
    of the printed minute (the CLI drops the seconds). The one reader every adapter uses."""
    m = _RESET_EPOCH.search(text)
    if m is not None:
        return float(m.group(1))
    rel = _RESET_IN.search(text)
    if rel is not None:
        parts = re.findall(r"(\d+)\s*([dhms])", rel.group("span").lower())
        return now + sum(int(n) * _UNIT_SEC[u] for n, u in parts) + min(_UNIT_SEC[u] for _, u in parts)
    m = _RESET_CLOCK.search(text)
    if m is None:
        return None
    hour, minute, half = int(m["hour"]), int(m["minute"] or 0), (m["half"] or "").lower()
    if half == "pm" and hour < 12:
        hour += 12
    elif half == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        return None
    name = (m["zone"] or zone or "UTC").strip()
    try:
        tz: dt.tzinfo = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        tz = dt.UTC
    local = dt.datetime.fromtimestamp(now, tz)
    try:
        if m["mon"]:
            year = int(m["year"] or local.year)
            at = dt.datetime(year, _MONTHS.index(m["mon"][:3].lower()) + 1, int(m["day"]), hour, minute, tzinfo=tz)
            if not m["year"] and at.timestamp() < now - 86400:  # "Jan 2" printed on Dec 30
                at = at.replace(year=year + 1)
        else:
            at = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:  # "Feb 30"
        return None
    end = at.timestamp() + 60
    if not m["mon"] and end <= now:  # a time of day already past is tomorrow's
        end = (at + dt.timedelta(days=1)).timestamp() + 60
    return end


def error_from(status: int | None, message: str, run: CliRun, *, reset_at: float | None = None,
               retry_after: float | None = None, zone: str | None = None) -> AgentError:
    """One mapping from a provider's status and message to the error contract, shared by the
    adapters: 429 with a reset time (or a usage-limit message) is a subscription window,
    other 429s a rate limit, 529/503 overload, other 5xx server errors, 401/403 credentials."""
    text = message.strip()[:500] or f"HTTP {status}"
    low = text.lower()
    # A wait or a reset time the CLI printed is a number from the world: one that is no finite
    # duration (Infinity, 1e400, NaN, weeks past any window) is unknown, the default wait.
    retry_after = duration_or_none(retry_after) if retry_after is not None else None
    reset_at = epoch_or_none(reset_at, run.now) if reset_at is not None else None
    if reset_at is None and (status == 429 or "limit" in low):
        reset_at = reset_time(text, run.now, zone)
    usage_limit = reset_at is not None or any(w in low for w in ("usage limit", "usage_limit", "session limit",
                                                                  "weekly limit", "hit your limit"))
    if status == 429 or usage_limit or "rate limit" in low or "rate_limit" in low:
        if usage_limit:
            wait = max(0.0, reset_at - run.now) if reset_at is not None else retry_after
            return AgentError(type="usage_limit", message=text, status=status, reset_at=reset_at,
                              retry_after=wait)
        return AgentError(type="rate_limit", message=text, status=status, retry_after=retry_after)
    if status in (529, 503) or "overloaded" in low:
        return AgentError(type="overloaded", message=text, status=status, retry_after=retry_after)
    if status in (401, 403) or "authenticat" in low or "not logged in" in low or "api key" in low:
        expired = "expired" in low or "refresh" in low or "/login" in low
        return AgentError(type="expired" if expired else "auth", message=text, status=status)
    if status is not None and status >= 500:
        return AgentError(type="server_error", message=text, status=status)
    return AgentError(type="agent", message=text, status=status)


def working_when_cut(run: CliRun, *, answered: bool, retrying: bool) -> bool:
    """The one rule, for every adapter, on a CLI its timeout cut without a result: when the model
    had answered it at least once and it was not retrying a failed call at the cut, it was
    working (its own tool running, or its next call under way): the agent's outcome, which the
    verifier scores, so no error is reported and the row is valid, flagged ``agent_timeout``
    (:mod:`ray_bench.evidence.classify`). A call under way makes its usage a lower bound
    (:meth:`~ray_bench.models.agent.Usage.bounded`), never its class. Cut before any answer
    (a provider that never answered) or inside a retry loop is the provider's: ``no_answer``
    (:func:`silent`) or the class of what it was retrying, which does not use up the cell."""
    return run.timed_out and answered and not retrying


def silent(run: CliRun, name: str) -> AgentError:
    """The CLI printed no result: cut by its timeout (a silent retry loop or a stall), or
    missing, or crashed before it could answer."""
    if run.exit_code == 127 or "cli_missing" in run.stderr:
        return AgentError(type="cli_missing", message=f"agent CLI for {name} is not installed in the sandbox")
    if run.timed_out:
        return AgentError(type="no_answer", message=f"{name} gave no answer within its timeout "
                          f"({run.duration_sec:.0f} s): a stalled provider or a silent retry loop")
    tail = (run.stderr or run.stdout).strip()[-300:]
    return AgentError(type="agent", message=f"{name} exited {run.exit_code} without a result: {tail}")
