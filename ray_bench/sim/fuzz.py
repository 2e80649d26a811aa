"""Fault fuzzing of the real driver: one small seeded workload, accounts, events and faults
per seed, run by :func:`~ray_bench.sim.driven.run_driven`, which checks the invariants:

- no cell has two valid attempts, and no cell with a valid attempt is started again;
- every sandbox an attempt created is deleted by the end of the run;
- no account runs more cells than its limit at any instant;
- no attempt is sent to a node not heard from since its death;
- every planned cell ends valid, or failed with a reason, or the run stopped with one.

Replay one seed: ``python -m ray_bench.sim.fuzz SEED``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ray_bench.sim.driven import DrivenResult, draw_faults, run_driven
from ray_bench.sim.workload import build_workload, parse_spec


def fuzz_spec(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([seed, 4])
    n_acc = int(rng.integers(1, 4))
    accounts: list[dict[str, Any]] = []
    for i in range(n_acc):
        acc: dict[str, Any] = {"name": f"a{i}", "max_concurrent": int(rng.integers(1, 5))}
        if rng.random() < 0.3:
            acc["window"] = {"hours": float(rng.uniform(0.5, 3)), "max_cells": int(rng.integers(2, 12))}
        accounts.append(acc)
    events: list[dict[str, Any]] = []
    if rng.random() < 0.4:
        events.append({"kind": "storm", "account": f"a{int(rng.integers(n_acc))}",
                       "start_h": float(rng.uniform(0, 1.5)), "length_min": float(rng.uniform(5, 40)),
                       "retry_after_s": float(rng.uniform(10, 1800))})
    if rng.random() < 0.3:
        events.append({"kind": "auth_loss", "account": f"a{int(rng.integers(n_acc))}",
                       "at_h": float(rng.uniform(0, 2))})
    if rng.random() < 0.2:  # drawn last: the seeds' other draws are as before
        events.append({"kind": "storm", "account": f"a{int(rng.integers(n_acc))}", "answer": "server_error",
                       "start_h": float(rng.uniform(0, 1.5)), "length_min": float(rng.uniform(5, 90))})
    return {
        "seed": seed,
        "suite": {"tasks": int(rng.integers(1, 7)), "arms": ["baseline", "mcp"], "reps": int(rng.integers(1, 3))},
        "durations": {"lognormal": {"median_s": 600, "sigma": 1.0, "min_s": 20, "max_s": 4 * 3600}},
        "history": {"noise_sigma": 0.3} if rng.random() < 0.5 else None,
        "accounts": accounts,
        "events": events,
        "policies": ["adaptive"],
    }


def run_seed(seed: int) -> DrivenResult:
    spec = parse_spec(fuzz_spec(seed), where=f"fuzz seed {seed}")
    workload = build_workload(spec)
    rng = np.random.default_rng([seed, 5])
    return run_driven(spec, workload, draw_faults(seed, 3 * 3600.0),
                      preflight=int(rng.integers(0, 3)), max_attempts=int(rng.integers(1, 4)))


def replay_command(seed: int) -> str:
    return f"python -m ray_bench.sim.fuzz {seed}"


def main(argv: list[str]) -> int:
    for arg in argv:
        result = run_seed(int(arg))
        print(f"seed {arg}: {result}")
        if result.violations:
            return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - the replay command
    raise SystemExit(main(sys.argv[1:]))
