"""The conformance suite every sandbox backend passes.

Subclass :class:`SandboxConformance` in a test module and provide two fixtures:

- ``backend_factory``: a zero-argument callable returning a fresh backend. Each test builds
  and closes its backend inside its own event loop, so clients bound to a loop work.
- ``sandbox_spec``: a callable ``labels -> SandboxSpec`` (image, resources, ...).

Commands name sandbox paths through :meth:`Sandbox.path`, so that ``local`` (which maps them
below a scratch root) passes too. Every test runs under its own ``ray-bench.run`` label and
fails if anything carrying it is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import pytest

from ray_bench.errors import SandboxGoneError
from ray_bench.sandboxes.base import (
    LABEL_RUN,
    STOP_GRACE_SEC,
    ExecWatch,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    run_labels,
)

BackendFactory = Callable[[], SandboxBackend]
SpecFactory = Callable[[Mapping[str, str]], SandboxSpec]
Runner = Callable[[Callable[[SandboxBackend], Awaitable[None]]], None]

# A process still listed but a zombie is dead for our purposes.
_ALIVE = 'alive() { [ -e /proc/"$1" ] && ! grep -q ") Z" /proc/"$1"/stat 2>/dev/null; }'


async def _child_dead(sbx: Sandbox, logs: str) -> None:
    """The process whose pid is in ``logs/child.pid`` is gone (within 5 s)."""
    check = await sbx.exec(
        f"{_ALIVE}; p=$(cat {logs}/child.pid); for i in 1 2 3 4 5 6 7 8 9 10; do "
        "alive $p || { echo dead; exit 0; }; sleep 0.5; done; echo alive",
        timeout=30,
    )
    assert check.stdout.strip() == "dead", check


@contextlib.asynccontextmanager
async def _child_of(sbx: Sandbox) -> AsyncIterator[str]:
    """Where a test's background child writes its pid; the child is killed on the way out (one
    that left its process group is beyond the local backend's kill at delete)."""
    await sbx.put_file(b"", "/logs/.keep")
    pid = sbx.path("/logs") + "/child.pid"
    try:
        yield pid
    finally:
        await sbx.exec(f"kill $(cat {pid}) 2>/dev/null", timeout=30)


@contextlib.asynccontextmanager
async def live_sandbox(backend: SandboxBackend, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
    sandbox = await backend.create(spec)
    try:
        yield sandbox
    finally:
        await sandbox.delete()


class SandboxConformance:
    """Backend-agnostic tests. Needs fixtures ``backend_factory`` and ``sandbox_spec``."""

    @pytest.fixture
    def run_id(self) -> str:
        return f"conformance-{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def run(self, backend_factory: BackendFactory, run_id: str) -> Runner:
        """Run ``body(backend)`` in a fresh event loop, then check nothing labelled remains."""

        def runner(body: Callable[[SandboxBackend], Awaitable[None]]) -> None:
            async def main() -> None:
                backend = backend_factory()
                try:
                    try:
                        await body(backend)
                    finally:
                        residue = await backend.list({LABEL_RUN: run_id})
                        for ref in residue:
                            await backend.remove(ref)
                    assert residue == [], f"left behind: {residue}"
                finally:
                    await backend.close()

            asyncio.run(main())

        return runner

    def _spec(self, sandbox_spec: SpecFactory, run_id: str, **labels: str) -> SandboxSpec:
        return sandbox_spec(
            run_labels(run_id, labels.get("cell", "cell-1"), labels.get("attempt", "att-1"))
        )

    # -- create and list ------------------------------------------------------------------

    def test_create_with_labels_is_listed(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            spec = self._spec(sandbox_spec, run_id, cell="c-7", attempt="a-9")
            async with live_sandbox(backend, spec) as sbx:
                assert sbx.labels[LABEL_RUN] == run_id
                refs = await backend.list({LABEL_RUN: run_id})
                mine = [r for r in refs if r.id == sbx.id]
                assert len(mine) == 1, refs
                assert mine[0].labels["ray-bench.managed"] == "true"
                assert mine[0].labels["ray-bench.cell"] == "c-7"
                assert mine[0].labels["ray-bench.attempt"] == "a-9"
                assert mine[0].backend == backend.name
                narrowed = await backend.list({LABEL_RUN: run_id, "ray-bench.attempt": "a-9"})
                assert [r.id for r in narrowed] == [sbx.id]
                assert await backend.list({LABEL_RUN: run_id, "ray-bench.attempt": "other"}) == []

        run(body)

    # -- exec -----------------------------------------------------------------------------

    def test_exec_exit_codes_and_streams(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                ok = await sbx.exec("true", timeout=30)
                assert (ok.exit_code, ok.timed_out, ok.truncated_bytes) == (0, False, 0)
                res = await sbx.exec("echo out; echo err >&2; exit 7", timeout=30)
                assert res.exit_code == 7
                assert res.stdout == "out\n"
                assert res.stderr == "err\n"
                assert not res.timed_out
                assert not res.oom_killed
                assert res.duration_sec >= 0
                missing = await sbx.exec("no-such-command-ray-bench", timeout=30)
                assert missing.exit_code == 127

        run(body)

    def test_exec_env(self, run: Runner, sandbox_spec: SpecFactory, run_id: str) -> None:
        async def body(backend: SandboxBackend) -> None:
            base = self._spec(sandbox_spec, run_id)
            spec = SandboxSpec(
                labels=base.labels,
                image=base.image,
                dockerfile_dir=base.dockerfile_dir,
                resources=base.resources,
                env={"RB_A": "from-spec", "RB_B": "from-spec"},
            )
            async with live_sandbox(backend, spec) as sbx:
                res = await sbx.exec(
                    'echo "$RB_A $RB_B $RB_C"', timeout=30, env={"RB_B": "b x", "RB_C": "c"}
                )
                assert res.stdout == "from-spec b x c\n"

        run(body)

    def test_exec_cwd(self, run: Runner, sandbox_spec: SpecFactory, run_id: str) -> None:
        async def body(backend: SandboxBackend) -> None:
            spec = self._spec(sandbox_spec, run_id)
            async with live_sandbox(backend, spec) as sbx:
                res = await sbx.exec("echo in-workdir > w.txt", timeout=30)
                assert res.exit_code == 0, res
                res = await sbx.exec(f"cat {sbx.path(spec.workdir)}/w.txt", timeout=30, cwd="/")
                assert res.stdout == "in-workdir\n"
                res = await sbx.exec("echo in-cwd > c.txt", timeout=30, cwd="/data/sub")
                assert res.exit_code == 0, res
                res = await sbx.exec(f"cat {sbx.path('/data/sub')}/c.txt", timeout=30)
                assert res.stdout == "in-cwd\n"

        run(body)

    def test_exec_script_runs_the_script_with_bash_its_shebang_ignored(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                # a #!/bin/sh script that needs bash (an array), as Harbor's `bash test.sh` runs it;
                # in an image without bash (busybox), `sh SCRIPT`: then a POSIX script
                has_bash = (await sbx.exec("command -v bash", timeout=30)).exit_code == 0
                script = (b'#!/bin/sh\na=(x "$RB_S")\necho "${a[1]} $0 $(pwd)"\nexit 3\n' if has_bash
                          else b'#!/bin/bash\necho "$RB_S $0 $(pwd)"\nexit 3\n')
                await sbx.put_file(script, "/t/s.sh")
                res = await sbx.exec_script("/t/s.sh", timeout=30, env={"RB_S": "y z"}, cwd="/data")
                assert res.exit_code == 3, res
                assert res.stdout == f"y z {sbx.path('/t/s.sh')} {sbx.path('/data')}\n", res
                missing = await sbx.exec_script("/t/none.sh", timeout=30)
                # bash: 127; busybox sh: 2, saying which file
                assert missing.exit_code == 127 if has_bash else missing.exit_code != 0, missing
                assert "none.sh" in missing.stderr, missing

        run(body)

    def test_exec_timeout_kills_process_tree(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                logs = sbx.path("/logs")
                await sbx.put_file(b"", "/logs/.keep")
                res = await sbx.exec(
                    f"sleep 300 & echo $! > {logs}/child.pid; echo started; sleep 300; echo never",
                    timeout=1.5,
                )
                assert res.timed_out
                assert res.exit_code != 0
                assert not res.killed  # sh and its sleeps die of the SIGTERM: no SIGKILL needed
                assert res.duration_sec < 60  # far below the 300 s it would run; generous under load
                assert "never" not in res.stdout
                await _child_dead(sbx, logs)
                after = await sbx.exec("echo still-usable", timeout=30)
                assert after.stdout == "still-usable\n"

        run(body)

    @pytest.mark.parametrize("child", ["sleep 60", "setsid sleep 60"], ids=["in its group", "left its group"])
    def test_a_background_child_holding_the_output_loses_none_of_it(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str, child: str
    ) -> None:
        """A child started without a redirect keeps the command's stdout and stderr open after it
        exits. The exec still returns what the command printed and its exit code, well within its
        timeout and as no timeout; the child lives on in the sandbox."""

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx, _child_of(sbx) as pid:
                res = await sbx.exec(f"{child} & echo $! > {pid}; echo printed; echo said >&2; exit 3", timeout=20)
                assert (res.exit_code, res.stdout, res.stderr) == (3, "printed\n", "said\n"), res
                assert not res.timed_out and not res.killed, res
                assert res.duration_sec < 15, res
                alive = await sbx.exec(f"{_ALIVE}; alive $(cat {pid}) && echo alive", timeout=30)
                assert alive.stdout == "alive\n", alive

        run(body)

    def test_a_timed_out_commands_output_outlives_a_child_that_left_its_group(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        """The timeout's kill does not reach a child that made itself a session of its own, and
        that child still holds the output: what the command printed before the timeout is kept."""

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx, _child_of(sbx) as pid:
                res = await sbx.exec(f"setsid sleep 60 & echo $! > {pid}; echo started; echo said >&2; sleep 300",
                                     timeout=1.5)
                assert res.timed_out and (res.stdout, res.stderr) == ("started\n", "said\n"), res
                assert res.duration_sec < 1.5 + STOP_GRACE_SEC + 15, res

        run(body)

    def test_a_timed_out_command_is_sent_sigterm_first_and_may_write_out_what_it_buffered(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        """A CLI flushes its session transcript on SIGTERM and loses it to a SIGKILL: a command
        stopped by its timeout gets SIGTERM, and what its handler writes is there afterwards;
        a child that ignores SIGTERM is killed once the grace is up."""

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                logs = sbx.path("/logs")
                await sbx.put_file(b"", "/logs/.keep")
                stubborn = "sh -c 'trap \"\" TERM; while :; do sleep 0.1; done' & echo $! > " + logs + "/child.pid; "
                res = await sbx.exec(
                    stubborn + f"trap 'echo flushed > {logs}/flushed; exit 143' TERM; echo started; "
                    "while :; do sleep 0.1; done",
                    timeout=1.5,
                )
                assert res.timed_out and "started" in res.stdout, res
                assert res.duration_sec >= 1.5
                flushed = await sbx.exec(f"cat {logs}/flushed", timeout=30)
                assert flushed.stdout == "flushed\n", flushed
                await _child_dead(sbx, logs)
                # The child ignored SIGTERM: it died of the SIGKILL after the whole grace.
                assert res.duration_sec >= 1.5 + STOP_GRACE_SEC, res
                assert res.killed, res  # and the result says the SIGKILL was needed

        run(body)

    @pytest.mark.parametrize("stubborn", [True, False], ids=["ignores SIGTERM", "exits on SIGTERM"])
    def test_a_cancelled_exec_tells_its_watch_whether_its_stop_needed_the_sigkill(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str, stubborn: bool
    ) -> None:
        """A cancelled exec returns no result: its watch learns, once the stop has ended, whether
        the group outlived its SIGTERM grace (what a CLI did in it may be in no record)."""

        class Started(ExecWatch):
            def __init__(self) -> None:
                super().__init__()
                self.running = asyncio.Event()

            def feed(self, stream: str, data: bytes) -> None:  # type: ignore[override]
                if b"started" in data:
                    self.running.set()

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                watch = Started()
                trap = "trap '' TERM; " if stubborn else ""
                task = asyncio.ensure_future(sbx.exec(f"{trap}echo started; while :; do sleep 0.1; done",
                                                      timeout=300, watch=watch))
                await asyncio.wait_for(watch.running.wait(), 120)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                assert await watch.halted(STOP_GRACE_SEC + 60) is stubborn

        run(body)

    def test_a_stop_on_request_that_needs_the_sigkill_says_so(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        class StopWhenStarted(ExecWatch):
            def feed(self, stream: str, data: bytes) -> None:  # type: ignore[override]
                if b"started" in data:
                    self.stop("seen")

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                watch = StopWhenStarted()
                res = await sbx.exec("trap '' TERM; echo started; while :; do sleep 0.1; done",
                                     timeout=300, watch=watch)
                assert res.stopped == "seen" and res.killed, res
                assert watch.killed is True

        run(body)

    def test_exec_streams_output_and_stops_on_request(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        """A watch sees the output while the command runs (it would run 300 s) and stops it:
        the command and its children die, the result says why and keeps what was printed."""

        class StopAtThree(ExecWatch):
            def __init__(self) -> None:
                super().__init__()
                self.seen = {"stdout": b"", "stderr": b""}

            def feed(self, stream: str, data: bytes) -> None:  # type: ignore[override]
                self.seen[stream] += data
                if b"tick 3\n" in self.seen["stdout"] and b"err 1" in self.seen["stderr"]:
                    self.stop("saw tick 3")

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                logs = sbx.path("/logs")
                await sbx.put_file(b"", "/logs/.keep")
                watch = StopAtThree()
                res = await sbx.exec(
                    f"sleep 300 & echo $! > {logs}/child.pid; echo err 1 >&2; "
                    "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo tick $i; sleep 0.1; done",
                    timeout=300, watch=watch,
                )
                assert res.stopped == "saw tick 3", res
                assert not res.timed_out
                assert res.duration_sec < 120
                assert "tick 3\n" in res.stdout and "tick 2999" not in res.stdout
                assert "err 1" in res.stderr
                assert not res.killed and watch.killed is False  # it died of the SIGTERM
                await _child_dead(sbx, logs)
                plain = await sbx.exec("echo no-watch", timeout=30)
                assert plain.stopped is None and plain.stdout == "no-watch\n"

        run(body)

    def test_output_cap_counts_dropped_bytes(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                res = await sbx.exec(
                    "yes | head -c 100000; yes e | head -c 5000 >&2", timeout=60, output_cap=1000
                )
                assert res.exit_code == 0
                assert len(res.stdout) == 1000
                assert len(res.stderr) == 1000
                assert res.stdout.startswith("y\ny\n")
                assert res.truncated_bytes == 99000 + 4000

        run(body)

    # -- files ----------------------------------------------------------------------------

    def test_put_and_get_round_trip(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str, tmp_path: Path
    ) -> None:
        src = tmp_path / "src"
        (src / "sub" / "deeper").mkdir(parents=True)
        (src / "a.txt").write_text("alpha\n")
        (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 40)
        (src / "sub" / "deeper" / "c.txt").write_text("gamma\n")
        script = src / "run.sh"
        script.write_text("#!/bin/sh\necho ran\n")
        script.chmod(0o755)

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                await sbx.put_dir(src, "/data/in")
                await sbx.put_file(b"echo extra\n", "/data/in/new/extra.sh", mode=0o755)
                data = sbx.path("/data/in")
                res = await sbx.exec(
                    f"cat {data}/a.txt {data}/sub/deeper/c.txt && {data}/run.sh"
                    f" && {data}/new/extra.sh; test -x {data}/new/extra.sh && echo exec-ok",
                    timeout=30,
                )
                assert res.stdout == "alpha\ngamma\nran\nextra\nexec-ok\n", res

                out = tmp_path / "out"
                total = await sbx.get_dir("/data/in", out, max_bytes=1 << 30)
                expected = {
                    p.relative_to(src).as_posix(): p.read_bytes()
                    for p in src.rglob("*")
                    if p.is_file()
                }
                expected["new/extra.sh"] = b"echo extra\n"
                got = {
                    p.relative_to(out).as_posix(): p.read_bytes()
                    for p in out.rglob("*")
                    if p.is_file()
                }
                assert got == expected
                assert total == sum(len(v) for v in expected.values())

                capped = tmp_path / "capped"
                n = await sbx.get_dir("/data/in", capped, max_bytes=100)
                on_disk = sum(p.stat().st_size for p in capped.rglob("*") if p.is_file())
                assert n == on_disk
                assert 0 < n <= 100

                assert await sbx.get_dir("/no/such/dir", tmp_path / "none", max_bytes=100) == 0

        run(body)

    def test_take_dir_collects_what_get_dir_would(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str, tmp_path: Path
    ) -> None:
        """The runner collects ``/logs`` with ``take_dir`` once the sandbox is done."""
        src = tmp_path / "src"
        (src / "agent").mkdir(parents=True)
        (src / "agent" / "trace.txt").write_text("trace\n")
        (src / "verifier").mkdir()
        (src / "verifier" / "reward.txt").write_text("1\n")

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                await sbx.put_dir(src, "/logs")
                out = tmp_path / "out"
                n = await sbx.take_dir("/logs", out, max_bytes=1 << 20)
                got = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
                assert got == {"agent/trace.txt": "trace\n", "verifier/reward.txt": "1\n"}
                assert n == len("trace\n") + len("1\n")
                assert await sbx.take_dir("/no/such/dir", tmp_path / "none", max_bytes=100) == 0

        run(body)

    def test_put_dir_into_the_root(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str, tmp_path: Path
    ) -> None:
        """The cell runner uploads a staged tree (task/, logs/, agent/, the workdir) to "/" in
        one call; every backend merges it into its root, empty directories included."""
        stage = tmp_path / "stage"
        (stage / "task").mkdir(parents=True)
        (stage / "task" / "instruction.md").write_text("do it\n")
        (stage / "logs" / "agent").mkdir(parents=True)
        (stage / "rbapp").mkdir()

        async def body(backend: SandboxBackend) -> None:
            async with live_sandbox(backend, self._spec(sandbox_spec, run_id)) as sbx:
                await sbx.put_dir(stage, "/")
                task, logs, app = sbx.path("/task"), sbx.path("/logs/agent"), sbx.path("/rbapp")
                res = await sbx.exec(f"cat {task}/instruction.md && test -d {logs} && test -d {app} && echo dirs-ok",
                                     timeout=30)
                assert res.stdout == "do it\ndirs-ok\n", res

        run(body)

    # -- delete ---------------------------------------------------------------------------

    def test_delete_idempotent_and_unlisted(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            sbx = await backend.create(self._spec(sandbox_spec, run_id))
            assert [r.id for r in await backend.list({LABEL_RUN: run_id})] == [sbx.id]
            await sbx.delete()
            await sbx.delete()
            assert await backend.list({LABEL_RUN: run_id}) == []
            with pytest.raises(SandboxGoneError):
                await sbx.exec("true", timeout=10)

        run(body)

    def test_remove_by_ref(self, run: Runner, sandbox_spec: SpecFactory, run_id: str) -> None:
        async def body(backend: SandboxBackend) -> None:
            sbx = await backend.create(self._spec(sandbox_spec, run_id))
            refs = await backend.list({LABEL_RUN: run_id})
            assert [r.id for r in refs] == [sbx.id]
            await backend.remove(refs[0])
            await backend.remove(refs[0])
            assert await backend.list({LABEL_RUN: run_id}) == []
            await sbx.delete()

        run(body)

    def test_create_then_cancel_leaves_nothing(
        self, run: Runner, sandbox_spec: SpecFactory, run_id: str
    ) -> None:
        async def body(backend: SandboxBackend) -> None:
            # Cancel at several points of the create; whichever it reached, nothing remains.
            for delay in (0.0, 0.01, 0.05, 0.2):
                task = asyncio.ensure_future(backend.create(self._spec(sandbox_spec, run_id)))
                await asyncio.sleep(delay)
                task.cancel()
                try:
                    made = await task
                except asyncio.CancelledError:
                    pass
                else:  # it finished before the cancel landed: the caller owns it
                    await made.delete()
                assert await backend.list({LABEL_RUN: run_id}) == [], f"after cancel at {delay}s"

        run(body)
