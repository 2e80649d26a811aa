"""A local sandbox's processes that left its process group (``setsid``, a daemon, a double fork)
are found by the mark in their environment and killed with the sandbox: none runs on after it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from ray_bench.errors import SandboxProcessesSurvivedError
from ray_bench.sandboxes import local_procs
from ray_bench.sandboxes.base import SandboxSpec
from ray_bench.sandboxes.local import LocalBackend, LocalSandbox
from ray_bench.sandboxes.local_procs import MARK, Census, Window, census, kill_marked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A process of its own session that outlives the command, its pid on stdout.
_ESCAPE = "setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $!"


def scan(sandbox_id: str, pids: Iterable[int]) -> tuple[list[int], list[int]]:
    """(the pids marked as ``sandbox_id``'s, the pids caught mid-``exec``): one :func:`census`."""
    found = census(pids)
    return found.marked.get(sandbox_id, []), found.exec_caught


def _sandbox(tmp_path: Path, name: str = "sandboxes") -> tuple[LocalBackend, LocalSandbox]:
    backend = LocalBackend(root=tmp_path / name)
    sbx = asyncio.run(backend.create(SandboxSpec(labels={"ray-bench.run": "r"})))
    assert isinstance(sbx, LocalSandbox)
    return backend, sbx


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper that never comes)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _escapee(sbx: LocalSandbox, command: str = _ESCAPE) -> int:
    result = asyncio.run(sbx.exec(command, timeout=30))
    assert result.exit_code == 0, result
    pid = int(result.stdout.split()[-1])
    assert _running(pid)
    assert os.getpgid(pid) != os.getpgid(os.getpid())
    return pid


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids a test started and expects gone: killed at the end whatever the test found."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_every_command_carries_its_sandboxs_mark(tmp_path: Path) -> None:
    _, sbx = _sandbox(tmp_path)
    said = asyncio.run(sbx.exec(f'echo "${MARK}"', timeout=30, env={MARK: "not-mine"}))
    assert said.stdout == f"{sbx.id}\n"  # set last: a caller's env cannot take the mark off
    asyncio.run(sbx.delete())


def test_a_setsid_escapee_dies_with_its_sandbox(tmp_path: Path, reap: list[int]) -> None:
    # Before the mark the group kill of delete() never reached it: `sleep 1000` ran on.
    _, sbx = _sandbox(tmp_path)
    reap.append(pid := _escapee(sbx))
    asyncio.run(sbx.delete())
    assert not _running(pid)


def test_a_double_forked_daemon_dies_with_its_sandbox(tmp_path: Path, reap: list[int]) -> None:
    _, sbx = _sandbox(tmp_path)
    command = "(setsid sh -c 'sleep 1000 & echo $! >daemon.pid; wait' >/dev/null 2>&1 </dev/null &); " \
              "while [ ! -s daemon.pid ]; do sleep 0.01; done; cat daemon.pid"
    reap.append(pid := _escapee(sbx, command))
    asyncio.run(sbx.delete())
    assert not _running(pid)


def test_an_escapee_that_keeps_forking_is_killed_with_all_it_forked(tmp_path: Path, reap: list[int]) -> None:
    _, sbx = _sandbox(tmp_path)
    loop = "setsid sh -c 'while :; do sleep 1000 & sleep 0.01; done' >/dev/null 2>&1 </dev/null & echo $!"
    reap.append(pid := _escapee(sbx, loop))
    time.sleep(0.3)  # a few dozen sleeps forked by now
    asyncio.run(sbx.delete())
    assert not _running(pid)
    left, _ = scan(sbx.id, (int(p) for p in os.listdir("/proc") if p.isdigit()))
    assert [p for p in left if _running(p)] == []


def test_an_old_sandbox_reads_every_process(tmp_path: Path, reap: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Past PID_WINDOW_SEC the pids since the create are not trusted to be the only candidates.
    _, sbx = _sandbox(tmp_path)
    reap.append(pid := _escapee(sbx))
    monkeypatch.setattr(local_procs, "PID_WINDOW_SEC", 0.0)
    sbx._window = Window(after=pid + 1_000_000, made=time.monotonic())  # a window that would miss it
    asyncio.run(sbx.delete())
    assert not _running(pid)


def test_take_dir_kills_escapees_before_it_collects(tmp_path: Path, reap: list[int]) -> None:
    _, sbx = _sandbox(tmp_path)
    writer = "setsid sh -c 'while :; do date >>\"$LOGS\"/late.txt; sleep 0.05; done' " \
             ">/dev/null 2>&1 </dev/null & echo $!"
    logs = sbx.path("/logs")
    reap.append(pid := _escapee(sbx, f'mkdir -p {logs}; export LOGS={logs}; {writer}'))
    _until(lambda: Path(logs, "late.txt").exists())
    asyncio.run(sbx.take_dir("/logs", tmp_path / "collected", max_bytes=1 << 20))
    assert not _running(pid)
    size = (tmp_path / "collected" / "late.txt").stat().st_size
    time.sleep(0.3)
    assert (tmp_path / "collected" / "late.txt").stat().st_size == size  # nobody writes into it
    asyncio.run(sbx.delete())


def test_another_sandboxs_processes_are_left_alone(tmp_path: Path, reap: list[int]) -> None:
    _, mine = _sandbox(tmp_path)
    _, theirs = _sandbox(tmp_path)
    reap.append(their_pid := _escapee(theirs))
    reap.append(my_pid := _escapee(mine))
    asyncio.run(mine.delete())
    assert not _running(my_pid)
    assert _running(their_pid)
    asyncio.run(theirs.delete())
    assert not _running(their_pid)


def test_remove_by_another_runner_kills_the_escapees(tmp_path: Path, reap: list[int]) -> None:
    # The runner that made the sandbox died; the audit's cleanup finds it by its labels.
    _, sbx = _sandbox(tmp_path)
    reap.append(pid := _escapee(sbx))
    later = LocalBackend(root=tmp_path / "sandboxes")
    (ref,) = asyncio.run(later.list({"ray-bench.run": "r"}))
    asyncio.run(later.remove(ref))
    assert not _running(pid)
    assert not Path(sbx.root).exists()


def test_a_mark_is_matched_whole(tmp_path: Path, reap: list[int]) -> None:
    env = {**os.environ, MARK: "sbx-12"}
    proc = subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)
    reap.append(proc.pid)
    pids = [proc.pid]
    _until(lambda: scan("sbx-12", pids)[1] == [])  # caught in its exec, its environment is empty
    assert scan("sbx-1", pids) == ([], [])
    assert scan("sbx-12", pids) == ([proc.pid], [])
    assert kill_marked("sbx-1") == 0 and _running(proc.pid)
    assert kill_marked("sbx-12") == 1
    proc.wait(timeout=10)


def test_a_process_that_will_not_die_is_an_error(tmp_path: Path, reap: list[int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGKILL does not end a process stuck in the kernel until it returns: modelled by a kill
    # that does nothing. The delete says so rather than calling the sandbox clean.
    proc = subprocess.Popen(["sleep", "1000"], env={**os.environ, MARK: "sbx-stuck"}, start_new_session=True)
    reap.append(proc.pid)
    with monkeypatch.context() as patched:  # undone before `reap` kills it for real
        patched.setattr(local_procs, "KILL_ROUNDS_SEC", 0.2)
        patched.setattr(local_procs, "_signal_kill", lambda pid, pidfd: None)
        with pytest.raises(SandboxProcessesSurvivedError, match=rf"1 of its processes survived .*pids {proc.pid}\b"):
            kill_marked("sbx-stuck")


def test_a_sandbox_that_ran_nothing_reads_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, sbx = _sandbox(tmp_path)

    def refuse(*args: object) -> Census:
        raise AssertionError("scanned")

    monkeypatch.setattr(local_procs, "census", refuse)
    asyncio.run(sbx.delete())


def test_a_young_sandbox_reads_only_the_pids_since_its_create(tmp_path: Path) -> None:
    _, sbx = _sandbox(tmp_path)
    assert sbx._window is not None
    asyncio.run(sbx.exec("true", timeout=30))
    every = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    read = local_procs._candidates(sbx._window)
    assert os.getpid() not in read and 1 not in read
    assert len(read) < len(every)
    asyncio.run(sbx.delete())


@pytest.mark.parametrize(("after", "newest", "inside", "outside"), [
    (100, 200, [101, 150, 200], [100, 99, 201, 5]),
    (32_700, 40, [32_701, 32_768, 1, 40], [32_700, 41, 1000]),  # wrapped past pid_max
])
def test_the_pid_window_is_cyclic(after: int, newest: int, inside: list[int], outside: list[int]) -> None:
    window = Window(after=after, made=time.monotonic())
    assert all(window.holds(p, newest) for p in inside)
    assert not any(window.holds(p, newest) for p in outside)


def _marked(mark_env: dict[str, str]) -> int:
    """A ``sleep`` in a session of its own with ``mark_env`` added to its environment, once its
    ``exec`` is over (its environment readable)."""
    proc = subprocess.Popen(["sleep", "1000"], env={**os.environ, **mark_env}, start_new_session=True)
    _until(lambda: bool(local_procs._environ(proc.pid)))
    return proc.pid


def test_a_similar_mark_is_never_killed(reap: list[int]) -> None:
    # Only an entry MARK=<id> whole is the sandbox's: a longer or shorter id, a name that ends in
    # MARK, or the text inside another variable's value are someone else's.
    mine = _marked({MARK: "sbx-12"})
    others = [_marked(env) for env in (
        {MARK: "sbx-1"}, {MARK: "sbx-123"}, {MARK: "xsbx-12"}, {MARK: "sbx-12 "},
        {f"X_{MARK}": "sbx-12"}, {"OTHER": f"{MARK}=sbx-12"},
    )]
    reap += [mine, *others]
    assert asyncio.run(local_procs.reap("sbx-12")) == 1
    _until(lambda: not _running(mine))
    assert all(_running(p) for p in others)


def test_a_census_files_each_process_under_every_mark_it_holds() -> None:
    one, two = _marked({MARK: "a"}), _marked({MARK: "b"})
    try:
        found = census([one, two, os.getpid()])
        assert found.marked == {"a": [one], "b": [two]}  # this process, unmarked, under none
        assert found.exec_caught == []
    finally:
        for pid in (one, two):
            os.kill(pid, signal.SIGKILL)


def test_sandboxes_ending_together_share_the_passes(tmp_path: Path, reap: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Each of 12 sandboxes leaves a double-forked, setsid'd daemon; a 13th is still running. Their
    # deletes in one turn of the loop are served by the same few passes (one finds and kills every
    # daemon, one sees none left), each kills its own, and the running one's daemon is untouched.
    daemon = "(setsid sh -c 'sleep 1000 & echo $! >daemon.pid; wait' >/dev/null 2>&1 </dev/null &); " \
             "while [ ! -s daemon.pid ]; do sleep 0.01; done; cat daemon.pid"
    backend = LocalBackend(root=tmp_path / "sandboxes")
    boxes = [asyncio.run(backend.create(SandboxSpec(labels={"ray-bench.run": "r"}))) for _ in range(13)]
    pids = []
    for sbx in boxes:
        assert isinstance(sbx, LocalSandbox)
        reap.append(pid := _escapee(sbx, daemon))
        pids.append(pid)
    passes: list[int] = []
    real = local_procs.census

    def counted(candidates: Iterable[int]) -> Census:
        found = real(candidates)
        passes.append(sum(len(v) for v in found.marked.values()))
        return found

    monkeypatch.setattr(local_procs, "census", counted)

    async def end_all() -> None:
        await asyncio.gather(*(sbx.delete() for sbx in boxes[:12]))

    asyncio.run(end_all())
    assert not any(_running(p) for p in pids[:12])
    assert _running(pids[12])
    assert len(passes) <= 4 and passes[0] >= 12  # a pass per sandbox was 12 passes at least
    asyncio.run(boxes[12].delete())
    assert not _running(pids[12])


@pytest.mark.parametrize("loop_goes_on", [True, False])
def test_a_cancelled_cleanup_still_kills(reap: list[int], loop_goes_on: bool) -> None:
    # The caller is cancelled; its loop goes on, or ends before the pass began: the kill is done
    # all the same (a thread's kill, as before the shared passes, ran to its end too).
    pid = _marked({MARK: "sbx-cancelled"})
    reap.append(pid)

    async def cancel() -> None:
        asking = asyncio.ensure_future(local_procs.reap("sbx-cancelled"))
        await asyncio.sleep(0)
        asking.cancel()
        deadline = time.monotonic() + 5
        while loop_goes_on and _running(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(cancel())
    _until(lambda: not _running(pid), timeout=5)


def test_a_process_caught_in_its_exec_is_waited_for_only_in_a_window_that_holds_it() -> None:
    # Its environment is empty for a moment: whose it is shows only after. A young sandbox whose
    # pid window does not hold it does not wait; an old one (no window) or one that does, waits.
    now = time.monotonic()
    caught = Census(marked={}, exec_caught=[500])
    holds = local_procs._Reaping("a", Window(after=400, made=now))
    misses = local_procs._Reaping("b", Window(after=600, made=now))
    old = local_procs._Reaping("c", None)
    assert not holds.step(caught, newest=700) and holds.pause == 0.005
    assert misses.step(caught, newest=700)
    assert not old.step(caught, newest=700)
    old.exec_deadline = time.monotonic() - 1  # its environment never showed: not waited for forever
    assert old.step(caught, newest=700)


def test_passes_are_paced_by_what_the_last_one_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cells ending one after another all the time: a pass begins no sooner than PASS_GAP times the
    # CPU of the one before after that one began, and serves every cell that ended meanwhile.
    began: list[float] = []
    asked: list[int] = []

    def costly(pids: list[int]) -> tuple[Census, float]:
        began.append(time.monotonic())
        return Census(marked={}, exec_caught=[]), 0.05

    monkeypatch.setattr(local_procs, "_costed_census", costly)
    monkeypatch.setattr(local_procs, "PASS_GAP", 4.0)

    async def one_after_another() -> None:
        async def end(i: int) -> None:
            await asyncio.sleep(i * 0.02)
            asked.append(await local_procs.reap(f"sbx-{i}"))

        await asyncio.gather(*(end(i) for i in range(10)))

    asyncio.run(one_after_another())
    assert asked == [0] * 10
    assert len(began) <= 3  # 10 ends over 0.18 s; a pass per end without the pace
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(began))


def test_a_pid_listed_by_a_pass_is_killed_only_if_it_is_still_the_sandboxs(reap: list[int]) -> None:
    # A pass may be a while old when its kills run, and a listed pid may belong to another process
    # by then (here: one marked as another sandbox's, and one unmarked, stand in for the reuse).
    theirs, unmarked = _marked({MARK: "sbx-b"}), _marked({})
    reap += [theirs, unmarked]
    stale = Census(marked={"sbx-a": [theirs, unmarked]}, exec_caught=[])
    reaping = local_procs._Reaping("sbx-a", None)
    assert reaping.step(stale, newest=None)
    assert reaping.killed == set()
    assert _running(theirs) and _running(unmarked)
