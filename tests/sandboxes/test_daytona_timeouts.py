"""A Daytona command whose request outran its time: the toolbox terminates the wrapper's process
group and answers 408 (the daemon's ``ExecuteCommand``), or no answer comes. What the command
wrote is read back from the sandbox and the command is stopped, never lost or left running."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import backend_for, spec_for
from support.daytona_server import DaytonaServer, Faults

from ray_bench.errors import SandboxUnavailableError
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


def test_a_lost_answer_is_not_read_back(server: DaytonaServer, base_image: str) -> None:
    # A 502 after the command ran is not a timeout: the command ended, and its answer is what
    # was lost; it stays an error (never repeated: an agent's command is not idempotent).
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server, max_server_retries=0)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                server.faults = Faults(exec_lost_fraction=1.0)
                with pytest.raises(SandboxUnavailableError, match="gateway"):
                    await sbx.exec("echo hi", timeout=20)
                server.faults = Faults()
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["exec_lost"] >= 1


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
