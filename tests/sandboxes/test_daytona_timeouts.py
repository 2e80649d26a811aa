"""A Daytona command whose answer was lost: its request outran its time (the toolbox terminates
the wrapper's process group and answers 408, the daemon's ``ExecuteCommand``, or no answer
comes), or was cut on the way (a 5xx, a closed connection) before or after the command ended.
What the command wrote is waited for and read back from the sandbox, and a command past its
deadline is stopped: never lost or left running."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from daytona import DaytonaConnectionError, DaytonaError
from support.daytona_fixtures import backend_for, spec_for
from support.daytona_server import DaytonaServer, Faults

from ray_bench.errors import SandboxUnavailableError
from ray_bench.sandboxes.base import Sandbox
from ray_bench.sandboxes.daytona import sandbox as daytona_sandbox
from ray_bench.sandboxes.daytona.sandbox import _RECOVER, DaytonaSandbox, _parse_exec, _sh

from .conformance import live_sandbox

pytestmark = [pytest.mark.daytona, pytest.mark.docker]

# What is left running of the tests' sleeps (333 and 334 s: no watchdog's `sleep <timeout>` of a
# look, which is run with a timeout of 20 s), and of any wrapper's scratch dir.
_LEFT = "ps -o args 2>/dev/null | grep -c '[s]leep 33[0-9]'; ls /tmp/.ray-bench 2>/dev/null | wc -l"


def _run_id() -> str:
    return f"dtto-{uuid.uuid4().hex[:8]}"


def _left(said: str) -> tuple[int, int]:
    sleeping, scratch = said.split()
    return int(sleeping), int(scratch)


def test_a_command_that_outran_the_toolbox_is_reported_as_timed_out_with_its_output(
    server: DaytonaServer, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The toolbox's timeout passes 5 s in, long before the command's own 20 s (a loaded runner
    # makes the wrapper late in the same way): it kills the wrapper's group and answers 408. The
    # command, a session of its own, runs on; before the recovery the 408 was raised as
    # "unavailable", the output lost and `sleep 333` left running until the sandbox's delete.
    monkeypatch.setattr(daytona_sandbox, "_EXEC_SLACK_SEC", -15)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                result = await sbx.exec("echo out; echo err >&2; sleep 333; echo never", timeout=20)
                assert (result.stdout, result.stderr) == ("out\n", "err\n")
                assert result.timed_out and result.exit_code == -1
                left = await sbx.exec(_LEFT, timeout=20)
                assert _left(left.stdout) == (0, 1), left  # its own scratch dir only
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["exec_timed_out"] == 1


def test_a_408_with_nothing_left_in_the_sandbox_is_raised_as_unavailable(
    server: DaytonaServer, base_image: str
) -> None:
    # A 408 for a command that never started (the fault answers without running it): there is
    # nothing to read back, so the provider's error stands and the scheduler runs the cell again.
    server.faults = Faults(exec_timeout_count=1, exec_timeout_match="echo never-ran")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                with pytest.raises(SandboxUnavailableError, match="timed out after"):
                    await sbx.exec("echo never-ran", timeout=20)
                assert (await sbx.exec("echo again", timeout=20)).stdout == "again\n"
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["exec_timeout"] == 1


def _in_sandbox(server: DaytonaServer, image: str, body: Callable[[Sandbox], Awaitable[None]]) -> None:
    """Run ``body`` on a new sandbox of ``server`` (no 5xx retried), then close the backend."""

    async def main() -> None:
        backend = backend_for(server, max_server_retries=0)
        try:
            async with live_sandbox(backend, spec_for(image, _run_id())) as sbx:
                await body(sbx)
        finally:
            await backend.close()

    asyncio.run(main())


def test_an_answer_lost_after_the_command_ended_is_read_back_from_its_report(
    server: DaytonaServer, base_image: str
) -> None:
    # A 502 after the command ran: the command ended, its answer was lost on the way. Before, it
    # was raised as unavailable (the wrapper had removed its dir): the output and the status lost,
    # the cell's attempt a provider failure. The wrapper keeps its report until the answer is in.
    server.faults = Faults(exec_lost_match="echo lost-after")

    async def body(sbx: Sandbox) -> None:
        result = await sbx.exec("echo lost-after; echo e >&2; exit 4", timeout=20)
        assert (result.exit_code, result.stdout, result.stderr) == (4, "lost-after\n", "e\n")
        assert not result.timed_out
        left = await sbx.exec(_LEFT, timeout=20)
        assert _left(left.stdout) == (0, 1), left  # its own scratch dir only

    _in_sandbox(server, base_image, body)
    assert server.counts["exec_lost"] == 1


def test_a_read_back_refused_429_and_503_is_asked_again_within_the_budget(
    server: DaytonaServer, base_image: str
) -> None:
    # The answer is lost after the command ran, and the read-back of its report is refused
    # twice (a 429 with Retry-After, then a 503): before, the one refusal raised the lost answer
    # and a command that ran was counted as the provider's failure (issue 53).
    server.faults = Faults(exec_lost_match="echo refused-back", exec_refused=(429, 503),
                           exec_refused_match="mine()", retry_after_sec=0.5)

    async def body(sbx: Sandbox) -> None:
        result = await sbx.exec("echo refused-back; exit 3", timeout=20)
        assert (result.exit_code, result.stdout) == (3, "refused-back\n")

    _in_sandbox(server, base_image, body)
    assert (server.counts["exec_lost"], server.counts["exec_refused"]) == (1, 2)


@pytest.mark.parametrize("how", ["502", "reset"])
def test_an_answer_cut_while_the_command_runs_is_waited_for_and_read_back(
    server: DaytonaServer, base_image: str, how: str
) -> None:
    # A proxy in front of the daemon cuts the request 1 s in (a 502, or the connection closed
    # with no answer); the daemon runs the command on. It is looked at until it ends, and its
    # own output and status come back. Before: raised as unavailable, the output lost.
    server.faults = Faults(exec_cut_match="sleep 4", exec_cut_after_sec=1.0, exec_cut_how=how)

    async def body(sbx: Sandbox) -> None:
        result = await sbx.exec("echo a; sleep 4; echo b; exit 5", timeout=60)
        assert (result.exit_code, result.stdout, result.timed_out) == (5, "a\nb\n", False)
        assert result.duration_sec >= 4
        left = await sbx.exec(_LEFT, timeout=20)
        assert _left(left.stdout) == (0, 1), left

    _in_sandbox(server, base_image, body)
    assert server.counts["exec_cut"] == 1


def test_a_cut_command_past_its_deadline_is_stopped_and_reported_timed_out(
    server: DaytonaServer, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer is cut 1 s in and the wrapper is still running at the reattach's deadline (the
    # exec's limit plus a slack, shrunk here to 5 s from the start): the command is stopped and
    # what it wrote is reported, timed out; nothing is left running.
    monkeypatch.setattr(daytona_sandbox, "_EXEC_SLACK_SEC", -15)
    server.faults = Faults(exec_cut_match="sleep 333", exec_cut_after_sec=1.0)

    async def body(sbx: Sandbox) -> None:
        result = await sbx.exec("echo a; sleep 333; echo never", timeout=20)
        assert (result.stdout, result.timed_out, result.exit_code) == ("a\n", True, -1)
        left = await sbx.exec(_LEFT, timeout=20)
        assert _left(left.stdout) == (0, 1), left

    _in_sandbox(server, base_image, body)
    assert server.counts["exec_cut"] == 1


def test_a_cut_command_that_cannot_be_looked_at_raises_the_lost_answer(
    server: DaytonaServer, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every look's answer is lost too (the sandbox is out of reach): after LOOK_MISSES of them
    # the first error stands, as before.
    monkeypatch.setattr(daytona_sandbox, "LOOK_EVERY_SEC", 0.2)
    server.faults = Faults(exec_cut_match="sleep 333", exec_cut_after_sec=1.0, exec_lost_match="RB-RUNNING")

    async def body(sbx: Sandbox) -> None:
        with pytest.raises(SandboxUnavailableError, match="while the command runs"):
            await sbx.exec("echo a; sleep 333", timeout=20)

    _in_sandbox(server, base_image, body)
    assert server.counts["exec_lost"] == daytona_sandbox.LOOK_MISSES


def test_a_cancel_while_a_cut_command_is_waited_for_stops_it(server: DaytonaServer, base_image: str) -> None:
    server.faults = Faults(exec_cut_match="sleep 333", exec_cut_after_sec=1.0)

    async def body(sbx: Sandbox) -> None:
        running = asyncio.ensure_future(sbx.exec("sleep 333", timeout=60))
        while server.counts["exec_cut"] == 0:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # in the reattach's looks
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        left = await sbx.exec(_LEFT, timeout=20)
        assert _left(left.stdout)[0] == 0, left

    _in_sandbox(server, base_image, body)


@pytest.mark.parametrize(("status", "may_have_run"), [(400, False), (404, False), (408, True), (500, True),
                                                      (502, True), (504, True)])
def test_which_failed_requests_may_have_run_their_command(status: int, may_have_run: bool) -> None:
    exc = SandboxUnavailableError("exec")
    exc.__cause__ = DaytonaError("x", status_code=status)
    assert daytona_sandbox._may_have_run(exc) is may_have_run
    exc.__cause__ = DaytonaConnectionError("connection reset")
    assert daytona_sandbox._may_have_run(exc)


def test_the_recovery_reports_a_finished_command_and_kills_only_its_own_processes(
    server: DaytonaServer, base_image: str
) -> None:
    # The state a wrapper killed after its command ended leaves: the status written, the output
    # in its files. Its `self` and `wpid` name processes that are not the wrapper's (their pids
    # were reused): they are left alone.
    run_id = _run_id()
    d = f"/tmp/.ray-bench/{uuid.uuid4().hex}"
    setup = (f'mkdir -p {d} && printf "out\\n" >{d}/out && printf "e\\n" >{d}/err && echo 3 >{d}/rc && '
             f'(setsid sleep 334 >/dev/null 2>&1 </dev/null & echo $! >{d}/self) && cp {d}/self {d}/wpid')

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                assert isinstance(sbx, DaytonaSandbox)
                made = await sbx.exec(setup, timeout=20)
                assert made.exit_code == 0, made
                said = await sbx._sandbox.process.exec(_sh(_RECOVER, d, "1000"), timeout=30)
                result = _parse_exec(said.result or "", said.exit_code, 1000, 0.0)
                assert (result.exit_code, result.timed_out, result.killed) == (3, False, False)
                assert (result.stdout, result.stderr) == ("out\n", "e\n")
                left = await sbx.exec(_LEFT, timeout=20)
                assert _left(left.stdout) == (1, 1), left  # the stranger sleeps on; the dir left is this look's own
                again = await sbx._sandbox.process.exec(_sh(_RECOVER, d, "1000"), timeout=30)
                assert (again.result or "").strip() == "RB-NONE"
        finally:
            await backend.close()

    asyncio.run(main())
