"""Canonical JSON and identities (plan, cells)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def identity_of(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(obj)).hexdigest()


def cell_id(task_id: str, task_checksum: str, arm_config: dict[str, Any], rep: int) -> str:
    """A cell's id: the task's content checksum, the arm's resolved config and the repetition.
    The task id is included so two tasks with identical content stay distinct; no path or
    timestamp ever enters it."""
    h = hashlib.sha256(b"ray-bench/cell/v1\0")
    h.update(task_id.encode() + b"\0" + task_checksum.encode() + b"\0")
    h.update(canonical_bytes(arm_config) + b"\0" + str(rep).encode())
    return h.hexdigest()[:20]


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
