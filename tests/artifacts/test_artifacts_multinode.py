"""No shared filesystem, for real: a local three-node Ray cluster whose two worker nodes see
the directory holding the suite, the tasks, the agents and the run root as an empty tmpfs of
their own (``local-multinode.sh --worker-private``). Every valid row's directory still lands
in the driver's run root (``auto``), or in S3 (moto_server on loopback); the report reads
the run either way."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.driver_process import cli_env, run_cli
from support.moto_s3 import MotoS3, moto_s3
from support.multinode import MultiNode, running_cluster
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.artifacts.store import open_store
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.runroot import RunPaths

pytestmark = [pytest.mark.ray, pytest.mark.slow]
__all__ = ["moto_s3"]


@pytest.fixture(scope="module")
def hidden(moto_s3: MotoS3) -> Iterator[tuple[MultiNode, Path]]:
    """The cluster (its workers started with the S3 environment, as a node's would be) and the
    directory only the driver's side sees."""
    private = Path(tempfile.mkdtemp(prefix="rb-driver-only-"))
    try:
        with running_cluster(workers=2, private=(private,)) as cluster:
            yield cluster, private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _run(hidden: tuple[MultiNode, Path], name: str, artifacts: str) -> tuple[Path, dict[str, AttemptSummary]]:
    cluster, private = hidden
    base = private / name
    suite, accounts = make_suite(base / "s", tasks=["hello-world", "sum-list"], reps=2,
                                 backends={"local": {"max_sandboxes": 6,
                                                     "options": {"root": str(base / "sbx")}}})
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=base / "runs", run_id=name)
    done = run_cli("execute", "--plan", str(planned.run_root / "launch-plan.json"), "--confirm",
                   planned.identity, "--address", cluster.address, "--artifacts", artifacts,
                   "--no-metrics", "--quiet", "--runners-per-node", "1",
                   env=cli_env({**cluster.env, "RAY_BENCH_STATE_ROOT": str(base / "st")}), timeout=480)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-1000:]
    with Ledger.reading(planned.run_root) as ledger:
        attempts = ledger.attempts()
        summaries = dict(ledger.summaries())
    assert len([a for a in attempts if a.valid]) == 8
    # by the attempt's directory name: the run root's and the store's layout
    valid = {RunPaths(planned.run_root).attempt(a).name: summaries[a.attempt_id] for a in attempts if a.valid}
    report = run_cli("report", str(planned.run_root), env=cli_env())
    assert report.returncode == 0, report.stderr[-2000:]
    return planned.run_root, valid


def test_no_shared_run_root(hidden: tuple[MultiNode, Path]) -> None:
    root, valid = _run(hidden, "auto", "auto")
    vias = {s.artifacts.via for s in valid.values() if s.artifacts is not None}
    # The worker nodes could not read the driver's token: their attempts came back through Ray.
    assert "ray" in vias and vias <= {"ray", "run-root"}, vias
    for name, summary in valid.items():
        adir = root / "attempts" / name
        assert float((adir / "logs" / "verifier" / "reward.txt").read_text()) == summary.reward
        assert (adir / "result.json").is_file()


def test_artifacts_in_s3(hidden: tuple[MultiNode, Path], moto_s3: MotoS3) -> None:
    bucket = moto_s3.make_bucket("rb-artifacts-cluster")
    root, valid = _run(hidden, "s3run", f"s3://{bucket}/runs")
    assert not (root / "attempts").exists()
    keys = moto_s3.keys(bucket)
    store = open_store(f"s3://{bucket}/runs")
    for name, summary in valid.items():
        assert summary.artifacts is not None and summary.artifacts.via == "store"
        assert summary.artifacts.uri == f"s3://{bucket}/runs/s3run/attempts/{name}"
        assert f"runs/s3run/attempts/{name}/result.json" in keys
        got = store.get_tree(f"s3run/attempts/{name}", root.parent / "read" / name)
        assert float((got / "logs" / "verifier" / "reward.txt").read_text()) == summary.reward


def test_an_artifacts_path_the_workers_cannot_share_is_refused_before_any_start(
        hidden: tuple[MultiNode, Path]) -> None:
    """Issue 29 item 8: the workers write their own empty tmpfs at this path, so the driver
    cannot read their markers back: one line, exit 2, no ledger, no attempt."""
    cluster, private = hidden
    base = private / "unshared"
    suite, accounts = make_suite(base / "s", tasks=["hello-world"],
                                 backends={"local": {"max_sandboxes": 2, "options": {"root": str(base / "sbx")}}})
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=base / "runs", run_id="unshared")
    done = run_cli("execute", "--plan", str(planned.run_root / "launch-plan.json"), "--confirm",
                   planned.identity, "--address", cluster.address, "--artifacts", str(private / "store"),
                   "--no-metrics", "--quiet",
                   env=cli_env({**cluster.env, "RAY_BENCH_STATE_ROOT": str(base / "st")}), timeout=480)
    assert done.returncode == 2, done.stderr[-3000:] + done.stdout[-1000:]
    lines = [line for line in done.stderr.splitlines() if "not shared by every node" in line]
    assert len(lines) == 1 and "2 of 3 cannot use it" in lines[0] and "--artifacts auto" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (planned.run_root / "ledger.sqlite").exists()
    assert not (private / "store" / "unshared" / ".node-probe").exists()  # the driver's markers removed
