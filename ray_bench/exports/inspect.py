"""``ray-bench export inspect``: runs as Inspect eval logs, for ``inspect view``.

One log per (suite, arm), all of one export sharing an ``eval_set_id``, written with inspect_ai's
own writer (the optional ``inspect`` extra, imported only here). A sample per cell: ``id`` the
task, ``epoch`` the repetition, the ``reward`` score of its accepted row, the agent's usage as
``model_usage``; a cell without an accepted row has no score and an ``error``; its earlier
attempts are ``error_retries``; an excluded cell is an ``invalidation`` with who and why. The
results' mean is the report's mean reward (:func:`ray_bench.exports.source.mean_reward`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ray_bench.errors import UserInputError
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
from ray_bench.exports.transcripts import inspect_messages, turns_of

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage

NAMESPACE = uuid.UUID("0f3c1e9a-2b7d-4c55-8e61-4a9d2f7b6c01")
SCORER = "ray-bench"
#: The agent log kept in a sample's transcript, at most (a CLI's event stream can be MBs).
LOG_CHARS = 200_000


def _require_inspect() -> None:
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise UserInputError("inspect_ai is not installed", where="export inspect",
                             fix="pip install 'ray-bench[inspect]'") from None


def export_inspect(runs: list[Path], out: Path) -> list[Path]:
    """Write one ``.eval`` log per (suite, arm) under ``out``; return them."""
    _require_inspect()
    from inspect_ai.log import write_eval_log

    refuse_out(out)
    suites = load_suites(export_roots(runs))
    set_id = str(uuid.uuid5(NAMESPACE, "/".join(sorted(e for s in suites for e in s.evidence.cohort.epochs))))
    logs: list[Path] = []
    with staged(out) as tmp:
        for suite in suites:
            for arm in suite.evidence.arms:
                name = f"{suite.suite}__{arm}.eval"
                write_eval_log(eval_log(suite, arm, set_id), str(tmp / name), format="eval")
                logs.append(out / name)
    return logs


def eval_log(suite: SuiteExport, arm: str, eval_set_id: str) -> EvalLog:
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    plan_arm = next(a for a in suite.plan.arms if a.name == arm)
    model = plan_arm.model or f"ray-bench/{plan_arm.agent}"
    cells = [c for c in suite.arm_cells(arm) if c.shown is not None]
    instructions = {t.id: _instruction(Path(t.path)) for t in suite.plan.tasks}
    samples = [_sample(c, model, instructions.get(c.task, c.task), plan_arm.agent) for c in cells]
    mean = mean_reward(cells)
    counted = sum(1 for c in cells if c.accepted and c.excluded is None)
    started = [c.shown.started_at for c in cells if c.shown]
    ended = [c.shown.finished_at for c in cells if c.shown and c.shown.finished_at]
    # every attempt of the arm, retries included (their samples' error_retries), as the ledger
    # counts them: Inspect's own stats count the calls of a retried sample too
    total = model_usage(suite.arm_spend(arm))
    tasks = sorted({c.task for c in cells})
    epochs = ",".join(sorted(suite.evidence.cohort.epochs))
    return EvalLog(
        status="success",
        eval=EvalSpec(
            eval_set_id=eval_set_id,
            eval_id=str(uuid.uuid5(NAMESPACE, f"{epochs}/{arm}")),
            run_id=str(uuid.uuid5(NAMESPACE, epochs)),
            created=_when(min(started)) if started else _when(0.0),
            task=f"{suite.suite}/{arm}",
            solver=plan_arm.agent,
            dataset=EvalDataset(name=suite.suite, samples=len(tasks), sample_ids=list(tasks)),
            model=model,
            config=EvalConfig(epochs=max((c.rep for c in cells), default=1)),
            metadata={"ray_bench": {"runs": [e.run_id for e in suite.evidence.epochs
                                             if e.identity in suite.evidence.cohort.epochs],
                                    "arm": arm, "role": plan_arm.role, "cells": len(cells)}},
        ),
        results=EvalResults(
            total_samples=len(samples), completed_samples=counted,
            scores=[] if counted == 0 else [EvalScore(
                name="reward", scorer=SCORER, scored_samples=counted, unscored_samples=len(samples) - counted,
                metrics={"mean": EvalMetric(name="mean", value=mean)})],
        ),
        stats=EvalStats(started_at=_when(min(started)) if started else "",
                        completed_at=_when(max(ended)) if ended else "",
                        model_usage={model: total} if total is not None else {}),
        samples=samples,
    )


def _sample(cell: CellExport, model: str, instruction: str, adapter: str) -> EvalSample:
    from inspect_ai._util.error import EvalError
    from inspect_ai.log import EvalRetryError, EvalSample, ProvenanceData
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    row = cell.shown
    assert row is not None
    s = cell.summary
    log = _agent_log(cell)
    usage: dict[str, ModelUsage] = {}
    mine = model_usage(spend_of((s,)))
    if mine is not None:  # unknown usage is left out, never written as zero tokens
        usage[model] = mine
    transcript: list[ChatMessage] = []
    if log:
        transcript = inspect_messages(turns_of(adapter, log), model)
    if not transcript and log:  # no transcript: the agent's log is what it said
        transcript = [ChatMessageAssistant(content=log, model=model)]
    verdict = s.verdict.message if s.verdict else ""
    error = None if cell.accepted else EvalError(
        message=f"ray-bench {row.failure_class or row.status}: {verdict or 'no valid row'}",
        traceback=(s.error.traceback if s.error and s.error.traceback else ""), traceback_ansi="")
    retries = [EvalRetryError(message=f"attempt {a.attempt_id}: {a.failure_class or a.status}"
                              f"{' (' + a.fingerprint + ')' if a.fingerprint else ''}",
                              traceback="", traceback_ansi="") for a in cell.retries]
    invalidation = None if cell.excluded is None else ProvenanceData(
        timestamp=datetime.fromtimestamp(cell.excluded.at, UTC), author=cell.excluded.by,
        reason=cell.excluded.reason)
    scores = None
    if cell.accepted and row.reward is not None:
        # the headline reward is the score; a multi-key map keeps every key beside it
        keys = s.rewards if s.rewards and list(s.rewards) != ["reward"] else None
        scores = {"reward": Score(value=row.reward, explanation=s.reward_source,
                                  metadata={"rewards": keys} if keys else None)}
    ended = row.finished_at or row.started_at
    return EvalSample(
        id=cell.task, epoch=cell.rep, input=instruction, target="",
        messages=[ChatMessageUser(content=instruction), *transcript],
        output=ModelOutput.from_content(model, log) if log else ModelOutput(model=model),
        scores=scores, model_usage=usage,
        metadata={"cell_id": cell.cell_id, "attempt_id": row.attempt_id, "account": row.account,
                  "backend": row.backend, "flags": s.verdict.flags if s.verdict else []},
        started_at=_when(row.started_at), completed_at=_when(ended), total_time=round(ended - row.started_at, 3),
        uuid=str(uuid.uuid5(NAMESPACE, row.attempt_id)),
        error=error, error_retries=retries or None, invalidation=invalidation,
    )


def model_usage(spend: Spend) -> ModelUsage | None:
    """Inspect's ``ModelUsage`` of what was spent (None: no count known): ``input_tokens`` fresh,
    the cache reads and writes apart, ``total_tokens`` all of them with the output (as Inspect's
    Anthropic provider counts them); ``total_cost`` the known costs (None when none is known)."""
    from inspect_ai.model import ModelUsage

    if spend.input_tokens is None or spend.output_tokens is None:
        return None
    return ModelUsage(input_tokens=spend.input_tokens, output_tokens=spend.output_tokens,
                      total_tokens=(spend.prompt_tokens or 0) + spend.output_tokens,
                      input_tokens_cache_read=spend.cache_read_tokens,
                      input_tokens_cache_write=spend.cache_write_tokens, total_cost=spend.cost_usd)


def _agent_log(cell: CellExport) -> str:
    """The agent's own log (its stdout), as the transcript ray-bench has for every adapter."""
    if cell.attempt_dir is not None and (cell.attempt_dir / "agent" / "stdout.txt").is_file():
        text = (cell.attempt_dir / "agent" / "stdout.txt").read_text(errors="replace")
    else:
        text = cell.summary.agent.output_tail if cell.summary.agent else ""
    return text[-LOG_CHARS:]


def _instruction(task_dir: Path) -> str:
    path = task_dir / "instruction.md"
    return path.read_text(errors="replace") if path.is_file() else task_dir.name


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()
