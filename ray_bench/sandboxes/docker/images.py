"""Task images: a build context is built once per content hash and tagged with it, so that
every attempt of a task (in this process or another) reuses one image."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import docker.errors

from ray_bench.errors import SandboxCreateError
from ray_bench.sandboxes.base import SandboxSpec

TASK_IMAGE_REPO = "ray-bench-task"

_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()


def context_hash(context_dir: Path) -> str:
    """sha256 of a build context: relative paths, executable bits and contents, in order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context_dir.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context_dir).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + str(path.readlink()).encode() + b"\0")
            continue
        digest.update(b"X" if path.stat().st_mode & 0o111 else b"F")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def task_image_tag(context_dir: Path) -> str:
    return f"{TASK_IMAGE_REPO}:{context_hash(context_dir)[:16]}"


def ensure_image(client: Any, spec: SandboxSpec) -> str:
    """The image ``spec`` runs: built from its ``dockerfile_dir``, or pulled when missing.
    Blocking."""
    if spec.dockerfile_dir is not None:
        return build_image(client, spec.dockerfile_dir)
    if spec.image is None:
        raise SandboxCreateError("the sandbox spec names neither an image nor a dockerfile_dir")
    try:
        client.api.inspect_image(spec.image)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(spec.image)
        except docker.errors.APIError as exc:
            raise SandboxCreateError(
                f"image {spec.image} is not present and pull failed: {exc}"
            ) from exc
    return spec.image


AGENT_IMAGE_REPO = "ray-bench-agent"
_LAYER_HASHES: dict[tuple[str, int, int], str] = {}


def layer_image(client: Any, base: str, layer_dir: Path) -> str:
    """``base`` with ``layer_dir`` laid over it (its Dockerfile takes ``BASE``), built once per
    (base image id, layer content); return its tag. Blocking."""
    stat = (layer_dir / "Dockerfile").stat()
    key = (str(layer_dir), stat.st_mtime_ns, stat.st_ino)
    layer_hash = _LAYER_HASHES.get(key)
    if layer_hash is None:
        layer_hash = _LAYER_HASHES[key] = context_hash(layer_dir)
    try:
        base_id = client.api.inspect_image(base)["Id"]
    except docker.errors.APIError as exc:
        raise SandboxCreateError(f"image {base} for the agent layer: {exc}") from exc
    tag = f"{AGENT_IMAGE_REPO}:{hashlib.sha256(f'{base_id}|{layer_hash}'.encode()).hexdigest()[:16]}"
    with _BUILD_LOCKS_GUARD:
        lock = _BUILD_LOCKS.setdefault(tag, threading.Lock())
    with lock:
        try:
            client.api.inspect_image(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.build(path=str(layer_dir), tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True,
                                labels={"ray-bench.agent-layer": layer_dir.name})
        except docker.errors.BuildError as exc:
            raise SandboxCreateError(
                f"laying {layer_dir.name} over {base} failed: {exc.msg}\n{_log_tail(exc.build_log)}") from exc
        except docker.errors.APIError as exc:
            raise SandboxCreateError(f"laying {layer_dir.name} over {base} failed: {exc}") from exc
    return tag


def build_image(client: Any, context_dir: Path) -> str:
    """Build ``context_dir`` once per content hash; return its tag. Blocking."""
    tag = task_image_tag(context_dir)
    with _BUILD_LOCKS_GUARD:
        lock = _BUILD_LOCKS.setdefault(tag, threading.Lock())
    with lock:
        try:
            client.api.inspect_image(tag)
            return tag  # built before, by this process or another one
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.build(path=str(context_dir), tag=tag, rm=True, forcerm=True)
        except docker.errors.BuildError as exc:
            raise SandboxCreateError(
                f"building {context_dir} failed: {exc.msg}\n{_log_tail(exc.build_log)}"
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxCreateError(f"building {context_dir} failed: {exc}") from exc
    return tag


def _log_tail(build_log: Iterable[Mapping[str, Any]], lines: int = 20) -> str:
    text: list[str] = []
    for entry in build_log:
        for key in ("stream", "error"):
            value = entry.get(key)
            if isinstance(value, str):
                text += value.rstrip("\n").splitlines()
    return "\n".join(text[-lines:])
