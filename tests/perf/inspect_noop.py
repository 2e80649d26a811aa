"""Inspect AI's side of ``bench_vs_inspect.py``: ray-bench's no-op cell as an Inspect task.

Each sample does what a no-op cell of ``scale_support.write_suite`` does in its sandbox: the
agent's exec (``true``), then the verifier's exec (write the reward) and the reward read back.
No model call: the agent of a no-op cell calls none (the eval's model is ``mockllm/model``).

    inspect eval tests/perf/inspect_noop.py -T samples=2000 --model mockllm/model --sandbox local
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox

AGENT = "true"
VERIFY = "mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt"


@solver
def noop_agent() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        result = await sandbox().exec(["/bin/sh", "-c", AGENT])
        if not result.success:
            raise RuntimeError(f"agent exited {result.returncode}: {result.stderr}")
        return state

    return solve


@scorer(metrics=[mean()])
def noop_verifier() -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["/bin/sh", "-c", VERIFY])
        if not result.success:
            raise RuntimeError(f"verifier exited {result.returncode}: {result.stderr}")
        return Score(value=float(await sandbox().read_file("logs/verifier/reward.txt")))

    return score


def noop_dataset(samples: int) -> MemoryDataset:
    return MemoryDataset([Sample(id=i, input=f"Task {i}: do nothing.") for i in range(samples)])


@task
def noop(samples: int = 2000) -> Task:
    return Task(dataset=noop_dataset(samples), solver=noop_agent(), scorer=noop_verifier(), sandbox="local")
