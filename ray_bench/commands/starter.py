"""`ray-bench init DIR`: a suite to start from that plans and runs as written, offline.

The files are the bundled template ``ray_bench/examples/starter/`` (a suite with a paired
``baseline``/``variant``, an accounts file with env routes, a scripted stand-in agent and one task in
Harbor's format whose image is ``FROM`` the registry-free base image); the suite's name and the
accounts' variable names come from the directory's name, so two suites made side by side do not
share variables by accident. Harbor's ``harbor init`` is the peer this follows: a task that runs
as written.
"""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path

from ray_bench.errors import UserInputError
from ray_bench.sandboxes.capabilities import BUILTIN, capabilities

#: The files holding ``str.format`` fields, filled in by :func:`write_starter`.
_TEMPLATED = ("suite.yaml", "accounts.yaml")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def starter_dir() -> Path:
    return Path(str(resources.files("ray_bench") / "examples" / "starter"))


def suite_name(target: Path) -> str:
    """The suite's name: the directory's, when it is a valid suite name."""
    name = target.resolve().name
    return name if _NAME.match(name) else "my-suite"


def env_prefix(name: str) -> str:
    """The accounts' variable prefix: ``my-suite`` -> ``MY_SUITE``."""
    prefix = re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") or "SUITE"
    return prefix if not prefix[0].isdigit() else f"SUITE_{prefix}"


def _backends(backend: str) -> str:
    lines = [f"  {backend}:", "    max_sandboxes: 2"]
    if capabilities(backend).local_images:  # a container on this host: small, bounded sandboxes
        lines.append("    resources: {cpus: 0.5, memory_mb: 256}")
    return "\n".join(lines)


def write_starter(target: Path, backend: str = "docker") -> list[Path]:
    """Write the starter suite into ``target`` (new or empty); return the files written."""
    if backend not in BUILTIN:
        raise UserInputError(f"unknown backend {backend!r}", where="--backend",
                             fix=f"use one of {', '.join(sorted(BUILTIN))}")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserInputError("is not an empty directory", where=str(target),
                             fix="name a new or empty directory")
    name = suite_name(target)
    fields = {"name": name, "prefix": env_prefix(name), "backend": backend, "backends": _backends(backend),
              "dir": str(target)}
    source = starter_dir()
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for templated in _TEMPLATED:
        path = target / templated
        path.write_text((source / templated).read_text().format(**fields))
    return sorted(p for p in target.rglob("*") if p.is_file())
