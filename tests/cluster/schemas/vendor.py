"""Make the JSON Schemas of KubeRay's RayCluster and RayJob from KubeRay's own CRDs.

    python tests/cluster/schemas/vendor.py KUBERAY_CHECKOUT

reads ``ray-operator/config/crd/bases/ray.io_{rayclusters,rayjobs}.yaml`` of a KubeRay checkout
and writes ``raycluster.schema.json`` and ``rayjob.schema.json`` beside this file: the ``v1``
version's ``openAPIV3Schema``, with ``apiVersion`` and ``kind`` pinned, descriptions dropped
(they are 90% of the bytes), and every object that lists its properties and neither allows
more nor preserves unknown fields closed with ``additionalProperties: false`` -- what the API
server's strict field validation (``kubectl apply --validate=strict``) refuses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

KINDS = {"raycluster": "rayclusters", "rayjob": "rayjobs"}


def strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items() if k != "description"}
        if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def main(checkout: Path) -> None:
    for name, plural in KINDS.items():
        crd = yaml.safe_load((checkout / f"ray-operator/config/crd/bases/ray.io_{plural}.yaml").read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schema = strict(version["schema"]["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"const": "ray.io/v1"}
        schema["properties"]["kind"] = {"const": crd["spec"]["names"]["kind"]}
        schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "spec"})
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        schema["$comment"] = f"KubeRay {plural} CRD v1 (tests/cluster/schemas/vendor.py)"
        out = Path(__file__).with_name(f"{name}.schema.json")
        out.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"{out}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
