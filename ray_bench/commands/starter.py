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

#: The template is a working suite itself, named ``my-suite`` on docker; these are the texts that
#: :func:`write_starter` makes this directory's, by exact replacement (a template edited so that one
#: no longer matches fails its test, tests/commands/test_starter.py).
_TEMPLATE_NAME = "my-suite"
_TEMPLATE_PREFIX = "MY_SUITE_"
_TEMPLATE_BACKEND = ("backend: docker\nbackends:\n  docker:\n    max_sandboxes: 2\n"
                     "    resources: {cpus: 0.5, memory_mb: 256}\n")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def starter_dir() -> Path:
    return Path(str(resources.files("ray_bench") / "examples" / "starter"))


def suite_name(target: Path) -> str:
    """The suite's name: the directory's, when it is a valid suite name."""
    name = target.resolve().name
    return name if _NAME.match(name) else _TEMPLATE_NAME


def env_prefix(name: str) -> str:
    """The accounts' variable prefix: ``my-suite`` -> ``MY_SUITE``."""
    prefix = re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") or "SUITE"
    return prefix if not prefix[0].isdigit() else f"SUITE_{prefix}"


def _backends(backend: str) -> str:
    lines = [f"backend: {backend}", "backends:", f"  {backend}:", "    max_sandboxes: 2"]
    if capabilities(backend).local_images:  # a container on this host: small, bounded sandboxes
        lines.append("    resources: {cpus: 0.5, memory_mb: 256}")
    return "\n".join(lines) + "\n"


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:  # the template changed under this code
        raise RuntimeError(f"the starter template no longer holds {old!r}")
    return text.replace(old, new)


def write_starter(target: Path, backend: str = "docker") -> list[Path]:
    """Write the starter suite into ``target`` (new or empty); return the files written."""
    if backend not in BUILTIN:
        raise UserInputError(f"unknown backend {backend!r}", where="--backend",
                             fix=f"use one of {', '.join(sorted(BUILTIN))}")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserInputError("is not an empty directory", where=str(target),
                             fix="name a new or empty directory")
    name = suite_name(target)
    source = starter_dir()
    suite = _replace((source / "suite.yaml").read_text(), f"name: {_TEMPLATE_NAME}\n", f"name: {name}\n")
    suite = _replace(suite, _TEMPLATE_BACKEND, _backends(backend))
    suite = _replace(suite, f"{_TEMPLATE_NAME}/", f"{target}/")
    accounts = _replace((source / "accounts.yaml").read_text(), _TEMPLATE_PREFIX, f"{env_prefix(name)}_")
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "suite.yaml").write_text(suite)
    (target / "accounts.yaml").write_text(accounts)
    return sorted(p for p in target.rglob("*") if p.is_file())
