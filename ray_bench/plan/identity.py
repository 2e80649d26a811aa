"""Canonical JSON and identities (plan, cells)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def identity_of(obj: Any) -> str:
    return identity_of_canonical(canonical_bytes(obj))


def identity_of_canonical(canonical: bytes) -> str:
    """The identity of an object whose :func:`canonical_bytes` are ``canonical``."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def cell_id(task_id: str, task_checksum: str, arm_config: dict[str, Any] | bytes, rep: int) -> str:
    """A cell's id: the task's content checksum, the arm's resolved config and the repetition.
    The task id is included so two tasks with identical content stay distinct; no path or
    timestamp ever enters it. ``arm_config`` may be passed as its canonical bytes, which a
    caller computing many cells serialises once per arm (half of a 100,000-cell compile was
    re-serialising the same dict)."""
    arm_bytes = arm_config if isinstance(arm_config, bytes) else canonical_bytes(arm_config)
    h = hashlib.sha256(b"ray-bench/cell/v1\0")
    h.update(task_id.encode() + b"\0" + task_checksum.encode() + b"\0")
    h.update(arm_bytes + b"\0" + str(rep).encode())
    return h.hexdigest()[:20]


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
