"""Base images for tests and benchmarks: the library's busybox image (no registry is reachable),
and a tmux-capable image over it for Harbor's Terminus 2, which drives a tmux session in the
sandbox (``bash --login`` in its pane, ``TERM=xterm-256color``).

The tmux image lays this host's ``tmux`` and ``bash`` with the glibc libraries they load, the
terminfo entries a pane uses and glibc's C.UTF-8 locale (tmux refuses to start without one) over
the busybox base, as ray-bench's CLI layer lays a CLI (``ray_bench/agents/layer.py``): no package
mirror is needed, and its tag is the hash of every byte laid (and of the base image's id), so a
second run, or a second session, reuses it. ``.ci/run`` installs tmux where a host lacks it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ray_bench.agents.layer import shared_libraries
from ray_bench.sandboxes.images import (
    BASE_IMAGE,
    build_base_image,
    busybox_path,
    busybox_rootfs_tar,
    image_exists,
    write_task_environment,
)

__all__ = ["BASE_IMAGE", "TMUX_REPOSITORY", "build_base_image", "build_tmux_image", "busybox_path",
           "busybox_rootfs_tar", "image_exists", "images_built_one_at_a_time", "tmux_image_files",
           "write_task_environment"]

TMUX_REPOSITORY = "ray-bench-tmux"
#: The programs a Terminus 2 pane needs beyond busybox (which has no bash).
_PROGRAMS = ("tmux", "bash")
#: Terminal descriptions: the client's TERM (xterm-256color), tmux's pane TERM (screen /
#: tmux-256color) and the fall-backs, wherever this host's ncurses keeps them.
_TERMINFO = ("x/xterm", "x/xterm-256color", "s/screen", "s/screen-256color", "t/tmux", "t/tmux-256color", "d/dumb")
_TERMINFO_DIRS = ("/lib/terminfo", "/usr/share/terminfo", "/etc/terminfo")
#: tmux refuses to start without a UTF-8 LC_CTYPE; glibc's C.UTF-8 is files, not built in.
_LOCALE = "/usr/lib/locale/C.utf8"
_LIB = "lib/x86_64-linux-gnu"
_LOADER = "ld-linux-x86-64.so.2"
_DOCKERFILE = """ARG BASE
FROM ${BASE}
COPY root/ /
RUN ln -sf /usr/bin/bash /bin/bash
ENV PATH=/usr/local/bin:/usr/bin:/bin TERMINFO_DIRS=/usr/share/terminfo LANG=C.UTF-8
"""


@contextlib.contextmanager
def images_built_one_at_a_time() -> Iterator[None]:
    """Hold the machine's lock on building the test images. The test processes of one run (two
    xdist workers, the harbor pass beside them) build them at their first use: without it two
    imported the base image at once, the second import moved its tag to a new image id, and the
    tmux tag, a hash over that id, then differed between one process's two builds."""
    with (Path(tempfile.gettempdir()) / "ray-bench-test-images.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def tmux_image_files() -> dict[str, Path]:
    """Where each file of the tmux layer comes from on this host: image path -> host path.
    Raises RuntimeError naming what this host lacks (``apt-get install tmux``)."""
    files: dict[str, Path] = {}
    for program in _PROGRAMS:
        found = shutil.which(program)
        if found is None:
            raise RuntimeError(f"{program} not found on this host: apt-get install {program}")
        real = Path(found).resolve()
        files[f"usr/bin/{program}"] = real
        for lib in shared_libraries(real):
            files[f"{_LIB}/{lib.name}"] = lib.resolve()
    loader = files.get(f"{_LIB}/{_LOADER}")
    if loader is None:
        raise RuntimeError(f"tmux on this host is not linked against glibc's {_LOADER}")
    files[f"lib64/{_LOADER}"] = loader
    for entry in _TERMINFO:
        source = next((Path(d) / entry for d in _TERMINFO_DIRS if (Path(d) / entry).is_file()), None)
        if source is not None:
            files[f"usr/share/terminfo/{entry}"] = source.resolve()
    locale = Path(_LOCALE)
    if not (locale / "LC_CTYPE").is_file():
        raise RuntimeError(f"no C.UTF-8 locale at {_LOCALE} on this host (tmux needs one): apt-get install libc-bin")
    for item in sorted(p for p in locale.rglob("*") if p.is_file()):
        files[str(item.relative_to("/"))] = item.resolve()
    if "usr/share/terminfo/x/xterm-256color" not in files:
        raise RuntimeError("no terminfo entry for xterm-256color on this host: apt-get install ncurses-base")
    return files


def build_tmux_image(client: Any, base: str = BASE_IMAGE) -> str:
    """``ray-bench-tmux:<content hash>`` built FROM ``base`` once; later calls reuse it."""
    files = tmux_image_files()
    digest = hashlib.sha256(_DOCKERFILE.encode())
    digest.update(client.api.inspect_image(base)["Id"].encode())
    for target in sorted(files):
        digest.update(target.encode() + b"\0" + files[target].read_bytes())
    tag = f"{TMUX_REPOSITORY}:{digest.hexdigest()[:16]}"
    if image_exists(client, tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="ray-bench-tmux-") as context:
        root = Path(context) / "root"
        for target, source in files.items():
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / target)
        (Path(context) / "Dockerfile").write_text(_DOCKERFILE)
        client.images.build(path=context, tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True)
    return tag
