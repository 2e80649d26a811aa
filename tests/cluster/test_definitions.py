"""The cluster definitions in ``cluster/`` checked against the schemas of the systems that read
them: KubeRay's RayCluster and RayJob CRDs (their OpenAPI schemas, vendored from KubeRay by
``schemas/vendor.py``, closed as ``kubectl --validate=strict`` would) with ``check-jsonschema``,
the core Kubernetes resources with ``kubernetes-validate --strict``, and ``ray up``'s file with
the schema Ray itself ships (``ray/autoscaler/ray-schema.json``). Each check is also shown to
refuse a broken copy, so that a pass means something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
SCHEMAS = Path(__file__).with_name("schemas")
BIN = Path(sys.executable).parent
RAY_UP_SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
CRD_SCHEMAS = {"RayCluster": SCHEMAS / "raycluster.schema.json", "RayJob": SCHEMAS / "rayjob.schema.json"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _check_jsonschema(schema: Path, doc: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    instance = tmp_path / f"{doc.get('kind', 'doc')}-{abs(hash(json.dumps(doc, sort_keys=True)))}.json"
    instance.write_text(json.dumps(doc))
    return subprocess.run([str(BIN / "check-jsonschema"), "--schemafile", str(schema), str(instance)],
                          check=False, capture_output=True, text=True, timeout=120)


def _kubernetes_validate(doc: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    instance = tmp_path / "resource.yaml"
    instance.write_text(yaml.safe_dump(doc))
    return subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "--quiet", str(instance)],
                          check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["raycluster.yaml", "rayjob.yaml"])
def test_kuberay_files_match_the_crds_and_kubernetes(name: str, tmp_path: Path) -> None:
    docs = _docs(CLUSTER / name)
    kinds = [d["kind"] for d in docs]
    assert {"RayCluster", "RayJob"} & set(kinds)
    for doc in docs:
        if doc["kind"] in CRD_SCHEMAS:
            done = _check_jsonschema(CRD_SCHEMAS[doc["kind"]], doc, tmp_path)
        else:
            done = _kubernetes_validate(doc, tmp_path)
        assert done.returncode == 0, f"{name} {doc['kind']}: {done.stdout}{done.stderr}"


def test_a_misspelt_field_is_refused_by_the_crd_schema(tmp_path: Path) -> None:
    (cluster, *_) = _docs(CLUSTER / "raycluster.yaml")
    cluster["spec"]["headGroupSpec"]["rayStartParam"] = cluster["spec"]["headGroupSpec"].pop("rayStartParams")
    done = _check_jsonschema(CRD_SCHEMAS["RayCluster"], cluster, tmp_path)
    assert done.returncode == 1 and "rayStartParam" in done.stdout
    job = _docs(CLUSTER / "rayjob.yaml")[0]
    job["spec"]["shutdownAfterJobFinishes"] = "yes"
    done = _check_jsonschema(CRD_SCHEMAS["RayJob"], job, tmp_path)
    assert done.returncode == 1, done.stdout


def test_a_broken_core_resource_is_refused_by_kubernetes_validate(tmp_path: Path) -> None:
    (claim,) = [d for d in _docs(CLUSTER / "raycluster.yaml") if d["kind"] == "PersistentVolumeClaim"]
    claim["spec"]["accessMode"] = claim["spec"].pop("accessModes")
    done = _kubernetes_validate(claim, tmp_path)
    assert done.returncode != 0, done.stdout + done.stderr


def test_ray_up_file_matches_rays_own_schema(tmp_path: Path) -> None:
    (config,) = _docs(CLUSTER / "ray-up.yaml")
    assert _check_jsonschema(RAY_UP_SCHEMA, config, tmp_path).returncode == 0
    config["available_node_types"]["head"]["min_worker"] = 0
    done = _check_jsonschema(RAY_UP_SCHEMA, config, tmp_path)
    assert done.returncode == 1, done.stdout


def test_the_vendored_schemas_are_kuberays_v1() -> None:
    for kind, path in CRD_SCHEMAS.items():
        schema = json.loads(path.read_text())
        assert schema["properties"]["kind"] == {"const": kind}
        assert schema["properties"]["spec"]["additionalProperties"] is False
