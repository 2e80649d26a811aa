"""Drift: the confirmed inputs are re-checked before every new attempt. Stat signatures keep
it cheap: a file is re-hashed only when its size or mtime changed. Before a session starts,
:func:`refuse_drift` hashes every input and refuses any change."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ray_bench.config.bounded import MAX_SELECTION_BYTES, read_bounded
from ray_bench.config.tasks import AGENT_LIMITS, TASK_LIMITS, TaskFile, TaskTree, task_checksum, task_files
from ray_bench.errors import MultipleInputErrors, PlanError, UserInputError
from ray_bench.models.plan import InputFile


@dataclass(frozen=True)
class Drift:
    kind: str
    name: str
    path: str
    detail: str

    @property
    def what(self) -> str:
        """``task hello-world``, or ``accounts`` for the one file of its kind (not "accounts accounts")."""
        return self.kind if self.name == self.kind else f"{self.kind} {self.name}"


def _stat_sig(paths: list[Path]) -> tuple[tuple[str, int, int], ...]:
    sig = []
    for p in paths:
        try:
            st = p.stat()
            sig.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            sig.append((str(p), -1, -1))
    return tuple(sig)


class DriftGuard:
    def __init__(self, inputs: list[InputFile], trees: dict[str, TaskTree] | None = None) -> None:
        """``trees``: filled with each task tree this guard walked and found unchanged, by path."""
        self._inputs = {(i.kind, i.name): i for i in inputs}
        self._verified: dict[tuple[str, str], tuple[tuple[str, int, int], ...]] = {}
        self._trees = trees

    def check_global(self) -> Drift | None:
        for key, item in self._inputs.items():
            if item.kind not in ("task",):
                found = self._check(key, item)
                if found:
                    return found
        return None

    def check_task(self, task_id: str) -> Drift | None:
        item = self._inputs.get(("task", task_id))
        return self._check(("task", task_id), item) if item else None

    def check_launch(self, tasks: Sequence[str]) -> tuple[int, Drift] | None:
        """Before a launch round: the run's global inputs, then each task, each once (a round's
        cells share few tasks: a no-op run's 4-cell rounds walked one task 4 times), and the
        index in ``tasks`` of the first whose check found drift (0 for a global one)."""
        if not tasks:
            return None
        found = self.check_global()
        if found is not None:
            return 0, found
        seen: set[str] = set()
        for i, task in enumerate(tasks):
            if task not in seen:
                seen.add(task)
                if (found := self.check_task(task)) is not None:
                    return i, found
        return None

    def _check(self, key: tuple[str, str], item: InputFile) -> Drift | None:
        path = Path(item.path)
        is_dir = item.kind in ("task", "agent")
        try:
            # the same bounded walk as plan's: a FIFO or a link to /dev/zero placed in a task
            # after planning is drift, not a hang
            limits = AGENT_LIMITS if item.kind == "agent" else TASK_LIMITS
            walked: list[TaskFile] | None = task_files(path, limits) if is_dir and path.is_dir() else None
            sig = _stat_sig([path]) if walked is None else tuple((str(f.path), f.size, f.mtime_ns) for f in walked)
            if self._verified.get(key) == sig:
                return None
            if walked is not None:  # hashed as walked: one walk a check
                actual = task_checksum(path, walked, limits)
        except UserInputError as exc:
            return Drift(item.kind, item.name, item.path, exc.what)
        if is_dir:
            if not path.is_dir():
                return Drift(item.kind, item.name, item.path, "task directory is gone")
        else:
            try:  # no input plan accepted is larger than a selection may be
                actual = hashlib.sha256(read_bounded(path, PlanError, MAX_SELECTION_BYTES)).hexdigest()
            except PlanError as exc:
                return Drift(item.kind, item.name, item.path, f"unreadable: {exc.what}")
        if actual != item.sha256:
            return Drift(item.kind, item.name, item.path, f"sha256 {actual[:12]} != confirmed {item.sha256[:12]}")
        self._verified[key] = sig
        if self._trees is not None and item.kind == "task" and walked is not None:
            self._trees[item.path] = TaskTree(walked, actual)
        return None


def refuse_drift(inputs: list[InputFile]) -> dict[str, TaskTree]:
    """Inputs that changed after planning are bad input: refused (PlanError) with one line each,
    before Ray starts or anything is written (drift found mid-run is the driver's to record).
    Returns each task tree as walked and hashed here, by path, for ``execute``'s re-derivation
    (:func:`ray_bench.config.tasks.load_task`)."""
    trees: dict[str, TaskTree] = {}
    errors: list[UserInputError] = []
    for item in inputs:  # each input on its own: two of one kind and name are both checked
        drift = DriftGuard([item], trees)._check((item.kind, item.name), item)
        if drift is not None:
            errors.append(PlanError(f"{drift.what} changed after planning ({drift.detail})", where=drift.path,
                                    fix="plan again and confirm the new identity"))
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    return trees
