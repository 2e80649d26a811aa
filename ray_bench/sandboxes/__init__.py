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
from ray_bench.sandboxes.capabilities import BUILTIN

_FACTORIES: dict[str, Callable[..., SandboxBackend]] = {}


def register(name: str, factory: Callable[..., SandboxBackend]) -> None:
    _FACTORIES[name] = factory


def backend_names() -> list[str]:
    for name in BUILTIN:
        _load(name)
    return sorted(_FACTORIES)


def backend_available(name: str) -> bool:
    """Whether ``name`` can be built here. A built-in backend whose SDK is installed is, without
    importing either: ``plan`` asks this of the backends a suite names, and the Daytona SDK's
    import costs ~2 s of CPU that only the nodes creating sandboxes need."""
    if name in _FACTORIES:
        return True
    sdk = BUILTIN[name].sdk if name in BUILTIN else None
    if sdk is not None:
        return importlib.util.find_spec(sdk) is not None
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
    if name in _FACTORIES or name not in BUILTIN:
        return
    with contextlib.suppress(ImportError):  # each registers itself at import; those with an
        importlib.import_module(BUILTIN[name].module)  # SDK need their optional extra


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
