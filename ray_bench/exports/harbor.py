"""``ray-bench export harbor``: runs as Harbor 0.26 job directories, for ``harbor view``.

One job per (suite, arm), one trial per cell (:mod:`ray_bench.exports.source` says which attempt
is shown). The JSON follows Harbor's own models (``harbor/models/job``, ``harbor/models/trial``)
without importing Harbor, which needs Python 3.12; ``tests/exports/test_export_harbor_peer.py``
loads every file with Harbor's models and asks a running ``harbor view``.

Harbor decides whether a trial's reward counts from its exception's type name
(``harbor/models/trial/error_policy.py``). A ray-bench failure class becomes the closest Harbor
name, and every shown attempt that is not an accepted row (invalid, stopped by the watchdog,
excluded) carries ``policy_override: {has_valid_reward: false}`` as well, because some of our
invalid rows (an agent that crashed) are ones Harbor's own table would count. Harbor's mean over
the trials it counts is then the report's mean reward of the arm.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ray_bench.exports.source import (
    CellExport,
    Spend,
    SuiteExport,
    export_roots,
    load_suites,
    mean_reward,
    refuse_out,
    spend_of,
    staged,
)
from ray_bench.exports.transcripts import atif_trajectory, turns_of
from ray_bench.sandboxes.capabilities import capabilities

#: ray-bench failure class -> Harbor exception type. Names Harbor knows where one fits; the
#: override on every invalid row keeps Harbor from counting any of them.
EXCEPTION_OF_CLASS = {
    "task": "HealthcheckError",  # the task's environment or healthcheck failed
    "tool": "NonZeroAgentExitCodeError",  # the agent crashed or said it failed
    "evaluator": "RewardFileNotFoundError",  # the verifier wrote no reward
    "executor": "RuntimeRequestError",  # the runner or sandbox broke mid-cell
    "stack": "SandboxBuildFailedError",  # the sandbox could not be made
    "capacity": "MemoryLimitExceededError",  # out of memory, quota or 429 of the sandbox provider
    "provider": "ApiError",  # the model's provider failed
    "auth": "AuthenticationError",
    "behaviour": "DegenerationWatchdogError",  # ray-bench's own: the watchdog stopped the agent
}
CANCELLED = "CancelledError"
EXCLUDED = "CellExcludedError"
#: A valid row flagged agent_timeout: Harbor counts an AgentTimeoutError's reward, as we do.
AGENT_TIMEOUT = "AgentTimeoutError"
NAMESPACE = uuid.UUID("5b0d7a52-6f8e-4f57-9a43-6d2b8f1c3e10")  # stable ids: one export, one uuid


def export_harbor(runs: list[Path], out: Path) -> list[Path]:
    """Write one Harbor job directory per (suite, arm) under ``out``; return them."""
    refuse_out(out)
    suites = load_suites(export_roots(runs))
    jobs: list[Path] = []
    with staged(out) as tmp:
        for suite in suites:
            for arm in suite.evidence.arms:
                name = job_name(suite, arm)
                _write_job(suite, arm, tmp / name, out / name)
                jobs.append(out / name)
    return jobs


def job_name(suite: SuiteExport, arm: str) -> str:
    return f"{suite.suite}__{arm}"


def _write_job(suite: SuiteExport, arm: str, job_dir: Path, final_dir: Path) -> None:
    plan_arm = next(a for a in suite.plan.arms if a.name == arm)
    epochs = ",".join(sorted(suite.evidence.cohort.epochs))
    job_id = uuid.uuid5(NAMESPACE, f"{suite.evidence.cohort.name}/{epochs}/{arm}")
    agent = {"name": plan_arm.agent, "model_name": plan_arm.model}
    backends = sorted({c.backend for c in suite.plan.cells if c.arm == arm})
    environment = environment_of(backends[0] if len(backends) == 1 else "")
    paths = {t.id: t.path for t in suite.plan.tasks}
    cells = suite.arm_cells(arm)
    trials = [c for c in cells if c.shown is not None]
    job_dir.mkdir(parents=True)
    results = []
    for cell in trials:
        trial = trial_name(cell)
        result = trial_result(cell, suite, agent, paths, job_id=job_id, trial_dir=final_dir / trial)
        result["config"]["environment"] = environment
        _write_trial(cell, job_dir / trial, result, agent)
        results.append(result)
    config = {
        "job_name": final_dir.name,
        "jobs_dir": str(final_dir.parent),
        "n_attempts": 1,
        "retry": {"max_retries": max(suite.plan.max_attempts - 1, 0)},
        "agents": [agent],
        "environment": environment,
        "tasks": [{"path": paths[t], "source": suite.suite} for t in sorted({c.task for c in cells}) if t in paths],
    }
    _dump(job_dir / "config.json", config)
    started = [c.shown.started_at for c in trials if c.shown]
    finished = [c.shown.finished_at for c in trials if c.shown and c.shown.finished_at]
    _dump(job_dir / "result.json", {
        "id": str(job_id),
        "started_at": _when(min(started)) if started else _when(0.0),
        "finished_at": _when(max(finished)) if finished else None,
        "updated_at": _when(max(finished)) if finished else None,
        "n_total_trials": len(cells),
        "stats": job_stats(results, cells, suite.suite, agent),
    })


def environment_of(backend: str) -> dict[str, Any]:
    """Harbor's environment for a ray-bench backend: its own type where Harbor has one (docker,
    daytona), else none and the ray-bench sandbox class (Harbor would call the local one docker)."""
    if (harbor := capabilities(backend).harbor_environment) is not None:
        return {"type": harbor}
    return {"type": None, "import_path": f"ray_bench.sandboxes.{backend or 'mixed'}"}


def trial_name(cell: CellExport) -> str:
    return f"{cell.task}__r{cell.rep}-{cell.cell_id[:8]}"


def exception_type(cell: CellExport) -> str | None:
    """The Harbor exception name of the shown attempt, None for a clean valid row."""
    row = cell.shown
    if cell.excluded is not None:
        return EXCLUDED
    if row is None or cell.accepted:
        flags = cell.summary.verdict.flags if cell.summary.verdict else []
        return AGENT_TIMEOUT if "agent_timeout" in flags else None
    if row.status == "cancelled" or cell.summary.cancelled:
        return CANCELLED
    return EXCEPTION_OF_CLASS.get(row.failure_class or "executor", f"RayBench{(row.failure_class or '').title()}Error")


def _message(cell: CellExport) -> str:
    if cell.excluded is not None:
        e = cell.excluded
        return f"excluded by {e.by} at {_when(e.at)}: {e.reason}"
    verdict = cell.summary.verdict.message if cell.summary.verdict else ""
    row = cell.shown
    return f"ray-bench {row.failure_class if row else ''}: {verdict or row.status if row else ''}".strip()


def trial_result(cell: CellExport, suite: SuiteExport, agent: dict[str, Any], paths: dict[str, str], *,
                 job_id: uuid.UUID, trial_dir: Path) -> dict[str, Any]:
    row = cell.shown
    assert row is not None
    s = cell.summary
    name = trial_name(cell)
    task_path = paths.get(cell.task, cell.task)
    rewards = s.rewards or ({"reward": s.reward} if s.reward is not None else None)
    if cell.accepted and rewards is None and row.reward is not None:
        rewards = {"reward": row.reward}
    usage = s.usage
    ended = row.finished_at or s.finished_at or row.started_at
    kind = exception_type(cell)
    exception: dict[str, Any] | None = None
    if kind is not None:
        exception = {"exception_type": kind, "exception_message": _message(cell),
                     "exception_traceback": (s.error.traceback if s.error and s.error.traceback else ""),
                     "occurred_at": _when(ended)}
        if not cell.accepted or cell.excluded is not None:
            exception["policy_override"] = {"has_valid_reward": False}
    model = agent.get("model_name")
    return {
        "id": str(uuid.uuid5(NAMESPACE, row.attempt_id)),
        "task_name": cell.task,
        "trial_name": name,
        "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": task_path},
        "source": suite.suite,
        "task_checksum": row.task_checksum,
        "config": {"task": {"path": task_path, "source": suite.suite}, "trial_name": name,
                   "trials_dir": str(trial_dir.parent), "agent": agent, "job_id": str(job_id)},
        "agent_info": {"name": agent["name"], "version": "ray-bench",
                       "model_info": {"name": model} if model else None},
        # unknown usage stays null: Harbor sums only the numbers it has
        "agent_result": None if usage is None else {
            **agent_tokens(spend_of((s,))),
            "metadata": {"ray_bench_attempt": row.attempt_id, "account": row.account,
                         "earlier_attempts": [a.attempt_id for a in cell.retries],
                         # what every attempt of the cell spent (the job's stats count it all)
                         "cell_spend": agent_tokens(spend_of(cell.spent))}},
        "verifier_result": None if rewards is None else {"rewards": rewards},
        "exception_info": exception,
        "started_at": _when(row.started_at),
        "finished_at": _when(ended),
    }


def agent_tokens(spend: Spend) -> dict[str, Any]:
    """Harbor's token and cost fields (``AgentContext``, ``JobStats``): ``n_input_tokens`` is every
    input token, cached ones included (read or written), ``n_cache_tokens`` the cache reads."""
    return {"n_input_tokens": spend.prompt_tokens, "n_cache_tokens": spend.cache_read_tokens,
            "n_output_tokens": spend.output_tokens, "cost_usd": spend.cost_usd}


def job_stats(results: list[dict[str, Any]], cells: list[CellExport], suite: str,
              agent: dict[str, Any]) -> dict[str, Any]:
    """``JobStats`` as Harbor's ``increment`` builds it, with the mean of the counted trials
    (Harbor's ``Mean`` metric; here the report's mean reward, which it equals). Its tokens and
    cost are those of every attempt of the arm, retries included, as the ledger's: Harbor's own
    job keeps no retried trial, ray-bench's run spent on each."""
    key = "__".join(p for p in (agent["name"], agent.get("model_name"), suite) if p)
    reward_stats: dict[str, dict[str, list[str]]] = {}
    exception_stats: dict[str, list[str]] = {}
    counted = errors = 0
    for cell, result in zip([c for c in cells if c.shown is not None], results, strict=True):
        exc = result["exception_info"]
        if exc is not None:
            errors += 1
            exception_stats.setdefault(exc["exception_type"], []).append(result["trial_name"])
        if cell.accepted and cell.excluded is None and result["verifier_result"]:
            counted += 1
            for k, v in result["verifier_result"]["rewards"].items():
                reward_stats.setdefault(k, {}).setdefault(str(v), []).append(result["trial_name"])
    mean = mean_reward(cells)
    return {
        "n_completed_trials": len(results),
        "n_errored_trials": errors,
        "n_retries": sum(len(c.retries) for c in cells),
        "evals": {key: {"n_trials": counted, "n_errors": errors,
                        "metrics": [] if math.isnan(mean) else [{"mean": mean}],
                        "reward_stats": reward_stats, "exception_stats": exception_stats}},
        **agent_tokens(spend_of(s for c in cells for s in c.spent)),
    }


def _write_trial(cell: CellExport, trial_dir: Path, result: dict[str, Any], agent_config: dict[str, Any]) -> None:
    trial_dir.mkdir()
    _dump(trial_dir / "config.json", result["config"])
    _dump(trial_dir / "result.json", result)
    verifier = trial_dir / "verifier"
    verifier.mkdir()
    rewards = (result["verifier_result"] or {}).get("rewards")
    if rewards is not None:  # the file the verifier would have written for this map
        if list(rewards) == ["reward"]:
            (verifier / "reward.txt").write_text(f"{rewards['reward']}\n")
        else:
            _dump(verifier / "reward.json", rewards)
    if result["exception_info"] is not None:
        (trial_dir / "exception.txt").write_text(result["exception_info"]["exception_message"] + "\n")
    src = cell.attempt_dir
    if src is None or not src.is_dir():
        return
    graded = cell.verifier_dir or src  # a regraded row's verifier output is its regrade's
    for name, target in (("stdout.txt", "test-stdout.txt"), ("stderr.txt", "test-stderr.txt")):
        if (graded / "verifier" / name).is_file():
            shutil.copyfile(graded / "verifier" / name, verifier / target)
    if not (verifier / "test-stdout.txt").exists() and cell.summary.verifier and cell.summary.verifier.output_tail:
        (verifier / "test-stdout.txt").write_text(cell.summary.verifier.output_tail)
    agent = trial_dir / "agent"
    agent.mkdir()
    for name in ("stdout.txt", "stderr.txt"):  # the agent's log
        if (src / "agent" / name).is_file():
            shutil.copyfile(src / "agent" / name, agent / name)
    if (src / "logs" / "agent").is_dir():  # usage.json and, for a CLI adapter, its session files
        shutil.copytree(src / "logs" / "agent", agent, dirs_exist_ok=True, symlinks=True)
    if (src / "agent" / "stdout.txt").is_file():
        shutil.copyfile(src / "agent" / "stdout.txt", trial_dir / "trial.log")
        # the adapter's transcript as Harbor's steps
        turns = turns_of(agent_config["name"], (src / "agent" / "stdout.txt").read_text(errors="replace"))
        if turns:
            _dump(agent / "trajectory.json", atif_trajectory(
                turns, agent=agent_config["name"], model=agent_config.get("model_name"),
                session=result["trial_name"]))


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
