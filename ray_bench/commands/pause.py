"""``pause``: ask a running run's driver to stop launching (``pause.json``, which it polls).

Apart from :mod:`ray_bench.api` so that the command imports what it needs and no more (the
plan compiler, the driver and the backends cost seconds of imports on a loaded machine, and an
operator pauses when the machine is busy)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from ray_bench.config.secrets import refuse_operator_text
from ray_bench.errors import UserInputError
from ray_bench.files import write_whole
from ray_bench.runroot import RunPaths


def pause_run(run_root: Path, *, now: bool = False, reason: str = "") -> dict[str, Any]:
    """Ask the run's driver to stop launching. Only a running run can be paused: pausing one
    that is planned, paused, stopped or finished would do nothing, so it is refused (exit 2)
    and nothing is written."""
    from ray_bench.status.read import plan_brief, read_phase

    refuse_operator_text({"--reason": reason})
    paths = RunPaths(run_root)
    brief = None
    # and the values of its routes, before anything is read of the run; a plan edited under a
    # running driver must not keep it from a pause
    with contextlib.suppress(UserInputError):
        brief = plan_brief(run_root)  # its brief: the whole plan is ~9 MiB at 100,000 cells
    refuse_operator_text({"--reason": reason}, [a.route.env for a in brief.accounts] if brief else [])
    # the state alone (lock and events): not the cells' counts, which grow with the run
    state, brief = read_phase(run_root, brief=brief)
    identity = brief.identity
    if state != "running":
        fix = {"planned": "nothing to pause: it has not started",
               "finished": "nothing to pause: it has finished",
               "paused": "it is already paused",
               "stopped": "nothing to pause: it is not running"}[state]
        raise UserInputError(f"run {brief.run_id} is {state}", where=str(run_root), fix=fix)
    request = {
        "requested_at": time.time(), "now": now, "reason": reason,
        "resume_action": f"ray-bench execute --plan {paths.plan} --confirm {identity}",
    }
    write_whole(paths.pause, json.dumps(request, indent=2))  # the driver polls it: never half of it
    return request
