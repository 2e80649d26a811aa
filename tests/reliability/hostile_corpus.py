"""The hostile-input corpus: what an attacker or a careless operator feeds ray-bench.

Each case builds its input in a fresh copy of a small planned suite and names the command
line to run. :func:`main` runs a batch of cases in one process (the CLI in-process through
typer's CliRunner), each under a 30 s alarm, and writes one JSON result per case; the test
starts that process with a 1 GB address-space limit, so every case ran under it. Cases that
need no isolation share the process: that is what keeps 70 cases to seconds, not minutes.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: CPU seconds a case may take (a hang spins: the alias bomb did), wall seconds as a
#: backstop for a case blocked on I/O (generous: the 2-core CI host runs at load 20+), and
#: bytes of address space the case process may map.
CASE_SECONDS = 30
CASE_WALL_SECONDS = 120
ADDRESS_SPACE = 1 << 30



@dataclass
class Env:
    """A copy of the base: suite and accounts in ``s/``, one valid plan in ``runs/ok``."""

    root: Path
    identity: str

    @property
    def suite(self) -> Path:
        return self.root / "s" / "suite.yaml"

    @property
    def accounts(self) -> Path:
        return self.root / "s" / "accounts.yaml"

    @property
    def tasks(self) -> Path:
        return self.root / "s" / "tasks"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def plan(self) -> Path:
        return self.runs / "ok" / "launch-plan.json"

    def file(self, name: str, text: str | bytes) -> Path:
        path = self.root / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    def edit_yaml(self, path: Path, change: Callable[[Any], None]) -> None:
        doc = yaml.safe_load(path.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def plan_args(self, *extra: str, suite: Path | None = None, accounts: Path | None = None) -> list[str]:
        return ["plan", "--suite", str(suite or self.suite), "--accounts", str(accounts or self.accounts),
                "--runs-dir", str(self.runs), "--run-id", "new", *extra]

    def execute_args(self, *extra: str, plan: Path | None = None, confirm: str | None = None) -> list[str]:
        return ["execute", "--plan", str(plan or self.plan), "--confirm", confirm or self.identity,
                "--no-metrics", "--state-root", str(self.root / "state"), *extra]

    def tamper(self, change: Callable[[dict[str, Any]], None]) -> str:
        """Edit the plan as an attacker would (canonical form, so only content differs) and
        return the identity they would ask the operator to paste."""
        from ray_bench.plan.identity import canonical_bytes, identity_of

        doc = json.loads(self.plan.read_bytes())
        change(doc)
        self.plan.write_bytes(canonical_bytes(doc) + b"\n")
        return identity_of(doc)


@dataclass
class Case:
    argv: list[str]
    #: Substrings, one per expected ``error:`` line (None: do not count the lines).
    names: list[str] | None
    code: int = 2
    #: Values that must not appear in any output.
    secrets: list[str] = field(default_factory=list)


Maker = Callable[[Env], Case]
CASES: dict[str, Maker] = {}


def case(name: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return register


# -- the case runner -------------------------------------------------------------------------

def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (what "nothing written" compares)."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def make_base(root: Path) -> str:
    from support.suites import make_suite

    from ray_bench.api import plan_run

    make_suite(root / "s", tasks=["hello-world", "sum-list"])
    return plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                    runs_dir=root / "runs", run_id="ok").identity


def run_case(name: str, base: Path, work: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from ray_bench.api import plan_run
    from ray_bench.cli.app import app

    root = work / name
    shutil.copytree(base, root, symlinks=True)
    shutil.rmtree(root / "runs")  # plans are bound to their run root: plan this copy's own
    identity = plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                        runs_dir=root / "runs", run_id="ok").identity
    env = Env(root, identity)
    spec = CASES[name](env)
    before = tree(root)
    started, cpu = time.monotonic(), time.process_time()
    signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS)
    signal.alarm(CASE_WALL_SECONDS)
    try:
        result = CliRunner().invoke(app, spec.argv, catch_exceptions=True)
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        crashed = repr(result.exception) if result.exception and not isinstance(result.exception, SystemExit) else ""
    except _Timeout:
        code, stdout, stderr, crashed = -1, "", "", "timed out"
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    after = tree(root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    out = {"name": name, "code": code, "expected_code": spec.code, "stdout": stdout, "stderr": stderr,
           "crashed": crashed, "seconds": elapsed, "cpu_seconds": cpu, "changed": changed, "names": spec.names,
           "secrets": spec.secrets}
    shutil.rmtree(root, ignore_errors=True)
    return out


def limit_address_space() -> None:
    """``preexec_fn`` of the case process: 1 GB of address space, so a bomb is a MemoryError
    (and a failed case) instead of a machine swapping."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def main(argv: list[str]) -> int:
    """``hostile_corpus.py BASE WORK OUT NAME...``: run the named cases, write results to OUT."""
    base, work, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    import ray_bench.api

    def no_ray(address: str | None) -> Any:  # every case is refused before Ray starts
        raise AssertionError("a hostile case got as far as starting Ray")
    ray_bench.api.join_ray = no_ray
    results = []
    for name in argv[3:]:
        try:
            results.append(run_case(name, base, work))
        except MemoryError:
            results.append({"name": name, "code": -2, "crashed": "MemoryError", "stdout": "", "stderr": "",
                            "seconds": 0.0, "cpu_seconds": 0.0, "changed": [], "names": None, "secrets": [],
                            "expected_code": 2})
        out.write_text(json.dumps(results))
    return 0


def all_cases() -> dict[str, Maker]:
    """Every case: the case modules register themselves into :data:`CASES` on import."""
    import hostile_cases_inputs  # noqa: F401
    import hostile_cases_malformed  # noqa: F401
    import hostile_cases_paths  # noqa: F401
    import hostile_cases_plans  # noqa: F401
    import hostile_cases_round4  # noqa: F401
    import hostile_cases_trees  # noqa: F401

    return CASES


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    import hostile_corpus  # the cases register into the imported module, not into __main__

    hostile_corpus.all_cases()
    sys.exit(hostile_corpus.main(sys.argv[1:]))
