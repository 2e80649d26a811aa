"""``ray-bench gaps``: what is missing for N valid repetitions per task and arm.

The suite's *current* cells for repetitions 1..N are computed exactly as ``plan`` computes
them (task content, arm config, repetition); a repetition is covered when its cell has an
accepted row in the suite's cohort across the run roots given. Rows of an older task or arm
content are other cells: they are counted as incompatible and never fill a gap. A cell an
operator excluded (``ray-bench exclude``) is a decision, not a gap: it is never proposed, and
neither are the other arms' cells of its repetition (they could not be paired with it).

Gaps go into CodeScaleBench selection files with ``reps`` (and ``arms``) per task:

- ``NAME.json``: repetitions missing in every arm (plan them paired);
- ``NAME-<arm>-only.json``: repetitions missing only in ``<arm>``, whose other arms have
  valid rows, so that ``plan --baseline-only``/``--full-only --runs ...`` passes the pairing
  guard with them.

``--selection-file F`` (any shape ``plan`` reads: CSB JSON, YAML, a text list, a Harbor
``dataset.toml`` or job config) narrows the tasks considered to the file's; its ``reps`` and
``arms`` are not read, the gaps are what is missing of the target.

``--target-mde D`` sets N to the repetitions whose mean paired delta detects D
(:func:`target_for_mde`, the receipt's power from the spread of the rows already there).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_bench.config.loader import load_suite
from ray_bench.config.selection import select_in_suite
from ray_bench.config.tasks import index_tasks, load_tasks, task_checksum
from ray_bench.errors import ConfigError, SelectionError
from ray_bench.evidence.rows import build_evidence, default_cohort, load_epochs
from ray_bench.models.plan import RewardSpread
from ray_bench.models.suite import Arm
from ray_bench.plan.arm_identity import arm_config
from ray_bench.plan.compile import MAX_REPS, suite_roots
from ray_bench.plan.identity import canonical_bytes, cell_id
from ray_bench.plan.power import ASSUMED, lineage_spread, reps_needed, reward_bounds
from ray_bench.runroot import RunPaths, refuse_output_in_run_root


@dataclass
class Gaps:
    suite: str
    target: int
    arms: list[str]
    baseline: str
    run_roots: list[Path]
    #: (task, arm) -> covered repetitions among 1..target
    valid: dict[tuple[str, str], list[int]]
    #: (task, arm) -> accepted rows of other content (other cell ids), never counted
    incompatible: dict[tuple[str, str], int]
    both: dict[str, list[int]] = field(default_factory=dict)  # task -> reps missing in every arm
    one_arm: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # arm -> task -> reps
    task_dirs: dict[str, str] = field(default_factory=dict)
    #: (task, arm) -> repetitions whose current cell an operator excluded: never proposed
    excluded: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.both and not any(self.one_arm.values())


def _current_cells(
    suite_path: Path, target: int, selection: Path | None = None
) -> tuple[str, list[Arm], str, dict[str, str], dict[tuple[str, str, int], str]]:
    suite = load_suite(suite_path)
    roots = suite_roots(suite, suite_path)
    index = index_tasks(roots)
    only = suite.tasks
    if selection is not None:  # any shape `plan` reads: only its tasks are considered
        only = select_in_suite(selection, suite.name, suite.tasks, roots, index).task_ids
    tasks = load_tasks(roots, only, index)
    cells: dict[tuple[str, str, int], str] = {}
    for arm in suite.arms:
        checksum = None
        if arm.agent_dir is not None:  # as plan does: the agent directory by its content
            path = (suite_path.parent / arm.agent_dir).resolve()
            if not path.is_dir():
                raise ConfigError(
                    f"arms.{arm.name}.agent_dir: {path} is not a directory",
                    where=str(suite_path),
                    fix="point agent_dir at the agent's files",
                )
            checksum = task_checksum(path)
        config = canonical_bytes(arm_config(arm, checksum))
        for task in tasks:
            for rep in range(1, target + 1):
                cells[(task.id, arm.name, rep)] = cell_id(task.id, task.checksum, config, rep)
    return suite.name, suite.arms, suite.baseline.name, {t.id: _under_root(Path(t.path), roots) for t in tasks}, cells


def _under_root(path: Path, roots: list[Path]) -> str:
    """A task's ``task_dir`` as CodeScaleBench writes it: relative to the task root holding it
    (``plan`` refuses absolute paths in a selection, so an absolute one would not plan again)."""
    resolved = path.resolve()
    for root in roots:
        if resolved.is_relative_to(root):
            # with the root's own name first, as CSB writes benchmarks/<bench>/<task>; the
            # selection resolver accepts that form under a root of that name
            return f"{root.name}/{resolved.relative_to(root).as_posix()}"
    return f"{resolved.parent.name}/{resolved.name}"


def find_gaps(suite_path: Path, runs: list[Path], target: int, selection: Path | None = None) -> Gaps:
    if target < 1:
        raise SelectionError("target must be at least 1", where="--target", fix="e.g. --target 5")
    if target > MAX_REPS:  # every repetition up to it is listed: a typed 10**9 is refused, not allocated
        raise SelectionError(f"--target {target} is over {MAX_REPS:,}", where="--target",
                             fix=f"a plan runs at most {MAX_REPS:,} repetitions")
    name, arms, baseline, task_dirs, cells = _current_cells(suite_path, target, selection)
    epochs = load_epochs(runs)
    evidence = build_evidence(epochs, default_cohort(epochs, name))
    current = set(cells.values())
    arm_names = [a.name for a in sorted(arms, key=lambda a: a.role != "baseline")]
    gaps = Gaps(
        name,
        target,
        arm_names,
        baseline,
        [e.run_root for e in epochs if e.identity in evidence.cohort.epochs],
        valid={(t, a): [] for t in task_dirs for a in arm_names},
        incompatible={},
        task_dirs=task_dirs,
    )
    for row in evidence.rows.values():
        if row.cell_id not in current and (row.task, row.arm) in gaps.valid:
            key = (row.task, row.arm)
            gaps.incompatible[key] = gaps.incompatible.get(key, 0) + 1
    for (task, arm, rep), cid in sorted(cells.items()):
        if cid in evidence.rows:
            gaps.valid[(task, arm)].append(rep)
        elif cid in evidence.excluded:
            gaps.excluded.setdefault((task, arm), []).append(rep)
    for task in task_dirs:
        for rep in range(1, target + 1):
            if any(rep in gaps.excluded.get((task, a), []) for a in arm_names):
                continue  # an operator's decision: the repetition is not refilled in any arm
            missing = [a for a in arm_names if rep not in gaps.valid[(task, a)]]
            if len(missing) == len(arm_names):
                gaps.both.setdefault(task, []).append(rep)
            else:
                for arm in missing:
                    gaps.one_arm.setdefault(arm, {}).setdefault(task, []).append(rep)
    return gaps


@dataclass(frozen=True)
class MdeTarget:
    """``gaps --target-mde D``: the repetitions per task and arm whose mean paired delta detects D."""

    delta: float
    reps: int
    tasks: int
    spread: RewardSpread | None  # None: no paired rows yet, the receipt's assumption was used


def target_for_mde(suite_path: Path, runs: list[Path], delta: float, selection: Path | None = None) -> MdeTarget:
    """The repetitions a paired delta ``delta`` needs (alpha 0.05, power 0.8), from the spread of
    the paired rewards the runs already hold for the suite's current cells (else the assumed
    one, :data:`ray_bench.plan.power.ASSUMED`), over every run of the lineage (a pair's rows may
    be in two runs). A delta beyond the rewards' range is refused: no mean paired delta reaches it."""
    if not delta > 0.0:  # NaN too
        raise SelectionError(f"--target-mde {delta:g} is not a delta in reward", where="--target-mde",
                             fix="give a positive mean paired delta, e.g. --target-mde 0.1")
    epochs = load_epochs(runs)
    seen = max((a.rep for e in epochs for a in e.attempts), default=1)
    name, arms, baseline, task_dirs, cells = _current_cells(suite_path, min(max(seen, 1), MAX_REPS), selection)
    evidence = build_evidence(epochs, default_cohort(epochs, name))
    by_id = {cid: key for key, cid in cells.items()}
    reward = {by_id[r.cell_id]: r.reward for r in evidence.rows.values()
              if r.cell_id in by_id and r.reward is not None}
    deltas = [(task, rep, v - b) for (task, arm, rep), b in reward.items() if arm == baseline
              for other in arms if other.name != baseline
              if (v := reward.get((task, other.name, rep))) is not None]
    spread = lineage_spread(deltas, reward.values())
    low, high = reward_bounds(reward.values())
    if delta > high - low:
        raise SelectionError(f"--target-mde {delta:g} is not a delta in reward: a mean paired delta lies within "
                             f"+-{high - low:g} (the rewards range {low:g} to {high:g})", where="--target-mde",
                             fix=f"give a mean paired delta up to {high - low:g}, e.g. --target-mde 0.1")
    reps = reps_needed(spread or ASSUMED, len(task_dirs), delta, max_reps=MAX_REPS)
    if reps is None:
        raise SelectionError(f"--target-mde {delta:g} is out of reach with {len(task_dirs)} tasks at any number "
                             f"of repetitions up to {MAX_REPS:,}", where="--target-mde",
                             fix="aim at a larger delta or add tasks (the spread between tasks does not "
                                 "average away)")
    return MdeTarget(delta, reps, len(task_dirs), spread)


def selection_paths(out: Path, gaps: Gaps) -> dict[str | None, Path]:
    """None -> the both-arm file, arm -> its one-arm file."""
    stem = out.name[: -len(".json")] if out.name.endswith(".json") else out.name
    paths: dict[str | None, Path] = {None: out.with_name(f"{stem}.json")}
    for arm in gaps.arms:
        paths[arm] = out.with_name(f"{stem}-{arm}-only.json")
    return paths


def _accounts_of(run_roots: list[Path]) -> str:
    """The accounts file the newest of ``run_roots`` was planned with (its plan's inputs)."""
    for root in sorted(run_roots, key=lambda r: RunPaths(r).plan.stat().st_mtime if RunPaths(r).plan.exists() else 0,
                       reverse=True):
        try:
            inputs = json.loads(RunPaths(root).plan.read_text()).get("inputs", [])
        except (OSError, ValueError, AttributeError):
            continue
        found = [i.get("path") for i in inputs if isinstance(i, dict) and i.get("kind") == "accounts"]
        if found and isinstance(found[0], str):
            return found[0]
    return "ACCOUNTS.yaml"


def next_commands(gaps: Gaps, written: list[Path], suite: Path, runs: list[Path]) -> list[str]:
    """The ``ray-bench plan`` command that fills each written selection: the lineage's runs as
    ``--history`` (its cost and spread), and for a one-arm file the pairing guard's ``--runs``
    (the runs holding the other arm's rows)."""
    accounts = _accounts_of(gaps.run_roots)
    lineage = [w for r in runs for w in ("--history", str(r))]
    arm_of = {path: arm for arm, path in selection_paths(written[0], gaps).items()} if written else {}
    commands = []
    for path in written:
        arm = arm_of.get(path)
        words = ["ray-bench", "plan", "--suite", str(suite), "--accounts", accounts, "--selection-file", str(path),
                 *lineage]
        if arm is not None:
            words += ["--baseline-only" if arm == gaps.baseline else "--full-only",
                      *[w for r in runs for w in ("--runs", str(r))]]
        commands.append(shlex.join(words))
    return commands


def write_selections(gaps: Gaps, out: Path) -> list[Path]:
    """Write the non-empty selection files; return them. Files of a previous run of gaps that
    would now be empty are removed, so that a stale gap is never filled twice."""
    refuse_output_in_run_root(out, "gaps --out")
    written: list[Path] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    for arm, path in selection_paths(out, gaps).items():
        per_task = gaps.both if arm is None else gaps.one_arm.get(arm, {})
        if not per_task:
            path.unlink(missing_ok=True)
            continue
        doc: dict[str, Any] = {
            "generated_by": "ray-bench gaps",
            "suite": gaps.suite,
            "target_reps": gaps.target,
            # the runs this fills: `plan` of it names them and takes its history from them
            "tops_up": [str(r.resolve()) for r in gaps.run_roots],
            "arms": list(gaps.arms) if arm is None else [arm],
            "plan_with": (
                "ray-bench plan --selection-file FILE"
                if arm is None
                else f"ray-bench plan --selection-file FILE "
                f"{'--baseline-only' if arm == gaps.baseline else '--full-only'} --runs ..."
            ),
            "tasks": [
                {
                    "task_id": task,
                    # CodeScaleBench's benchmark: the directory holding the task
                    "benchmark": gaps.task_dirs[task].rsplit("/", 2)[-2],
                    "task_dir": gaps.task_dirs[task],
                    "reps": reps,
                    **({} if arm is None else {"arms": [arm]}),
                }
                for task, reps in sorted(per_task.items())
            ],
        }
        path.write_text(json.dumps(doc, indent=2) + "\n")
        written.append(path)
    return written
