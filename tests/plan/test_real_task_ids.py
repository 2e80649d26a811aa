"""Real benchmark task ids, as their benchmarks publish them, plan as task directories and as
selection entries (issue 27 item 1): commit hashes, instance ids and UUIDs are how suites
name tasks, never a credential. A real key shape in the same places is still refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.config.secrets import find_secrets, looks_like_secret
from ray_bench.errors import UserInputError

#: As published: SWE-bench (Verified), SWE-bench Pro (Scale AI's instance ids, with the
#: image-version suffix), the same id as CodeScaleBench lower-cases it, SWE-smith task repos
#: (repo.commit), Multi-SWE-bench (org__repo-PR), SWE-rebench, and a UUID-named task.
REAL_IDS = [
    "django__django-11099",
    "astropy__astropy-12907",
    "instance_NodeBB__NodeBB-76c6e30282906ac664f2c9278fc90999b27b1f48-vd59a5728dfc977f44533186ace531248c2917516",
    "instance_NodeBB__NodeBB-04998908ba6721d64eba79ae3b65a351dcfbc5b5-vnan",
    "instance_qutebrowser__qutebrowser-473a15f7908f2bb6d670b0e908ab34a28d8cf7e2-v363c8a7e5ccdf6968fc7ab84a2053ac78036691d",
    "instance_qutebrowser__qutebrowser-c09e1439f145c66ee3af574386e277dd2388d094-v2ef375ac784985212b1805e1d0431dc8f1b3c171",
    "instance_nodebb-nodebb-76c6e30282906ac664f2c9278fc90999b27b1f48-vd59a5728dfc977f44533186ace531248c2917516",
    "oauthlib__oauthlib.1fd52536",
    "astropy__astropy.26d14786",
    "cli__cli-513",
    "apache__dubbo-10638",
    "ponylang__ponyc-2201",
    "pydata__xarray-9971",
    "3f2b8c1e-9d4a-4f6b-8e2a-7c5d1b0a9e34",
]
KEY = "sk-ant-api03-" + "Q7vB2xLm9Pq4Rt8Zk1Wy5Nc3Hd6Fg0Js" + "-AbCdEf"
ENTROPY = "Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe"


@pytest.mark.parametrize("task_id", REAL_IDS)
def test_a_real_id_is_no_secret_anywhere(task_id: str) -> None:
    assert looks_like_secret(task_id) is None
    assert looks_like_secret(f"/work/tasks/{task_id}/task.toml") is None
    # not even where entropy counts: an env value naming the instance
    assert find_secrets({"arms": [{"env": {"INSTANCE": task_id}}]}) == []


def test_entropy_counts_only_where_a_value_reaches_a_command() -> None:
    assert find_secrets({"tasks": [{"id": ENTROPY, "path": f"/t/{ENTROPY}"}], "name": ENTROPY}) == []
    found = find_secrets({"arms": [{"command": f"run --token {ENTROPY}", "env": {"T": ENTROPY}}]})
    assert sorted(loc for loc, _, _ in found) == [("arms", 0, "command"), ("arms", 0, "env", "T")]
    # a known key shape is found anywhere, also glued to a real id
    assert find_secrets({"tasks": [{"id": f"{REAL_IDS[2]}-{KEY}"}]}) != []


def _suite_of_real_ids(root: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(root, tasks=["hello-world"])
    template = root / "tasks" / "hello-world"
    for task_id in REAL_IDS:
        shutil.copytree(template, root / "tasks" / task_id)
    shutil.rmtree(template)
    return suite, accounts


def test_real_ids_plan_as_task_directories_and_selection_entries(tmp_path: Path) -> None:
    suite, accounts = _suite_of_real_ids(tmp_path / "s")
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="all")
    assert planned.cells == 2 * len(REAL_IDS)
    for name, text in (("sel.txt", "\n".join(REAL_IDS) + "\n"),
                       ("sel.json", json.dumps({"tasks": [{"task_id": t} for t in REAL_IDS]}))):
        selection = tmp_path / name
        selection.write_text(text)
        planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs",
                           run_id=name.replace(".", "-"), selection=selection)
        assert planned.cells == 2 * len(REAL_IDS)


def test_a_key_beside_the_real_ids_is_still_refused_and_never_shown(tmp_path: Path) -> None:
    suite, accounts = _suite_of_real_ids(tmp_path / "s")
    selection = tmp_path / "sel.txt"
    selection.write_text("\n".join([*REAL_IDS, KEY]) + "\n")
    with pytest.raises(UserInputError) as refused:
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="k", selection=selection)
    assert "entry 15" in str(refused.value) and KEY[4:] not in str(refused.value)
    shutil.copytree(tmp_path / "s" / "tasks" / REAL_IDS[0], tmp_path / "s" / "tasks" / KEY)
    with pytest.raises(UserInputError) as refused:
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="k")
    assert "name holds what looks like a credential" in str(refused.value) and KEY[4:] not in str(refused.value)
    assert not (tmp_path / "runs" / "k").exists()
