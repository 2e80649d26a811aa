"""Fault fuzzing of the real driver on a virtual clock (ray_bench/sim/fuzz.py lists the
invariants). 1,000 seeds; a failing seed prints the one command that replays it."""

from __future__ import annotations

import os

import pytest

from ray_bench.sim.fuzz import replay_command, run_seed

SEEDS = int(os.environ.get("RAY_BENCH_FUZZ_SEEDS", "1000"))


@pytest.mark.slow
def test_fuzz_seeds_keep_every_invariant() -> None:
    failures: list[str] = []
    faults_seen = resumes = 0
    for seed in range(SEEDS):
        try:
            result = run_seed(seed)
        except Exception as exc:  # a crash is a failure of the seed, not of the test run
            failures.append(f"seed {seed}: {type(exc).__name__}: {exc}  -> {replay_command(seed)}")
            continue
        resumes += result.resumes
        faults_seen += result.attempts > result.valid_cells
        if result.violations:
            failures.append(f"seed {seed}: {'; '.join(result.violations[:3])}  -> {replay_command(seed)}")
    assert not failures, "\n".join(failures[:20])
    # the seeds exercised what they are for
    assert resumes > 0 and faults_seen > SEEDS // 10
