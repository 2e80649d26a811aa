"""Sandboxes behind one small interface, registered by backend name."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from ray_bench.sandboxes.base import (
    LABEL_ATTEMPT,
    LABEL_CELL,
    LABEL_MANAGED,
    LABEL_RUN,
    ExecResult,
    ExecWatch,
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


#: Built-in backends and the module that registers each; imported on first use, so a runner
#: that only runs local cells never pays for the Daytona SDK's import (~1 s of CPU).
_BUILTIN = {"local": "ray_bench.sandboxes.local", "docker": "ray_bench.sandboxes.docker",
            "daytona": "ray_bench.sandboxes.daytona"}


def backend_names() -> list[str]:
    for name in _BUILTIN:
        _load(name)
    return sorted(_FACTORIES)


#: The third-party SDK each built-in backend's module needs (its optional extra).
_SDKS = {"docker": "docker", "daytona": "daytona"}


def backend_available(name: str) -> bool:
    """Whether ``name`` can be built here. A built-in backend whose SDK is installed is, without
    importing either: ``plan`` asks this of the backends a suite names, and the Daytona SDK's
    import costs ~2 s of CPU that only the nodes creating sandboxes need."""
    if name in _FACTORIES:
        return True
    if name in _SDKS:
        return importlib.util.find_spec(_SDKS[name]) is not None
    _load(name)
    return name in _FACTORIES


def make_backend(name: str, **options: Any) -> SandboxBackend:
    """Build the backend registered as ``name`` with its config ``options``."""
    _load(name)
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown sandbox backend {name!r}; known: {', '.join(backend_names())}") from None
    return factory(**options)


def _load(name: str) -> None:
    if name in _FACTORIES or name not in _BUILTIN:
        return
    if name == "local":
        from ray_bench.sandboxes.local import LocalBackend

        register("local", LocalBackend)
        return
    with contextlib.suppress(ImportError):  # docker and daytona register themselves at import;
        importlib.import_module(_BUILTIN[name])  # daytona needs the optional extra


__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_CELL",
    "LABEL_MANAGED",
    "LABEL_RUN",
    "ExecResult",
    "ExecWatch",
    "Resources",
    "Sandbox",
    "SandboxBackend",
    "SandboxRef",
    "SandboxSpec",
    "backend_available",
    "backend_names",
    "make_backend",
    "register",
    "run_labels",
]
