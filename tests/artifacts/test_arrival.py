"""An attempt whose directory did not arrive is not a valid row (issue 29 item 8): the driver
looks for its ``result.json`` where the summary says (run root or store) as the driver sees it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ray_bench.artifacts.route import ArtifactRoute
from ray_bench.cells.artifact_node import receive, store_key
from ray_bench.cells.spec import AttemptSpec
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import ArtifactPlace, AttemptSummary


def _spec(tmp_path: Path) -> AttemptSpec:
    return AttemptSpec(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="t", arm="baseline", rep=1, account="acct",
        task_path=str(tmp_path), stage_key="k", attempt_dir=str(tmp_path / "run" / "attempts" / "c-a1"),
        backend="local", backend_options={}, agent_command="true", agent_env={}, agent_dir=None, route_env={},
        route_home=None, agent_timeout_sec=10.0, verifier_timeout_sec=10.0, verifier_env={}, image=None,
        build_context=None, workdir=None, network=False, cpus=None, memory_mb=None, pids=None,
        expose_solution=False, artifact_cap_bytes=1 << 20, seed="s")


def _solved(place: ArtifactPlace) -> AttemptSummary:
    return AttemptSummary(attempt_id="c-a1", cell_id="c", task="t", arm="baseline", rep=1, reward=1.0,
                          artifacts=place)


def test_a_run_root_row_without_its_directory_is_an_executor_failure(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    summary = receive(_solved(ArtifactPlace(via="run-root", uri=spec.attempt_dir)), spec)
    assert summary.error is not None and summary.error.type == "ArtifactsMissing"
    assert summary.error.failure_class == "executor" and spec.attempt_dir in summary.error.message
    verdict = classify(summary, Catalog.default())
    assert not verdict.valid and verdict.failure_class == "executor"

    Path(spec.attempt_dir).mkdir(parents=True)
    (Path(spec.attempt_dir) / "result.json").write_text("{}")
    arrived = receive(_solved(ArtifactPlace(via="run-root", uri=spec.attempt_dir)), spec)
    assert arrived.error is None and classify(arrived, Catalog.default()).valid


def test_a_store_row_is_looked_for_in_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    spec = replace(_spec(tmp_path), artifacts=ArtifactRoute(local_files=False, store=str(store)))
    place = ArtifactPlace(via="store", uri=f"{store}/{store_key(spec)}")
    missing = receive(_solved(place), spec)
    assert missing.error is not None and missing.error.type == "ArtifactsMissing"

    (store / store_key(spec)).mkdir(parents=True)
    (store / store_key(spec) / "result.json").write_text("{}")
    assert receive(_solved(place), spec).error is None
