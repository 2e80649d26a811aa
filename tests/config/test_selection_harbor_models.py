"""The Harbor selection fixtures read by Harbor 0.26's own models: the manifest by
``DatasetManifest``, the job configs by ``JobConfig``, and the tasks a local dataset's globs pick
by ``DatasetConfig.get_task_configs``, which ray-bench's reader must equal. Runs in .venv-harbor
(Python 3.12)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import yaml
from support.suites import make_suite

from ray_bench.config.selection import load_selection

pytestmark = pytest.mark.harbor
FIXTURES = Path(__file__).parent / "harbor_selections"


def test_harbor_reads_the_manifest_fixture_as_ray_bench_does() -> None:
    from harbor.models.dataset.manifest import DatasetManifest

    manifest = DatasetManifest.from_toml_file(FIXTURES / "dataset.toml")
    ours = load_selection(FIXTURES / "dataset.toml")
    assert [(t.name, t.digest) for t in manifest.get_unique_tasks()] == [(e.package, e.ref) for e in ours.entries]


@pytest.mark.parametrize("name", ["job.yaml", "job.json", "job-registry.yaml"])
def test_every_job_config_fixture_is_a_harbor_job_config(name: str) -> None:
    from harbor.models.job.config import JobConfig

    text = (FIXTURES / name).read_text()
    JobConfig.model_validate(json.loads(text) if name.endswith(".json") else yaml.safe_load(text))


def test_a_local_datasets_globs_pick_the_tasks_harbor_picks(tmp_path: Path) -> None:
    from harbor.models.job.config import JobConfig

    make_suite(tmp_path)
    for toml in (tmp_path / "tasks").glob("*/task.toml"):  # Harbor's is_valid_dir wants an image or environment/
        toml.write_text(toml.read_text().replace("[environment]\n", '[environment]\ndocker_image = "debian"\n'))
    shutil.copy(FIXTURES / "job.yaml", tmp_path / "job.yaml")
    config = JobConfig.model_validate(yaml.safe_load((tmp_path / "job.yaml").read_text()))
    (dataset,) = config.datasets
    dataset.path = tmp_path / "tasks"  # Harbor reads it against the directory it runs in
    theirs = asyncio.run(dataset.get_task_configs(disable_verification=True))
    ours = load_selection(tmp_path / "job.yaml")
    assert sorted(e.task_id for e in ours.entries) == sorted(Path(str(t.path)).name for t in theirs)
    assert {e.reps for e in ours.entries} == {tuple(range(1, config.n_attempts + 1))}
