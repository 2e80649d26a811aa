"""A local busybox base image, for machines that reach no registry (CI runners, air-gapped
hosts): the quickstart's docker mode, the tests and the benchmarks use it.

The base image is Debian's static busybox imported as a one-layer rootfs
(``docker import``), with a symlink per applet. Task images are built ``FROM`` it.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import docker.errors

from ray_bench.errors import HostToolMissingError

BASE_IMAGE = "ray-bench-base:busybox"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")


def busybox_path() -> Path | None:
    found = shutil.which("busybox")
    for candidate in (found, *BUSYBOX_CANDIDATES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _applets(busybox: Path) -> list[str]:
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    return sorted({name for name in listed.stdout.split() if "/" not in name and name != "busybox"})


def busybox_rootfs_tar(busybox: Path) -> bytes:
    """A rootfs tarball: /bin/busybox, /bin/<applet> links, /usr/bin/env, /tmp, /etc/passwd."""
    buf = io.BytesIO()
    now = int(time.time())

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, now
        tar.addfile(info, io.BytesIO(data))

    def add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, now
        tar.addfile(info)

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "usr", "usr/bin", "etc", "root", "app", "logs", "proc", "sys", "dev"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        add_file(tar, "bin/busybox", busybox.read_bytes(), 0o755)
        for applet in _applets(busybox):
            add_link(tar, f"bin/{applet}", "busybox")
        add_link(tar, "usr/bin/env", "../../bin/busybox")
        add_file(
            tar,
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
        )
        add_file(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return buf.getvalue()


def image_exists(client: Any, tag: str) -> bool:
    try:
        client.api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_base_image(client: Any, tag: str = BASE_IMAGE, *, rebuild: bool = False) -> str:
    """Import the busybox base image once; later calls (and test runs) reuse it."""
    if not rebuild and image_exists(client, tag):
        return tag
    busybox = busybox_path()
    if busybox is None:
        raise HostToolMissingError("busybox not found on this machine: apt-get install busybox-static "
                                   "(or put a static busybox on PATH)")
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(
        busybox_rootfs_tar(busybox),
        repository=repository,
        tag=version or "latest",
        changes=["ENV PATH=/bin:/usr/bin", 'CMD ["sh"]'],
    )
    return tag


def write_task_environment(dest: Path, *, base: str = BASE_IMAGE, run: str | None = None) -> Path:
    """Write a minimal ``environment/`` build context ``FROM`` the base image."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = [f"FROM {base}", "WORKDIR /app"]
    if run:
        lines.append(f"RUN {run}")
    (dest / "Dockerfile").write_text("\n".join(lines) + "\n")
    return dest
