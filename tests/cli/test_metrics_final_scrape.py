"""`execute --metrics-final-scrape` ($RAY_BENCH_METRICS_FINAL_SCRAPE): how long a driver without a
linger waits for a scrape of its final figures. An unreadable value is bad input, refused before
the run root is touched (a typo must not cost a Ray start and then fail at the end)."""

from __future__ import annotations

from pathlib import Path

from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app

runner = CliRunner()


def test_an_unreadable_final_scrape_wait_is_bad_input_and_nothing_is_written(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="scrape")
    before = sorted(p.name for p in planned.run_root.iterdir())
    for args, env in ((["--metrics-final-scrape", "soon"], {}), ([], {"RAY_BENCH_METRICS_FINAL_SCRAPE": "soon"})):
        result = runner.invoke(app, ["execute", "--plan", str(planned.run_root / "launch-plan.json"),
                                     "--confirm", planned.identity, "--metrics-linger", "0", *args], env=env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2, result.output
        assert len(lines) == 1 and "--metrics-final-scrape" in lines[0] and "'soon'" in lines[0], lines
        assert sorted(p.name for p in planned.run_root.iterdir()) == before
