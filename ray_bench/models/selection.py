"""The selection model: what every selection reader yields (:mod:`ray_bench.config.selection`)
and what ``validate``, ``plan`` and ``execute`` see."""

from __future__ import annotations

from pydantic import Field

from ray_bench.models._base import FrozenModel

#: Every shape a selection file may have, named wherever a file fits none of them and in the CLI's help.
SHAPES = ('one task id per line, a YAML list, CodeScaleBench JSON {"tasks": [{"task_id": ..., "task_dir": ...}]}, '
          "a Harbor dataset.toml or a Harbor job config (YAML or JSON)")


class SelectionEntry(FrozenModel):
    task_id: str
    task_dir: str | None = Field(default=None, description="CodeScaleBench: the task's directory under "
                                 "a task root, e.g. benchmarks/csb_org_onboarding/<task>.")
    benchmark: str | None = Field(default=None, description="CodeScaleBench: the benchmark directory "
                                  "(`benchmark`, or `mcp_suite` in its MCP-unique selections).")
    package: str | None = Field(default=None, description="Harbor (dataset.toml, a job config's package "
                                "task): the task's package name, org/name, as its task.toml `[task] name` gives it.")
    ref: str | None = Field(default=None, description="Harbor: the package's digest or tag (for the "
                            "`harbor download` line of a task not on disk).")
    path: str | None = Field(default=None, description="Harbor job config: the task's directory, absolute "
                             "(read against the config's directory); it must be under a task root.")
    reps: tuple[int, ...] | None = Field(default=None, description="Only these repetitions.")
    arms: tuple[str, ...] | None = Field(default=None, description="Only these arms.")


class Selection(FrozenModel):
    path: str
    entries: tuple[SelectionEntry, ...]
    warnings: tuple[str, ...] = Field(default=(), description="What resolving it against the roots "
                                      "noticed (an entry's task_id that is not its task_dir's name).")
    tops_up: tuple[str, ...] = Field(default=(), description="A gap-fill selection's lineage: the run "
                                     "roots `ray-bench gaps` read (its `tops_up`), which a plan of it tops up "
                                     "and, unless `--history` names others, takes its history from.")

    @property
    def task_ids(self) -> list[str]:
        return [e.task_id for e in self.entries]
