"""Sandboxes behind one small interface, registered by backend name."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ray_bench.sandboxes.base import (
    LABEL_ATTEMPT,
    LABEL_CELL,
    LABEL_MANAGED,
    LABEL_RUN,
    ExecResult,
    Resources,
    Sandbox,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
    run_labels,
)

_FACTORIES: dict[str, Callable[..., SandboxBackend]] = {}


def register(name: str, factory: Callable[..., SandboxBackend]) -> None:
    _FACTORIES[name] = factory


def backend_names() -> list[str]:
    _load_builtin()
    return sorted(_FACTORIES)


def make_backend(name: str, **options: Any) -> SandboxBackend:
    """Build the backend registered as ``name`` with its config ``options``."""
    _load_builtin()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown sandbox backend {name!r}; known: {', '.join(sorted(_FACTORIES))}") from None
    return factory(**options)


def _load_builtin() -> None:
    if "local" in _FACTORIES:
        return
    from ray_bench.sandboxes.local import LocalBackend

    register("local", LocalBackend)
    with contextlib.suppress(ImportError):  # the docker backend registers itself at import
        import ray_bench.sandboxes.docker
    with contextlib.suppress(ImportError):  # the daytona backend needs the optional extra
        import ray_bench.sandboxes.daytona  # noqa: F401


__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_CELL",
    "LABEL_MANAGED",
    "LABEL_RUN",
    "ExecResult",
    "Resources",
    "Sandbox",
    "SandboxBackend",
    "SandboxRef",
    "SandboxSpec",
    "backend_names",
    "make_backend",
    "register",
    "run_labels",
]
