"""One Daytona sandbox: commands run under an in-sandbox watchdog with stdout and stderr framed
separately in one round trip; files travel as tar archives through the toolbox."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import io
import logging
import math
import shlex
import tarfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeVar

from daytona import (
    AsyncSandbox,
    DaytonaConnectionError,
    DaytonaError,
    DaytonaTimeoutError,
    ExecuteResponse,
    FileUpload,
)

from ray_bench.errors import (
    SandboxDiskFullError,
    SandboxError,
    SandboxExecReportError,
    SandboxGoneError,
    SandboxRateLimitedError,
    SandboxUnavailableError,
)
from ray_bench.sandboxes.archive import extract_capped, over_bound_note, root_owned, tar_file
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    HARNESS_DIRS,
    KILLED_MARKER,
    OOM_EVENTS_COMMAND,
    ExecResult,
    ExecWatch,
    Sandbox,
    SandboxSpec,
    halt_when_done,
    oom_kills,
    stop_group_sh,
    until_done,
)
from ray_bench.sandboxes.daytona.harness import PREPARE
from ray_bench.sandboxes.daytona.ratelimit import http_status, retry_after
from ray_bench.sandboxes.daytona.translate import translate
from ray_bench.sandboxes.daytona_lists import create_entries, split_networks, unsayable

if TYPE_CHECKING:
    from ray_bench.sandboxes.daytona.backend import DaytonaBackend
    from ray_bench.sandboxes.daytona.clients import Lease

T = TypeVar("T")

_SCRATCH = "/tmp/.ray-bench"
# $1 scratch dir, $2 output cap, $3 timeout, $4 cwd, $5 command. The command is its own session
# (setsid), so the watchdog's stop (SIGTERM, then SIGKILL: `stop_group_sh`) reaches its children;
# the watchdog is one too, so killing it also kills its `sleep`; a timed-out command's wrapper
# waits for the watchdog's stop to end. A sleep cut short (killed, as in a cgroup at its memory
# limit) is slept on to the deadline by the clock: a killed sleep ended the command as a timeout
# (the likely end of a memory-limit task's attempt "timed out" after 20 s of its 60). Output
# comes back as one header line and two base64 blocks. The wrapper leaves its own pid (`self`,
# there from the dir's first moment: it is made under another name and moved), the watchdog's
# (`wpid`) and the command's status (`rc`) in the scratch dir, for `_LOOK` and `_RECOVER`; and
# its report, kept until it has been read (an answer lost after the command ended is read back
# from it): $6 names, by their last component, the dirs of earlier commands whose answers came.
_EXEC = r"""d=$1; cap=$2; t=$3; for n in $6; do rm -rf "${d%/*}/$n"; done
mkdir -p "$d.new" && echo $$ >"$d.new/self" && mv "$d.new" "$d"; S=; command -v setsid >/dev/null 2>&1 && S=setsid
mkdir -p "$4" 2>/dev/null; cd "$4" || { echo "RB 126 0 0 0"; exit 0; }
$S sh -c "$5" >"$d/out" 2>"$d/err" </dev/null &
p=$!; echo "$p" >"$d/pid"
$S sh -c 'e=$(($(date +%s 2>/dev/null || echo 0) + $1)); sleep "$1"
  while [ "$(date +%s 2>/dev/null || echo "$e")" -lt "$e" ]; do sleep 1; done
  kill -0 "$2" 2>/dev/null || exit 0; echo 1 >"$3/to"
  """ + stop_group_sh('"$2"', on_kill='echo 1 >"$3/killed"') + r"""' rb-watchdog \
  "$t" "$p" "$d" >/dev/null 2>&1 </dev/null &
w=$!; echo "$w" >"$d/wpid"
wait "$p" 2>/dev/null; rc=$?; echo "$rc" >"$d/rc"
[ -f "$d/to" ] && wait "$w" 2>/dev/null
kill -9 -"$w" 2>/dev/null || kill -9 "$w" 2>/dev/null
to=0; [ -f "$d/to" ] && to=1; k=0; [ -f "$d/killed" ] && k=1
{ echo "RB $rc $to $(wc -c <"$d/out") $(wc -c <"$d/err") $k"
head -c "$cap" "$d/out" | base64; echo RB-SEP
head -c "$cap" "$d/err" | base64; } >"$d/report.part"
mv "$d/report.part" "$d/report"; rm -f "$d/out" "$d/err"; cat "$d/report"
"""
# The report of a command whose answer was lost: the one its wrapper wrote, if it did; else
# (the toolbox answered 408 and killed the wrapper's group, or the command ran past its
# deadline) the wrapper and its watchdog are killed (the command and the watchdog are sessions
# of their own, out of the toolbox's reach), an unfinished command is stopped (pids are killed
# only while their command line names the scratch dir: a pid may have been reused), and what it
# left is reported in the wrapper's own format: the status it ended with, or -1 and timed out
# when it had to be stopped. RB-NONE: the wrapper left nothing (it never started, or its report
# was read and removed). The dir is removed. $1 scratch dir, $2 output cap.
_RECOVER = r"""d=$1; cap=$2; [ -d "$d" ] || { echo RB-NONE; exit 0; }
[ -f "$d/report" ] && { cat "$d/report"; rm -rf "$d"; exit 0; }
mine() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$d"; }
s=$(cat "$d/self" 2>/dev/null) && mine "$s" && kill -9 "$s" 2>/dev/null
w=$(cat "$d/wpid" 2>/dev/null) && mine "$w" && { kill -9 -"$w" 2>/dev/null || kill -9 "$w" 2>/dev/null; }
[ -f "$d/rc" ] || { p=$(cat "$d/pid" 2>/dev/null) && { """ + stop_group_sh(
    '"$p"', on_kill='echo 1 >"$d/killed"') + r"""; }; }
rc=-1; to=1; [ -f "$d/rc" ] && { rc=$(cat "$d/rc"); to=0; [ -f "$d/to" ] && to=1; }
k=0; [ -f "$d/killed" ] && k=1
echo "RB $rc $to $(wc -c 2>/dev/null <"$d/out" || echo 0) $(wc -c 2>/dev/null <"$d/err" || echo 0) $k"
head -c "$cap" "$d/out" 2>/dev/null | base64; echo RB-SEP
head -c "$cap" "$d/err" 2>/dev/null | base64
rm -rf "$d"
"""
# Where a command whose answer was lost stands: RB-NONE (no scratch dir: it never started, or
# its report was read and removed), RB-DONE (its report is written), RB-RUNNING (its wrapper
# is alive: the command runs, or is being reported), RB-LEFT (its wrapper is gone without a
# report: the toolbox killed it). $1 scratch dir.
_LOOK = r"""d=$1; [ -d "$d" ] || { echo RB-NONE; exit 0; }; [ -f "$d/report" ] && { echo RB-DONE; exit 0; }
s=$(cat "$d/self" 2>/dev/null) && tr '\0' ' ' <"/proc/$s/cmdline" 2>/dev/null | grep -qF "$d" &&
  { echo RB-RUNNING; exit 0; }
echo RB-LEFT"""
_KILL = r"""p=$(cat "$1/pid" 2>/dev/null) && { """ + stop_group_sh('"$p"') + """; }
rm -rf "$1" """
# A watch's stop: the command's group dies, the wrapper still reports what it printed.
_STOP = r"""p=$(cat "$1/pid" 2>/dev/null) && { """ + stop_group_sh('"$p"') + """; }; exit 0"""
# $1 scratch dir, $2 and $3 the 1-based offsets already read of out and err, $4 bytes at most.
_TAIL = r"""tail -c +"$2" "$1/out" 2>/dev/null | head -c "$4" | base64; echo RB-SEP
tail -c +"$3" "$1/err" 2>/dev/null | head -c "$4" | base64"""
_TAIL_BYTES = 1 << 18
# $1 the uploaded archive, $2 where it goes.
_UNPACK = 'mkdir -p "$2" && tar -xf "$1" -C "$2"; rc=$?; rm -f "$1"; exit $rc'
_UNPACK_COPY = ('x="$1.d"; mkdir -p "$2" "$x" && tar -xf "$1" -C "$x" && cp -R "$x"/. "$2"/; rc=$?; '
                'rm -rf "$1" "$x"; exit $rc')
# "<uid> <name>" of the sandbox's process; without `id`, 0 only if it may write `/`.
log = logging.getLogger(__name__)

#: How many times a create asks a new sandbox who it runs as before giving the sandbox up.
PROBE_TRIES = 3

_WHOAMI = r"""u=$(id -u 2>/dev/null) || u=; n=$(id -un 2>/dev/null) || n=
[ -n "$u" ] || { if [ -w / ]; then u=0; else u=nonroot; fi; }
echo "$u $n" """
# Slack on the toolbox's timeout beyond the in-sandbox watchdog, for the wrapper to report; and
# on the HTTP request beyond the toolbox's, for its answer (or its 408) to come back.
_EXEC_SLACK_SEC = 60
_ANSWER_SLACK_SEC = 60
#: How often a command whose answer was lost is looked at while it runs, and how many looks in a
#: row may go unanswered before the sandbox is taken to be out of reach.
LOOK_EVERY_SEC = 2.0
LOOK_MISSES = 3


@dataclasses.dataclass
class _Halt:
    """A watched command's stop, if its watch asked for one: why, and whether it needed SIGKILL."""

    stopped: str | None = None
    killed: bool = False


class DaytonaSandbox(Sandbox):
    def __init__(
        self, backend: DaytonaBackend, sandbox: AsyncSandbox, spec: SandboxSpec, lease: Lease | None = None
    ) -> None:
        self._backend = backend
        #: This sandbox's share of the SDK client its commands go through, given back on delete.
        self._lease = lease
        self._sandbox = sandbox
        self.id = sandbox.id
        self.labels = dict(spec.labels)
        #: Who commands run as, from ``id`` inside the sandbox (:meth:`probe_user`); never the
        #: API's ``user`` field, which says ``daytona`` whatever the image's USER is.
        self.user = "unknown"
        self._uid = ""
        #: None: the daemon's own start dir (the image's WORKDIR, else the user's HOME).
        self._workdir = spec.workdir
        self._deleted = False
        self._oom_seen = 0
        #: The scratch dirs (their names) of commands answered since the last exec went out.
        self._answered: list[str] = []

    async def probe_user(self) -> None:
        """Ask the sandbox who its commands run as (uid 0, or ``id`` missing and ``/``
        writable, is root); a sandbox that is not root makes the harness's directories
        (:data:`~ray_bench.sandboxes.daytona.harness.PREPARE`). No path is ever moved."""
        for tries_left in range(PROBE_TRIES - 1, -1, -1):
            try:
                response = await self._call(
                    "probe user", lambda: self._sandbox.process.exec(_sh(_WHOAMI), timeout=30), timeout=60)
                break
            except SandboxUnavailableError:
                # The toolbox timed ``id`` out (a 408 from a loaded runner) or could not be
                # reached: the provider's trouble, not the sandbox's. ``id`` is safe to ask again
                # of the same started sandbox; a create should not be spent on it.
                if not tries_left:
                    raise
                log.info("Daytona sandbox %s did not answer the user probe in time: asking again", self.id)
        uid, _, name = (response.result or "").strip().rpartition("\n")[2].partition(" ")
        if response.exit_code != 0 or not uid:
            raise SandboxError(f"cannot tell which user Daytona sandbox {self.id} runs as: "
                               f"{(response.result or '')[-300:]!r}")
        self.user = name or uid
        self._uid = uid
        if uid != "0":
            await self._prepare()

    async def _prepare(self) -> None:
        """Make :data:`HARNESS_DIRS` and the task's workdir (when it names one) writable by a
        non-root sandbox's user, or refuse the sandbox."""
        dirs = (*HARNESS_DIRS, *([self._workdir] if self._workdir else []))
        response = await self._call(
            "prepare", lambda: self._sandbox.process.exec(_sh(PREPARE, self._uid, *dirs), timeout=60), timeout=90)
        said = (response.result or "").strip()
        if response.exit_code != 0:
            lacking = said.rpartition("RB-CANNOT")[2].strip() or said[-300:]
            raise SandboxError(
                f"Daytona sandbox {self.id} runs as {self.user} (not root), which can make neither "
                f"these directories nor use sudo: {lacking}; give the image them (world-writable) "
                "or sudo, or let ray-bench build its snapshot (the build phase lays them in)")

    def _runs_as(self, user: str) -> bool:
        """Whether the sandbox's own user is ``user`` (by name or uid; ``root`` is uid 0), the
        one user Daytona's exec can run a command as (Harbor's agents name it: ``root``)."""
        return user in (self.user, self._uid) or (self._uid == "0" and user == "root")

    async def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        user: str | None = None,
        watch: ExecWatch | None = None,
    ) -> ExecResult:
        if user is not None and not self._runs_as(user):
            raise SandboxError(f"Daytona's exec cannot run a command as user {user!r} "
                               f"(its commands run as {self.user})")
        if self._deleted:
            raise SandboxGoneError(f"Daytona sandbox {self.id} was deleted")
        name = uuid.uuid4().hex
        scratch = f"{_SCRATCH}/{name}"
        limit = max(1, math.ceil(timeout))
        # The dirs of the commands answered since the last exec went out: this one's wrapper
        # removes them (a command's report is kept until its answer is in: see _EXEC).
        answered, self._answered = " ".join(self._answered), []
        script = _sh(
            _EXEC, scratch, str(max(0, output_cap)), str(limit),
            cwd or self._workdir or ".", command, answered,
        )
        started = time.monotonic()
        answer_by = limit + _EXEC_SLACK_SEC + _ANSWER_SLACK_SEC
        # Never repeated once it may have started: a 5xx or a lost connection may come after
        # the command ran, and an agent's command is not idempotent. (A 429 is refused by
        # the throttler before anything runs, so that one is waited out.)
        request = asyncio.ensure_future(self._call(
            "exec",
            lambda: self._sandbox.process.exec(script, env=dict(env or {}), timeout=limit + _EXEC_SLACK_SEC),
            server_retries=False,
            timeout=answer_by,
        ))
        tail = _Tail(scratch)
        poller = asyncio.ensure_future(self._follow(tail, watch)) if watch is not None else None
        run = _Halt()
        try:
            try:
                response = await self._answer(request, scratch, answer_by, watch, run)
            except SandboxUnavailableError as exc:
                if not _may_have_run(exc):
                    raise
                # The command may still be running, or its report may be sitting in the scratch
                # dir: either is read back rather than lost (and the command not left to run on).
                reattach = asyncio.ensure_future(self._reattach(
                    scratch, output_cap, exc, started + limit + _EXEC_SLACK_SEC, started + answer_by))
                response = await self._answer(reattach, scratch, answer_by, watch, run)
        except asyncio.CancelledError:
            # The HTTP request is gone but the command is not: kill its group, shielded.
            request.cancel()
            stop = asyncio.ensure_future(self._kill(scratch))
            halt_when_done(stop, watch)  # told when the stop ends, though this call is gone by then
            with contextlib.suppress(Exception):
                await asyncio.shield(stop)
            raise
        finally:
            if poller is not None:
                poller.cancel()
        stopped, killed = run.stopped, run.killed
        duration = time.monotonic() - started
        try:
            result = _parse_exec(response.result or "", response.exit_code, output_cap, duration)
        except SandboxError as exc:
            # A sandbox that vanished mid-command cuts the wrapper short; the API may take a
            # moment to notice, so look a few times before calling it a wrapper failure.
            for _ in range(3):
                await self._backend.raise_if_gone(self.id, exc)
                await asyncio.sleep(0.5)
            raise
        self._answered.append(name)
        result = dataclasses.replace(result, killed=result.killed or killed)
        if watch is not None:
            tail.feed_rest(result, watch)
            result = dataclasses.replace(result, stopped=stopped)
            if stopped is not None or result.timed_out:
                watch.note_halt(result.killed)
        if result.exit_code == 137 and not result.timed_out and stopped is None:
            # Daytona's API does not say why a process died; the sandbox's cgroup does.
            kills = oom_kills((await self.exec(OOM_EVENTS_COMMAND, timeout=30)).stdout)
            if kills > self._oom_seen:
                self._oom_seen = kills
                result = dataclasses.replace(result, oom_killed=True)
        return result

    async def _answer(self, fut: asyncio.Future[ExecuteResponse], scratch: str, answer_by: float,
                      watch: ExecWatch | None, run: _Halt) -> ExecuteResponse:
        """``fut``'s answer (the request's, or a reattach's), the command stopped first when
        ``watch`` asks for it (once: a stop asked for during the request holds for its reattach)."""
        if watch is not None and run.stopped is None and await until_done(fut, answer_by, watch) == "stopped":
            run.stopped = watch.reason
            said = await asyncio.wait_for(self._sandbox.process.exec(_sh(_STOP, scratch), timeout=30), 40)
            run.killed = KILLED_MARKER in (said.result or "")
        return await fut

    async def _reattach(self, scratch: str, output_cap: int, cause: SandboxUnavailableError,
                        deadline: float, budget: float) -> ExecuteResponse:
        """The report of a command whose answer was lost (``cause``): looked at every
        :data:`LOOK_EVERY_SEC` while its wrapper runs, up to ``deadline`` (by then its own
        watchdog has ended it), then read back by :meth:`_recover`, all before ``budget`` (the
        command's own answer's time). ``cause`` is raised when nothing was left (it never
        started), :data:`LOOK_MISSES` looks in a row go unanswered (a 429 is no miss: the
        service answered, throttled), or the budget ends first."""
        misses = 0
        waited = False
        while True:
            try:
                said = await asyncio.wait_for(self._sandbox.process.exec(_sh(_LOOK, scratch), timeout=30), 40)
            except (DaytonaError, TimeoutError) as exc:
                wait = _read_back_wait(exc, 0)
                misses += 0 if _throttled(exc) else 1
                if misses >= LOOK_MISSES or wait is None or time.monotonic() + wait >= budget:
                    log.warning("Daytona sandbox %s: a command whose answer was lost cannot be looked at", self.id)
                    raise cause from None
                await asyncio.sleep(max(wait, LOOK_EVERY_SEC))
                continue
            misses = 0
            state = (said.result or "").strip()
            if state == "RB-NONE":
                raise cause
            if state != "RB-RUNNING" or time.monotonic() >= deadline:
                return await self._recover(scratch, output_cap, cause, budget)
            if not waited:
                waited = True
                log.warning("Daytona sandbox %s: a command's answer was lost (%s); it is still running, "
                            "and is waited for in the sandbox", self.id, cause)
            await asyncio.sleep(min(LOOK_EVERY_SEC, max(0.0, deadline - time.monotonic())))

    async def _follow(self, tail: _Tail, watch: ExecWatch) -> None:
        """Feed ``watch`` what the command wrote since the last look, every ``live_poll_sec``.

        Polled, not streamed: the SDK streams a *session* command's logs over a websocket
        (``process.get_session_command_logs_async``), but a session command has no timeout or
        process-group kill of its own and would need the sessions API and its websocket faked
        too; the files the exec wrapper already writes serve the same purpose with one toolbox
        call per look. A look that fails is skipped: the command's own request decides."""
        while True:
            await asyncio.sleep(self._backend.live_poll_sec)
            script = _sh(_TAIL, tail.scratch, str(tail.read[0] + 1), str(tail.read[1] + 1), str(_TAIL_BYTES))
            try:
                response = await asyncio.wait_for(self._sandbox.process.exec(script, timeout=30), 40)
            except (DaytonaError, TimeoutError):
                continue
            tail.feed(response.result or "", watch)

    async def _recover(self, scratch: str, output_cap: int, cause: SandboxUnavailableError,
                       budget: float) -> ExecuteResponse:
        """The wrapper's report, made by :data:`_RECOVER` from what the command left; ``cause``
        is raised when that cannot be had (nothing was left, or no answer before ``budget``).
        A refused read-back (a 429, a 5xx, a connection lost) is asked again with backoff
        within the budget: one refusal lost a command that ran (issue 53: 4 of 12 lost answers
        not read back at 30 % 429s). Asking again is safe: the report stays until it is read,
        and a read whose own answer was lost leaves RB-NONE, which raises ``cause``."""
        script = _sh(_RECOVER, scratch, str(max(0, output_cap)))
        tries = 0
        while True:
            try:
                said = await asyncio.wait_for(self._sandbox.process.exec(script, timeout=60), 90)
                break
            except (DaytonaError, TimeoutError) as exc:
                wait = _read_back_wait(exc, tries)
                tries += 1
                if wait is None or time.monotonic() + wait >= budget:
                    log.warning("Daytona sandbox %s: cannot read back the command whose answer was lost "
                                "(%d tries)", self.id, tries)
                    raise cause from None
                await asyncio.sleep(wait)
        if (said.result or "").strip() == "RB-NONE":
            raise cause
        log.warning("Daytona sandbox %s: a command's answer was lost (%s); its report was read back "
                    "from the sandbox", self.id, cause)
        return said

    async def _kill(self, scratch: str) -> bool:
        """Stop the command's group; True when it needed the SIGKILL (its stop printed so)."""
        said = await asyncio.wait_for(self._sandbox.process.exec(_sh(_KILL, scratch), timeout=30), 40)
        return KILLED_MARKER in (said.result or "")

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        data = await asyncio.to_thread(_tar_dir, local_dir)
        await self._put_tar(data, sandbox_dir)

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        path = PurePosixPath(sandbox_path)
        await self._put_tar(tar_file(data, path.name, mode), str(path.parent))

    async def _put_tar(self, data: bytes, sandbox_dir: str) -> None:
        tmp = f"{_SCRATCH}/{uuid.uuid4().hex}.tar"
        await self._call("upload", lambda: self._sandbox.fs.upload_files([FileUpload(data, tmp)]),
                         timeout=self._backend.transfer_timeout)
        # Not root: unpacked where the user owns it, then copied over: tar (GNU's) fails on the
        # mode and times of a directory the user does not own (a root-owned sticky ``/logs``).
        script = _sh(_UNPACK if self._uid == "0" else _UNPACK_COPY, tmp, sandbox_dir)
        response = await self._call(
            "upload", lambda: self._sandbox.process.exec(script, timeout=300), timeout=330
        )
        if response.exit_code != 0:
            raise SandboxError(
                f"unpacking into {sandbox_dir} failed: {(response.result or '')[-500:]}"
            )

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                      bounds: Mapping[str, int] | None = None) -> int:
        tmp = f"{_SCRATCH}/{uuid.uuid4().hex}.tar"
        # Archive headers and padding ride on top of the payload; the cap itself is enforced on
        # extraction, this bound only keeps a huge log directory from crossing the wire.
        wire_cap = 2 * max(0, max_bytes) + (1 << 20)
        # A contract file over its bound (``bounds``: relative path, bytes) is measured in the
        # sandbox and left out of the archive where its tar can (GNU tar's -X), so it never
        # crosses the wire; its note is written here (issue 58: a 50 MB usage.json was
        # downloaded, then replaced). Elsewhere extract_capped writes the note from its header.
        script = _sh(
            '[ -d "$2" ] || { echo RB-NODIR; exit 0; }; mkdir -p "${1%/*}"; t=$1 d=$2 c=$3; shift 3; '
            'x="$t.x"; : >"$x"; while [ $# -ge 2 ]; do '
            'if [ -f "$d/$1" ] && [ ! -L "$d/$1" ]; then n=$(($(wc -c <"$d/$1"))); '
            'if [ "$n" -gt "$2" ]; then echo "RB-BIG $n $1"; printf "%s\n./%s\n" "$1" "$1" >>"$x"; fi; fi; '
            'shift 2; done; '
            # BusyBox tar has no -X (1.35 in Debian's image): there the file crosses, but is not kept
            'if [ -s "$x" ] && tar -X "$x" -cf /dev/null /dev/null 2>/dev/null; then '
            'tar -C "$d" -X "$x" -cf - . 2>/dev/null | head -c "$c" >"$t"; '
            'else tar -C "$d" -cf - . 2>/dev/null | head -c "$c" >"$t"; fi; rm -f "$x"; echo RB-OK',
            tmp,
            sandbox_dir,
            str(wire_cap),
            *(arg for rel, bound in sorted((bounds or {}).items()) for arg in (rel, str(bound))),
        )
        response = await self._call(
            "download", lambda: self._sandbox.process.exec(script, timeout=300), timeout=330
        )
        if "RB-NODIR" in (response.result or ""):
            return 0
        if "RB-OK" not in (response.result or ""):
            raise SandboxError(f"archiving {sandbox_dir} failed: {(response.result or '')[-500:]}")
        try:
            data = await self._call("download", lambda: self._sandbox.fs.download_file(tmp),
                                    timeout=self._backend.transfer_timeout)
        finally:
            with contextlib.suppress(Exception):
                await self._sandbox.process.exec(_sh('rm -f "$1"', tmp), timeout=60)
        # The wire cap above may cut the archive short: what arrived whole is kept.
        written = await asyncio.to_thread(
            extract_capped, data, local_dir, max_bytes, truncated_ok=True, bounds=bounds
        )
        return written + _write_notes(response.result or "", local_dir, bounds or {})

    async def set_network(self, online: bool) -> None:
        # POST /sandbox/{id}/network-settings (daytona SDK Sandbox.update_network_settings;
        # daytonaio/daytona SandboxService.updateNetworkSettings): networkBlockAll true clears the
        # network list, false clears it too and opens; the domain list is kept unless sent empty.
        await self._network_settings(network_block_all=not online, domain_allow_list="")

    async def set_allowlist(self, hosts: tuple[str, ...]) -> None:
        entries = create_entries(hosts, names=True)
        if entries is None:  # plan refuses such lists on daytona
            raise SandboxError(f"Daytona's allow lists cannot hold {', '.join(unsayable(hosts, names=True))}")
        if not entries:  # an empty allowlist reaches nothing
            await self.set_network(False)
            return
        networks, domains = split_networks(entries)
        # A network list lifts the block; with names only, networkBlockAll false lifts it (a domain
        # list alone does not) and clears the network list.
        await self._network_settings(network_block_all=False, network_allow_list=",".join(networks) or None,
                                     domain_allow_list=",".join(domains))

    async def _network_settings(self, *, network_block_all: bool, domain_allow_list: str,
                                network_allow_list: str | None = None) -> None:
        await self._call("update network settings", lambda: self._sandbox.update_network_settings(
            network_block_all=network_block_all, network_allow_list=network_allow_list,
            domain_allow_list=domain_allow_list))

    async def delete(self) -> None:
        if self._deleted:
            return
        task = asyncio.ensure_future(self._backend.delete(self.id, wait=False))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            raise
        self._deleted = True
        if self._lease is not None:
            self._lease.release()

    async def _call(
        self,
        what: str,
        fn: Callable[[], Awaitable[T]],
        *,
        server_retries: bool = True,
        timeout: float | None = None,
    ) -> T:
        try:
            return await self._backend.retrying(
                f"{what} in sandbox {self.id}", fn, server_retries=server_retries, timeout=timeout
            )
        except SandboxRateLimitedError:
            raise
        except DaytonaError as exc:
            await self._backend.raise_if_gone(self.id, exc)
            raise translate(exc, f"{what} in sandbox {self.id}") from exc


@dataclasses.dataclass
class _Tail:
    """How much of a watched command's stdout and stderr the watch has been fed."""

    scratch: str
    read: list[int] = dataclasses.field(default_factory=lambda: [0, 0])

    def feed(self, text: str, watch: ExecWatch) -> None:
        out_b64, sep, err_b64 = text.partition("RB-SEP\n")
        if not sep:
            return
        for i, (name, block) in enumerate((("stdout", out_b64), ("stderr", err_b64))):
            try:
                chunk = base64.b64decode("".join(block.split()))
            except ValueError:
                continue
            if chunk:
                self.read[i] += len(chunk)
                watch.feed(name, chunk)  # type: ignore[arg-type]

    def feed_rest(self, result: ExecResult, watch: ExecWatch) -> None:
        """What the last look missed, from the final (capped) output."""
        for i, (name, text) in enumerate((("stdout", result.stdout), ("stderr", result.stderr))):
            rest = text.encode("utf-8", "replace")[self.read[i]:]
            if rest:
                self.read[i] += len(rest)
                watch.feed(name, rest)  # type: ignore[arg-type]


#: Backoff of a refused read-back: 0.5 s doubling to 8 s (a 429's own Retry-After when longer).
_READ_BACK_FIRST_SEC = 0.5
_READ_BACK_MAX_SEC = 8.0


def _throttled(exc: BaseException) -> bool:
    return isinstance(exc, DaytonaError) and http_status(exc)[0] == 429


def _read_back_wait(exc: BaseException, tries: int) -> float | None:
    """Seconds before asking again after ``exc`` (the ``tries``-th refusal), or None when
    asking again cannot help (a 4xx other than 408 and 429: the sandbox or route is not there)."""
    backoff: float = min(_READ_BACK_MAX_SEC, _READ_BACK_FIRST_SEC * 2.0 ** tries)
    if not isinstance(exc, DaytonaError):
        return backoff  # our own timeout
    status, headers = http_status(exc)
    if status == 429:
        return max(backoff, min(retry_after(headers) or 0.0, _READ_BACK_MAX_SEC * 4))
    if status is None or status == 408 or status >= 500:
        return backoff
    return None


def _may_have_run(exc: SandboxUnavailableError) -> bool:
    """Whether the command of a request that failed with ``exc`` may have run: the request ran
    out of time (the toolbox's 408, or no answer in time), its answer was lost on the way (a
    5xx from the toolbox or a proxy in front of it, a connection cut), as opposed to refused
    before anything ran (a 4xx). The scratch dir then tells whether it did."""
    cause = exc.__cause__
    status = getattr(cause, "status_code", None)
    return (isinstance(cause, TimeoutError | DaytonaTimeoutError | DaytonaConnectionError)
            or status == 408 or (status is not None and status >= 500))


def _write_notes(report: str, local_dir: Path, bounds: Mapping[str, int]) -> int:
    """The notes of the contract files the archive left out (``RB-BIG <size> <path>`` lines,
    each path one of ``bounds``); the bytes written."""
    written = 0
    for line in report.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[0] != "RB-BIG" or parts[2] not in bounds or not parts[1].isdigit():
            continue
        target = local_dir / parts[2]
        if target.exists():  # it crossed after all (a tar without -X): extract_capped noted it
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        note = over_bound_note(target.name, bounds[parts[2]], int(parts[1]))
        target.write_bytes(note)
        written += len(note)
    return written


def _sh(script: str, *args: str) -> str:
    """``sh -c script`` with positional arguments, quoted for any POSIX-ish login shell."""
    return " ".join(shlex.quote(a) for a in ("sh", "-c", script, "rb", *args))


#: What the wrapper's shell says when a write of its own fails for space (ENOSPC's strerror):
#: the command's output travels in base64, so plain text here is the wrapper's.
_DISK_FULL = "No space left on device"


def _parse_exec(text: str, exit_code: int | None, cap: int, duration: float) -> ExecResult:
    """The wrapper's report: a header line ``RB rc timed_out out_bytes err_bytes killed``, then
    stdout and stderr (each its first ``cap`` bytes) in base64 around ``RB-SEP``. A report that
    says less than its header announces raises :class:`SandboxExecReportError`: output that did
    not come back is unknown, never empty."""
    # Shells may report a killed job on the merged output before the header line.
    at = text.find("RB ") if text.startswith("RB ") else text.find("\nRB ") + 1
    head, _, rest = text[at:].partition("\n") if at >= 0 else ("", "", "")
    fields = head.split()
    if len(fields) == 5:  # a wrapper that says nothing of a kill (a cd that failed)
        fields.append("0")
    if len(fields) != 6 or fields[0] != "RB" or not all(f.lstrip("-").isdigit() for f in fields[1:]):
        if _DISK_FULL in text:  # the wrapper's own write failed: its report never existed
            raise SandboxDiskFullError(_report_problem("without its header: the sandbox's disk is full",
                                                       text, exit_code))
        raise SandboxExecReportError(_report_problem("without its header", text, exit_code))
    rc, timed_out, out_len, err_len, killed = (int(f) for f in fields[1:])
    out_b64, _, err_b64 = rest.partition("RB-SEP\n")
    try:
        stdout = base64.b64decode("".join(out_b64.split()), validate=True)
        stderr = base64.b64decode("".join(err_b64.split()), validate=True)
    except ValueError:
        raise SandboxExecReportError(_report_problem("with its output garbled", text, exit_code)) from None
    # More than announced is a child still writing between the wrapper's count and its copy.
    if len(stdout) < min(out_len, cap) or len(stderr) < min(err_len, cap):
        if _DISK_FULL in text:
            raise SandboxDiskFullError(_report_problem("cut short: the sandbox's disk is full", text, exit_code))
        raise SandboxExecReportError(_report_problem(
            f"cut short ({len(stdout)} of {min(out_len, cap)} bytes of stdout, "
            f"{len(stderr)} of {min(err_len, cap)} of stderr)", text, exit_code))
    return ExecResult(
        exit_code=rc,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        timed_out=bool(timed_out),
        duration_sec=duration,
        truncated_bytes=max(0, out_len - cap) + max(0, err_len - cap),
        killed=bool(killed),
    )


def _report_problem(what: str, text: str, exit_code: int | None) -> str:
    """What went wrong with a report, and its lines with a space in them or its separator (the
    wrapper's own lines, a shell's complaint such as ``base64: not found``); any other line is
    shown by its length alone: the command's output travels in base64 lines, and base64 would
    carry a secret past the redaction of messages."""
    said = [line if " " in line or line == "RB-SEP" else f"<{len(line)} characters>"
            for line in text.splitlines() if line]
    return (f"the exec wrapper's report came back {what} (toolbox exit {exit_code}, {len(text)} characters: "
            f"{chr(10).join(said)[-300:]!r})")


def _tar_dir(local_dir: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # Children only: the root entry would impose local_dir's mode on the sandbox directory.
        for child in sorted(local_dir.iterdir()):
            tar.add(child, arcname=child.name, filter=root_owned)
    return buf.getvalue()
