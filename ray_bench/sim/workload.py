"""The simulator's input: a synthetic suite, a duration model, accounts and events.

A spec is YAML or JSON (see ``configs/sim/reference.yaml``)::

    seed: 7
    suite: {tasks: 500, arms: [baseline, mcp], reps: 2}
    durations:
      lognormal: {median_s: 360, sigma: 1.2, min_s: 20, max_s: 14400}
      # or: csv: path/to/durations.csv   (a ``seconds`` column, optional ``task`` column)
      cell_noise_sigma: 0.15            # arms and repetitions of one task vary this much
    history: {noise_sigma: 0.3}         # omit for "no history"
    accounts:
      - {name: a1, max_concurrent: 8, window: {hours: 5, max_cells: 60}}
      # or: {name: a1, limits: {max_concurrent: 8, ...}, usd_per_hour: 2.0}
    events:
      - {kind: storm, account: a1, start_h: 2, length_min: 10, retry_after_s: 60}
      - {kind: storm, account: a2, start_h: 0, length_min: 600, answer: server_error}
      - {kind: auth_loss, account: a2, at_h: 5}
      - {kind: hold, account: a3, start_h: 1, length_min: 45}   # the operator's
    judges:                             # mcp's verifiers hold a lease on a3 too (adaptive only)
      - {arm: mcp, account: a3}         # optional tasks: [...]
    backend_slots: null                 # the sandbox pools, if they are smaller
    deadline_h: 24                      # optional: does each policy finish in time?

:func:`build_workload` turns a spec into concrete cells and durations with one seeded RNG,
so that every policy runs on exactly the same workload.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ray_bench.config.bounded import MAX_SELECTION_BYTES, parse_yaml, read_text_bounded
from ray_bench.errors import ConfigError
from ray_bench.models.accounts import AccountLimits
from ray_bench.scheduler.order import CellRef


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteSpec(_Model):
    tasks: int = Field(gt=0, description="Number of tasks.")
    arms: list[str] = Field(default=["baseline", "mcp"], min_length=1,
                            description="Arm names; a pair is (task, repetition) across them.")
    reps: int = Field(default=1, gt=0, description="Repetitions per task and arm.")
    cells: list[tuple[str, str, int]] | None = Field(
        default=None, min_length=1, description="The exact cells as (task, arm, rep), e.g. a compiled "
        "plan's (a gap-fill plan holds only some reps and arms of its tasks); without it every task "
        "runs every arm for every rep.")


class LognormalSpec(_Model):
    median_s: float = Field(gt=0, description="Median task duration in seconds.")
    sigma: float = Field(ge=0, description="Sigma of log(duration).")
    min_s: float = Field(default=10.0, ge=0, description="Durations are clipped below.")
    max_s: float = Field(default=4 * 3600.0, gt=0, description="Durations are clipped above.")


class DurationSpec(_Model):
    lognormal: LognormalSpec | None = None
    csv: str | None = Field(default=None, description="CSV of observed durations "
                            "(column `seconds`, optional `task`); relative to the spec file.")
    cell_noise_sigma: float = Field(default=0.15, ge=0, description="Per-cell variation "
                                    "around the task's duration (lognormal sigma).")


class HistorySpec(_Model):
    noise_sigma: float = Field(default=0.3, ge=0, description="How far the duration an "
                               "earlier run recorded is from the task's (lognormal sigma).")


class AccountSpec(_Model):
    """A simulated account: its limits exactly as accounts.yaml gives them (the one
    :class:`~ray_bench.models.accounts.AccountLimits`), and what one running cell costs."""

    name: str
    limits: AccountLimits
    usd_per_hour: float = Field(default=0.0, ge=0, description="Cost of one running cell.")
    cost_unknown: bool = Field(default=False, description="Its attempts report tokens and no cost (a model "
                               "with no list price): the driven simulator's usage says cost unknown.")

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, raw: Any) -> Any:
        """Specs may write the limits beside the name (``{name: a1, max_concurrent: 8}``), as
        configs/sim/*.yaml do."""
        if not isinstance(raw, Mapping) or "limits" in raw:
            return raw
        limits = {k: v for k, v in raw.items() if k in AccountLimits.model_fields}
        return {**{k: v for k, v in raw.items() if k not in limits}, "limits": limits}


class StormEvent(_Model):
    kind: Literal["storm"]
    account: str
    start_h: float = Field(ge=0)
    length_min: float = Field(gt=0)
    retry_after_s: float | None = Field(default=60.0, ge=0)
    signal_delay_s: tuple[float, float] = Field(default=(5.0, 30.0), description="A start "
                                                "during the storm fails after this long.")
    answer: Literal["rate_limit", "server_error"] = Field(
        default="rate_limit", description="What a start during the storm gets: a 429 with "
        "Retry-After, or a 500 (a broken account: retry_after_s is ignored).")


class AuthLossEvent(_Model):
    kind: Literal["auth_loss"]
    account: str
    at_h: float = Field(ge=0)
    signal_delay_s: tuple[float, float] = (5.0, 30.0)


class HoldEvent(_Model):
    """An operator holds an account (``ray-bench accounts hold``) and releases it ``length_min``
    later: no new start on it meanwhile, its running cells go on. Only the driven (adaptive)
    policy honours holds; the reference policies know no operator."""

    kind: Literal["hold"]
    account: str
    start_h: float = Field(ge=0)
    length_min: float = Field(gt=0)


Event = Annotated[StormEvent | AuthLossEvent | HoldEvent, Field(discriminator="kind")]


class JudgeSpec(_Model):
    """An arm whose verifiers take their key from ``account`` (its judge role routed there,
    ray_bench/plan/roles.py ``judge_lease_account``): each of its cells on ``tasks`` (None: every
    task) holds a lease on that account too, for the cell's life, as a run's do (a task one judge
    covers names the key for every arm with a judge role). Only the driven (adaptive) policy
    models it; the reference policies and the lower bound know no judge."""

    arm: str
    account: str
    tasks: list[str] | None = None


class SimSpec(_Model):
    seed: int = 0
    suite: SuiteSpec
    durations: DurationSpec
    history: HistorySpec | None = None
    accounts: list[AccountSpec] = Field(min_length=1)
    events: list[Event] = []
    backend_slots: int | None = Field(default=None, gt=0)
    spend_limit_usd: float | None = Field(default=None, gt=0, description="The run's spend limit, USD.")
    executor_max_usd: float | None = Field(default=None, gt=0, description="The arms' executor role's "
                                           "max_spend_usd (the spend admission's bound per cell).")
    deadline_h: float | None = Field(default=None, gt=0)
    judges: list[JudgeSpec] = Field(default_factory=list, description="Arms whose verifiers hold a "
                                    "judge account's lease too.")
    policies: list[Literal["adaptive", "round-robin", "global-semaphore"]] = [
        "adaptive", "round-robin", "global-semaphore"]
    health: dict[str, float] = Field(default_factory=dict, description="HealthPolicy "
                                     "overrides for the adaptive policy.")
    base_dir: str = Field(default=".", description="Where relative paths resolve.")


def load_spec(path: str | Path, **overrides: Any) -> SimSpec:
    """Read a YAML or JSON spec; ``overrides`` replace top-level keys."""
    p = Path(path)
    text = read_text_bounded(p, ConfigError)
    raw, _ = parse_yaml(text, p, ConfigError)  # JSON is YAML; aliases and size bounded
    if not isinstance(raw, Mapping):
        raise ConfigError("a simulation spec is a mapping", where=str(p))
    return parse_spec({"base_dir": str(p.parent), **raw, **overrides}, where=str(p))


def parse_spec(raw: Mapping[str, Any], *, where: str = "spec") -> SimSpec:
    try:
        spec = SimSpec.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"{loc}: {first['msg']}", where=where,
                          fix="see configs/sim/reference.yaml") from exc
    names = {a.name for a in spec.accounts}
    for ev in spec.events:
        if ev.account not in names:
            raise ConfigError(f"event names unknown account {ev.account!r}", where=where)
    for judge in spec.judges:
        if judge.account not in names or judge.arm not in spec.suite.arms:
            raise ConfigError(f"judge names unknown {'account' if judge.account not in names else 'arm'} "
                              f"{judge.account if judge.account not in names else judge.arm!r}", where=where)
    if spec.durations.lognormal is None and spec.durations.csv is None:
        raise ConfigError("durations need `lognormal` or `csv`", where=where)
    return spec


@dataclass(frozen=True, slots=True)
class Workload:
    """Concrete cells with their true durations (seconds), and what history says."""

    cells: list[CellRef]
    duration: dict[str, float]
    history: dict[str, float] | None

    @property
    def total_work_s(self) -> float:
        return sum(self.duration.values())


def _csv_durations(path: Path) -> tuple[list[float], dict[str, float]]:
    text = read_text_bounded(path, ConfigError, MAX_SELECTION_BYTES)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    col = next((c for c in ("seconds", "duration_s", "duration") if rows and c in rows[0]), None)
    if col is None:
        raise ConfigError("durations CSV needs a `seconds` column", where=str(path))
    values: list[float] = []
    per_task: dict[str, float] = {}
    for line, row in enumerate(rows, start=2):
        cell = row.get(col) or ""
        if not cell:
            continue
        try:
            seconds = float(cell)
        except ValueError:
            raise ConfigError(f"{col} {cell[:20]!r} is not a number", where=f"{path}:{line}",
                              fix="write durations in seconds") from None
        if not seconds >= 0 or seconds == float("inf"):
            raise ConfigError(f"{col} {cell[:20]!r} is not a finite duration", where=f"{path}:{line}",
                              fix="write durations in seconds") from None
        values.append(seconds)
        if row.get("task"):
            per_task[row["task"]] = seconds
    if not values:
        raise ConfigError("durations CSV is empty", where=str(path))
    return values, per_task


def build_workload(spec: SimSpec) -> Workload:
    """Draw the cells' true durations (and history) from the spec's seeded RNG."""
    rng = np.random.default_rng(spec.seed)
    given = spec.suite.cells
    tasks = list(dict.fromkeys(t for t, _, _ in given)) if given else [f"t{i:05d}" for i in range(spec.suite.tasks)]
    n = len(tasks)
    d = spec.durations
    lo, hi = 1.0, float("inf")
    if d.lognormal is not None:
        ln = d.lognormal
        base = ln.median_s * np.exp(ln.sigma * rng.standard_normal(n))
        lo, hi = ln.min_s, ln.max_s
        task_s = dict(zip(tasks, np.clip(base, lo, hi).tolist(), strict=True))
    else:
        assert d.csv is not None
        values, per_task = _csv_durations(Path(spec.base_dir) / d.csv)
        sample = rng.choice(np.asarray(values), size=n)
        task_s = {t: per_task.get(t, float(s)) for t, s in zip(tasks, sample.tolist(), strict=True)}
    cells: list[CellRef] = []
    duration: dict[str, float] = {}
    triples = given or [(t, arm, rep) for t in tasks for rep in range(spec.suite.reps) for arm in spec.suite.arms]
    for t, arm, rep in triples:
        cell = CellRef(f"{t}/{arm}/{rep}", t, arm, rep)
        cells.append(cell)
        noise = float(np.exp(d.cell_noise_sigma * rng.standard_normal()))
        duration[cell.cell_id] = float(np.clip(task_s[t] * noise, lo, hi))
    history = None
    if spec.history is not None:
        factor = np.exp(spec.history.noise_sigma * rng.standard_normal(n))
        history = {t: task_s[t] * float(x) for t, x in zip(tasks, factor.tolist(), strict=True)}
    return Workload(cells, duration, history)
