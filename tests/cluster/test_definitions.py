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
CRD_SCHEMAS = {"RayCluster": SCHEMAS / "raycluster.schema.json", "RayJob": SCHEMAS / "rayjob.schema.json",
               # not vendored: the fields cluster/ uses of the Prometheus Operator's CRD, closed
               "PodMonitor": SCHEMAS / "podmonitor.schema.json"}


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
        if kind == "PodMonitor":
            continue
        schema = json.loads(path.read_text())
        assert schema["properties"]["kind"] == {"const": kind}
        assert schema["properties"]["spec"]["additionalProperties"] is False


#: The labels KubeRay puts on a RayCluster's head pod (what a Service or PodMonitor selects).
def _head_pod_labels(cluster: dict[str, Any]) -> dict[str, str]:
    return {"ray.io/cluster": cluster["metadata"]["name"], "ray.io/node-type": "head"}


def test_the_exporter_port_is_scraped_through_a_service_and_a_podmonitor() -> None:
    """The port raycluster.yaml declares for the exporter is the one its header tells `execute`
    to listen on, and a Service and a PodMonitor select the head pod and name that port."""
    docs = _docs(CLUSTER / "raycluster.yaml")
    (cluster,) = [d for d in docs if d["kind"] == "RayCluster"]
    (head,) = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in head["ports"]}
    labels = _head_pod_labels(cluster)
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics" and port["port"] == ports["metrics"]
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    # the alert rules select up{job="ray-bench"}
    assert {"action": "replace", "targetLabel": "job", "replacement": "ray-bench"} in endpoint["relabelings"]
    header = "".join(line.removeprefix("#") for line in (CLUSTER / "raycluster.yaml").read_text().splitlines()
                     if line.startswith("#"))
    assert f"--metrics-port {ports['metrics']}" in header and "--metrics-host 0.0.0.0" in header


def test_no_definition_recommends_a_working_dir_upload() -> None:
    """cluster/README.md: `execute` refuses a plan copied away from its run root, so a
    `--working-dir` upload of it cannot work; no file in cluster/ may suggest one."""
    for path in sorted(CLUSTER.iterdir()):
        text = path.read_text()
        for line in text.splitlines():
            if "ray job submit" in line or "execute" in line:
                assert "--working-dir ." not in line, (path.name, line)
    readme = (CLUSTER / "README.md").read_text()
    assert "--working-dir" in readme and "does not work" in readme


def test_a_misspelt_podmonitor_field_is_refused(tmp_path: Path) -> None:
    (monitor,) = [d for d in _docs(CLUSTER / "raycluster.yaml") if d["kind"] == "PodMonitor"]
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    done = _check_jsonschema(CRD_SCHEMAS["PodMonitor"], monitor, tmp_path)
    assert done.returncode == 1 and "podMetricEndpoints" in done.stdout
