"""The report's paired statistics, each checked against a published worked example, and the
report's md, csv and html carrying them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_ledgers import first_run

from ray_bench.reports.build import write_report
from ray_bench.reports.paired import (
    MCNEMAR,
    SIGN_FLIP,
    TaskPairs,
    claim,
    holm,
    mcnemar_exact,
    overall_stats,
    pass_at_k,
    pass_curve,
    pass_hat_k,
    sign_flip_p,
    task_stats,
)
from ray_bench.reports.stats import BOOTSTRAP_SEED, bootstrap_ci


def test_exact_mcnemar_matches_fagerland_et_al_2013() -> None:
    """Fagerland, Lydersen and Laake (2013), "The McNemar test for binary matched-pairs data: mid-p
    and asymptotic are better than exact conditional", BMC Med Res Methodol 13:91, Table 1: airway
    hyper-responsiveness before and after stem cell transplantation in 21 children (Bentur et al.
    2009), discordant pairs n12 = 1 and n21 = 7: exact conditional p = 0.070."""
    assert round(mcnemar_exact(1, 7), 3) == 0.070
    assert mcnemar_exact(7, 1) == mcnemar_exact(1, 7)  # two-sided: the direction does not matter
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pair: nothing differs


def test_sign_flip_matches_fishers_zea_mays_randomisation() -> None:
    """Fisher, The Design of Experiments (1935), section 21: Darwin's 15 pairs of cross- and
    self-fertilised Zea mays, height differences in eighths of an inch; 863 of the 2**15 sign
    patterns give a sum at least the observed one: two-sided p = 2 x 863 / 32768 = 0.053."""
    darwin = [49, -67, 8, 16, 6, 23, 28, 41, 14, 29, 56, 24, 75, 60, -48]
    assert round(sign_flip_p(darwin), 3) == 0.053
    assert sign_flip_p(darwin) == pytest.approx(2 * 863 / 32768, abs=1e-9)  # exact: every pattern
    assert sign_flip_p([0.0, 0.0]) == 1.0
    assert sign_flip_p([]) != sign_flip_p([])  # NaN: nothing to test


def test_holm_matches_wikipedias_example() -> None:
    """Wikipedia, "Holm-Bonferroni method", Example: p1 = 0.01, p2 = 0.04, p3 = 0.03, p4 = 0.005 at
    alpha 0.05 rejects H1 and H4 only; the adjusted p-values are 0.03, 0.06, 0.06, 0.02."""
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert [round(p, 3) for p in adjusted] == [0.03, 0.06, 0.06, 0.02]
    assert [p < 0.05 for p in adjusted] == [True, False, False, True]
    nan = float("nan")
    out = holm([0.01, nan, 0.02])  # an untested figure is not counted in the family
    assert out[0] == pytest.approx(0.02) and out[1] != out[1] and out[2] == pytest.approx(0.02)


def _chen_stable(n: int, c: int, k: int) -> float:
    """Chen et al. 2021 (arXiv:2107.03374), Figure 3: the numerically stable pass@k."""
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def test_pass_at_k_is_chens_unbiased_estimator() -> None:
    """Chen et al. 2021, eq. 1 and Figure 3 (HumanEval: n = 200 samples per problem, k = 1, 10,
    100): 1 - C(n-c, k)/C(n, k); pass@1 is c/n."""
    for c in (0, 1, 7, 58, 199, 200):
        for k in (1, 10, 100):
            assert pass_at_k(200, c, k) == pytest.approx(_chen_stable(200, c, k), abs=1e-12)
    assert pass_at_k(200, 58, 1) == pytest.approx(58 / 200)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10


def test_pass_hat_k_is_tau_bench_estimator() -> None:
    """Yao et al. 2024 (tau-bench, arXiv:2406.12045), section 5: pass^k = C(c, k)/C(n, k), the
    chance that all of k i.i.d. trials succeed; pass^1 is c/n and it falls with k."""
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_hat_k(8, 8, 8) == 1.0 and pass_hat_k(8, 7, 8) == 0.0
    assert [pass_hat_k(10, 6, k) for k in (1, 2, 3)] == pytest.approx([0.6, 15 / 45, 20 / 120])
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_hat_k(2, 1, 3)
    curve = pass_curve([(2, 1), (3, 3)])  # k stops at the fewest trials of a task
    assert [p.k for p in curve] == [1, 2] and curve[1].pass_at == pytest.approx(1.0)


def test_task_with_one_pair_has_no_interval() -> None:
    one = task_stats(TaskPairs("t", "b", (0.0,), (1.0,)))
    assert one.pairs == 1 and one.delta == 1.0 and one.ci_low != one.ci_low  # NaN: none
    assert one.test.method == MCNEMAR and one.test.variant_only == 1
    continuous = task_stats(TaskPairs("t", "b", (0.2, 0.4, 0.1), (0.5, 0.6, 0.3)))
    assert continuous.test.method == SIGN_FLIP
    assert continuous.test.p_value == pytest.approx(0.25)  # 2 of 8 patterns as extreme
    assert continuous.ci_low <= continuous.delta <= continuous.ci_high
    # one continuous pair: its two flips are equally extreme (scipy refuses a single observation,
    # which made write_report raise on a run with one repetition of a graded task)
    single = task_stats(TaskPairs("t", "b", (0.2,), (0.7,)))
    assert single.test.method == SIGN_FLIP and single.test.p_value == 1.0 and single.ci_low != single.ci_low


def test_overall_is_mcnemar_over_tasks_with_one_pair_each() -> None:
    # the Fagerland table as 21 one-trial tasks: 7 the variant alone solves, 1 the baseline alone
    tasks = ([TaskPairs(f"v{i}", "b", (0.0,), (1.0,)) for i in range(7)] + [TaskPairs("b0", "b", (1.0,), (0.0,))]
             + [TaskPairs(f"s{i}", "b", (1.0,), (1.0,)) for i in range(1)]
             + [TaskPairs(f"n{i}", "b", (0.0,), (0.0,)) for i in range(12)])
    o = overall_stats(tasks)
    assert o.tasks == 21 and o.test.method == MCNEMAR and round(o.test.p_value, 3) == 0.070
    assert o.ci_low < o.delta < o.ci_high
    text = claim(1, [("mcp", o)])
    assert "not a model score" in text and "tuning" in text


def test_report_carries_the_paired_statistics(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    report = write_report(root)
    assert report.paired_stats is not None
    stats = pd.read_csv(root / "report-paired.csv")
    tasks = stats[stats.scope == "task"].set_index("task")
    # hello-world: pairs (1,1) and (0,1); sum-list (1,0) twice; fizzbuzz one pair (its baseline
    # rep 2 has no valid row); count-words has no mcp row: not paired
    assert sorted(tasks.index) == ["fizzbuzz", "hello-world", "sum-list"]
    assert tasks.loc["sum-list", "baseline_only"] == 2 and tasks.loc["sum-list", "p_value"] == pytest.approx(0.5)
    assert tasks.loc["hello-world", "paired_delta"] == pytest.approx(0.5)
    assert pd.isna(tasks.loc["fizzbuzz", "ci_low"]) and tasks.loc["fizzbuzz", "pairs"] == 1
    overall = stats[stats.scope == "overall"].iloc[0]
    assert overall.tasks == 3 and overall.pairs == 5 and overall.test == SIGN_FLIP
    assert overall.paired_delta == pytest.approx((0.5 - 1.0 + 0.0) / 3)
    assert overall.p_holm == pytest.approx(overall.p_value)  # one comparison: Holm changes nothing
    md = (root / "report.md").read_text()
    assert "## Paired statistics" in md and "**What the data can claim.** One trial" in md
    assert "| fizzbuzz | mcp | 1 | +0.000 | none: 1 pair | exact McNemar (0 vs 0 discordant) | 1.000 |" in md
    assert "| mcp | 2 | 3 | 0.667 | 0.667 |" in md  # pass@2 and pass^2 of the mcp arm
    html = (root / "report.html").read_text()
    assert 'id="paired-overall"' in html and 'id="pass-k"' in html and "What the data can claim" in html


@pytest.mark.parametrize("size", [2, 10, 257, 1200])
def test_the_bootstrap_drawn_in_blocks_or_kept_is_the_one_draw_of_every_resample(size: int) -> None:
    """Issue 57: a task's draw is kept and reused, the tasks' is drawn block by block; both must
    give the interval one draw of every resample gives, bit for bit (any change moves a report)."""
    values = np.random.default_rng(size).normal(size=size) / 3
    for seed in (BOOTSTRAP_SEED, 7):
        means = values[np.random.default_rng(seed).integers(0, size, size=(5000, size))].mean(axis=1)
        alpha = (1.0 - 0.95) / 2.0  # as the report computes it (not 0.025 exactly)
        low, high = (float(q) for q in np.quantile(means, [alpha, 1.0 - alpha]))
        mean = float(values.mean())
        assert bootstrap_ci(values, seed=seed) == (min(low, mean), max(high, mean))
        assert bootstrap_ci(list(values), seed=seed) == (min(low, mean), max(high, mean))  # again: kept


def test_the_sign_flip_in_small_batches_is_the_one_in_scipy_s_batches_of_4096() -> None:
    """Issue 57: the batch is bounded by its flips (memory); the p-value must not move."""
    from scipy import stats as sps

    deltas = np.random.default_rng(5).integers(-2, 3, 3000) / 10 + 0.01
    whole = sps.permutation_test((deltas,), np.mean, permutation_type="samples", vectorized=True,
                                 n_resamples=9999, batch=4096, alternative="two-sided",
                                 rng=np.random.default_rng(BOOTSTRAP_SEED))
    assert sign_flip_p(deltas) == float(min(1.0, whole.pvalue))
