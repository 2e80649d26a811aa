"""How a CLI gets into a container: a layer over the task's image, built once per content hash.

With no registry reachable from the sandbox host, the layer copies the CLI this node has
installed (npm's ``node_modules/.bin``, ``$RAY_BENCH_AGENT_CLIS`` or ``PATH``) into
``/opt/ray-bench-agent``: the native binary, and for a glibc binary the shared libraries it was
linked against, installed only where the image has no C library of its own (a busybox or
Alpine task image). ``claude-code`` (a native glibc binary) and ``codex`` (a static musl binary)
are laid this way. ``gemini-cli`` is a Node program (a bundle with no required dependencies):
its package directory is laid with the node binary this node runs (and its libraries, as
above), and ``bin/gemini`` runs the package's entry with that node, whatever the image has
(measured: Gemini CLI 0.61.0 on node 20 in the busybox image; 96 MB of package, 99 MB of node).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from ray_bench.agents import adapter

MOUNT = "/opt/ray-bench-agent"
DOCKERFILE = f"""ARG BASE
FROM ${{BASE}}
COPY . {MOUNT}/
RUN sh {MOUNT}/install.sh
ENV PATH={MOUNT}/bin:$PATH
"""
INSTALL = f"""set -e
A={MOUNT}
if [ -d "$A/lib" ] && [ ! -e /lib64/ld-linux-x86-64.so.2 ]; then
    mkdir -p /lib64 /lib/x86_64-linux-gnu
    for f in "$A"/lib/*; do
        [ -e "/lib/x86_64-linux-gnu/${{f##*/}}" ] || cp "$f" /lib/x86_64-linux-gnu/
    done
    ln -sf /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
fi
"""
#: The native binary inside each package, relative to node_modules (when .bin holds a wrapper).
_NATIVE = {"codex": "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"}
_LOCK = threading.Lock()
_MADE: dict[tuple[str, str], Path] = {}


@dataclass(frozen=True)
class HostCli:
    """What the layer carries of ``agent``'s CLI: a native executable, or for a Node program
    the node executable beside its package directory and its entry script in it."""

    executable: Path
    package: Path | None = None
    entry: Path | None = None


def host_cli(agent: str) -> HostCli | None:
    """``agent``'s CLI on this node, as the layer lays it, or None."""
    native = host_binary(agent)
    if native is not None:
        return HostCli(native)
    entry = find_cli(agent)
    if entry is None or adapter(agent).binary in _NATIVE or not _is_node_script(entry):
        return None  # a package whose Node wrapper starts a native binary is laid by that binary
    package = next((p for p in entry.parents if (p / "package.json").is_file()), None)
    node = shutil.which("node")
    if package is None or node is None or not _is_elf(Path(node).resolve()):
        return None
    return HostCli(Path(node).resolve(), package, entry)


def host_binary(agent: str) -> Path | None:
    """The native executable of ``agent``'s CLI on this node, or None."""
    binary = adapter(agent).binary
    found = find_cli(agent)
    if found is None:
        return None
    real = found.resolve()
    if binary in _NATIVE:
        modules = next((p for p in real.parents if p.name == "node_modules"), None)
        native = modules / _NATIVE[binary] if modules is not None else None
        return native if native is not None and native.is_file() else None
    return real if _is_elf(real) else None


def find_cli(agent: str) -> Path | None:
    """Where ``agent``'s CLI is installed on this node (resolved), or None."""
    binary = adapter(agent).binary
    if not binary:
        return None
    places = [os.environ.get("RAY_BENCH_AGENT_CLIS", ""), "/var/cache/ray-bench/agent-clis/node_modules/.bin"]
    found = next((Path(p) / binary for p in places if p and (Path(p) / binary).exists()), None)
    if found is None:
        which = shutil.which(binary)
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def prepare_layer(agent: str, cache: Path | None = None) -> Path | None:
    """The build context of ``agent``'s layer on this node (made once per binary version), or
    None when this node has no usable CLI to lay (the attempt then fails ``cli_missing``)."""
    cli = host_cli(agent)
    if cli is None:
        return None
    marks = [cli.executable] + ([cli.entry, cli.package / "package.json"] if cli.package and cli.entry else [])
    key = hashlib.sha256("|".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in marks).encode()
                         ).hexdigest()[:16]
    with _LOCK:
        made = _MADE.get((agent, key))
        if made is not None and made.is_dir():
            return made
        root = (cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ray-bench" /
                "agent-layers") / f"{agent}-{key}"
        if not (root / "Dockerfile").is_file():
            tmp = root.with_name(root.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "bin").mkdir(parents=True)
            name = adapter(agent).binary
            if cli.package is not None and cli.entry is not None:
                _link_or_copy(cli.executable, tmp / "bin" / "node")
                shutil.copytree(cli.package, tmp / "pkg", copy_function=_link_or_copy, symlinks=True)
                wrapper = tmp / "bin" / name
                script = f"{MOUNT}/pkg/{cli.entry.relative_to(cli.package)}"
                wrapper.write_text(f'#!/bin/sh\nexec {MOUNT}/bin/node {script} "$@"\n')
                wrapper.chmod(0o755)
            else:
                _link_or_copy(cli.executable, tmp / "bin" / name)
            libs = shared_libraries(cli.executable)
            if libs:
                (tmp / "lib").mkdir()
                for lib in libs:  # under the soname asked for, the file it names (libstdc++.so.6: a link)
                    _link_or_copy(lib.resolve(), tmp / "lib" / lib.name)
            (tmp / "install.sh").write_text(INSTALL)
            (tmp / "Dockerfile").write_text(DOCKERFILE)
            shutil.rmtree(root, ignore_errors=True)
            os.replace(tmp, root)
        _MADE[(agent, key)] = root
        return root


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


def _is_node_script(path: Path) -> bool:
    with open(path, "rb") as handle:
        first = handle.readline(200)
    return first.startswith(b"#!") and b"node" in first


def shared_libraries(binary: Path) -> list[Path]:
    """What ``ldd`` says a dynamic binary loads (none for a static one)."""
    try:
        out = subprocess.run(["ldd", str(binary)], check=False, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    libs: list[Path] = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts and parts[0].startswith("/") else ""
        if path.startswith("/") and Path(path).is_file():
            libs.append(Path(path).resolve())
            if Path(path).name != Path(path).resolve().name:  # keep the soname the binary asks for
                libs[-1] = Path(path)
    return libs


def _link_or_copy(src: Path | str, dst: Path | str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
