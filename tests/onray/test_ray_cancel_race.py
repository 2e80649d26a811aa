"""A cancel that reaches a runner before its attempt does is dropped by Ray; the pool sends it
again until the attempt ends (``CANCEL_RESEND_SEC``, at most ``CANCEL_RESENDS`` times). Seen in
CI: a ``pause --now`` 0.1 s after the first starts cancelled none of four attempts, which ran to
their 60 s timeout. And the runner's clean-up of a cancelled attempt is shielded from every
cancel that follows the first: its sandbox is removed however often it is cancelled."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from support.ray_local import ensure_ray
from support.specs import local_spec

from ray_bench.cells import runner
from ray_bench.models.attempt import AttemptSummary
from ray_bench.onray.pool import CANCEL_RESEND_SEC, CANCEL_RESENDS, RayPool


@pytest.mark.ray
@pytest.mark.slow
def test_attempts_cancelled_as_they_are_submitted_all_end_cancelled(tmp_path: Path) -> None:
    ensure_ray()
    pool = RayPool(2)
    refs = []
    for i in range(4):
        spec = local_spec(tmp_path / f"c{i}", "sleep 600", attempt_id=f"c{i}-a1", cell_id=f"c{i}",
                          agent_timeout_sec=300.0, backend_options={"root": str(tmp_path / f"sbx{i}")})
        refs.append(pool.submit(spec))
    time.sleep(0.3)  # the tasks are on their way to runners that may still be starting
    pool.cancel(refs)
    done: dict[object, AttemptSummary] = {}
    deadline = time.monotonic() + 240  # far below the agents' 300 s, however loaded the machine
    while len(done) < len(refs) and time.monotonic() < deadline:
        done.update(pool.wait([r for r in refs if r not in done], 5.0))
    assert len(done) == len(refs), "an attempt ran on after its cancel"
    assert all(s.cancelled for s in done.values()), [(s.attempt_id, s.cancelled, s.agent) for s in done.values()]
    assert not [p for p in tmp_path.glob("sbx*/*") if p.is_dir()]  # every sandbox removed
    assert CANCEL_RESEND_SEC * CANCEL_RESENDS < 60  # the resends end long before an agent's timeout


class _SlowDelete:
    def __init__(self) -> None:
        self.deleted = False

    async def delete(self) -> None:
        await asyncio.sleep(0.5)
        self.deleted = True


def test_a_cancelled_attempts_sandbox_is_removed_however_often_it_is_cancelled() -> None:
    sandbox = _SlowDelete()
    summary = AttemptSummary(attempt_id="a", cell_id="c", task="t", arm="x", rep=1, account="acct")

    async def main() -> None:
        task = asyncio.ensure_future(runner._delete_shielded(sandbox, summary))  # type: ignore[arg-type]
        for _ in range(4):  # the pool's resends, while the delete is under way
            await asyncio.sleep(0.05)
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sandbox.deleted and summary.cleanup_error is None


def test_the_shielded_usage_read_waits_through_repeated_cancels() -> None:
    async def work() -> str:
        await asyncio.sleep(0.3)
        return "read"

    async def main() -> str | None:
        task = asyncio.ensure_future(runner._shielded(work(), 5.0))
        for _ in range(3):
            await asyncio.sleep(0.05)
            task.cancel()
        return await task

    assert asyncio.run(main()) == "read"
