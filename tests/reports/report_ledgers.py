"""Ledgers written directly (no Ray) for the report tests: one run root planned from a
test suite, attempts recorded at chosen times with chosen outcomes."""

from __future__ import annotations

from pathlib import Path

from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file

TASKS = ["count-words", "fizzbuzz", "hello-world", "sum-list"]


class Writer:
    """Writes attempts of one run root's plan at given times."""

    def __init__(self, run_root: Path) -> None:
        self.plan, self.identity = load_plan_file(run_root / "launch-plan.json")
        self.ledger = Ledger.create(run_root, run_id=self.plan.run_id, plan_identity=self.identity)
        self.cells = {(c.task, c.arm, c.rep): c for c in self.plan.cells}
        self.checksums = {t.id: t.checksum for t in self.plan.tasks}

    def attempt(
        self,
        task: str,
        arm: str,
        rep: int,
        t: float,
        *,
        reward: float | None = None,
        fail: tuple[str, str] | None = None,
        stale: bool = False,
        usage: dict[str, object] | None = None,
    ) -> None:
        cell = self.cells[(task, arm, rep)]
        account = "acct-a" if arm == "baseline" else "acct-b"
        row = self.ledger.start_attempt(
            cell_id=cell.id,
            task=task,
            task_checksum=self.checksums[task],
            arm=arm,
            rep=rep,
            account=account,
            backend="local",
            epoch=self.identity,
            preflight=False,
            now=t,
        )
        # request ids as an agent adapter records them (settlement matches on them)
        usage = usage if usage is not None else {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.01,
                                                 "request_ids": [f"req_{row.attempt_id}"]}
        if stale:
            self.ledger.finish_attempt(
                row.attempt_id,
                status="stale",
                valid=False,
                reward=None,
                failure_class="executor",
                fingerprint="stale-runner",
                counts=False,
                cost_usd=0.0,
                summary=AttemptSummary(stale=True),
                now=t + 1,
            )
            return
        valid = fail is None
        summary = AttemptSummary.parse({
            "usage": usage,
            "reward": reward,
            "verdict": {"valid": valid, "message": "valid" if valid else f"{fail[0]} broke"},  # type: ignore[index]
        })
        self.ledger.finish_attempt(
            row.attempt_id,
            status="finished",
            valid=valid,
            reward=reward,
            failure_class=None if valid else fail[0],  # type: ignore[index]
            fingerprint=None if valid else fail[1],  # type: ignore[index]
            counts=not valid,
            cost_usd=float(usage.get("cost_usd") or 0.0),  # type: ignore[arg-type]
            summary=summary,
            now=t + 5,
        )


def first_run(tmp_path: Path) -> Path:
    """A run r1 of 4 tasks x 2 arms x 2 reps; the expected numbers are in test_report_numbers."""
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=2)
    root = plan_run(
        suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1"
    ).run_root
    w = Writer(root)
    w.attempt("hello-world", "baseline", 1, 100, reward=1.0)
    w.attempt("hello-world", "baseline", 2, 101, reward=0.0)
    w.attempt("hello-world", "mcp", 1, 102, stale=True)
    w.attempt("hello-world", "mcp", 1, 103, reward=1.0)
    w.attempt("hello-world", "mcp", 2, 104, reward=1.0)
    w.attempt("sum-list", "baseline", 1, 105, reward=1.0)
    w.attempt("sum-list", "baseline", 2, 106, reward=1.0)
    w.attempt("sum-list", "mcp", 1, 107, reward=0.0)
    w.attempt("sum-list", "mcp", 2, 108, fail=("evaluator", "ev-1"))
    w.attempt("sum-list", "mcp", 2, 109, reward=0.0)  # accepted: the earliest valid ...
    w.attempt("sum-list", "mcp", 2, 110, reward=1.0)  # ... never the best
    w.attempt("fizzbuzz", "baseline", 1, 111, reward=1.0)
    w.attempt("fizzbuzz", "baseline", 2, 112, fail=("tool", "tool-1"))
    w.attempt("fizzbuzz", "baseline", 2, 113, fail=("tool", "tool-1"))
    w.attempt("fizzbuzz", "mcp", 1, 114, reward=1.0)
    w.attempt("fizzbuzz", "mcp", 2, 115, reward=1.0)
    w.attempt("count-words", "baseline", 1, 116, reward=0.0)
    w.attempt("count-words", "baseline", 2, 117, reward=0.0)
    # count-words/mcp never ran (the run stopped)
    w.ledger.close()
    return root
