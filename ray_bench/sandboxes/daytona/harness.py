"""The harness's fixed directories in a sandbox whose commands do not run as root.

Daytona's runner starts the sandbox's container as its image's USER (it sets no ``User``:
``apps/runner/pkg/docker/container_configs.go``) and the daemon, whose toolbox runs every
command and writes every uploaded file, starts in the image's WORKDIR, else that user's HOME
(``DAYTONA_USER_HOME_AS_WORKDIR``, ``apps/daemon/cmd/daemon/main.go``). There is no root route:
a sandbox of an image with ``USER 1234`` cannot make ``/logs`` by itself. So, with no path
moved (DESIGN, fourth round: sandboxes start where the image says):

- an image ray-bench creates or snapshots gets the directories laid over it by a throwaway
  build stage that runs as root, copied in root-owned and world-writable with the sticky bit
  (``/tmp``'s mode): the final image keeps its USER, WORKDIR, ENTRYPOINT and all
  (:func:`harness_image`);
- a task's Dockerfile gets them by a ``RUN`` as root, then its own last ``USER`` again, when
  its final stage names one (else it runs as its base image's user, root for most);
- at start, a non-root sandbox makes what is still missing itself, or through ``sudo -n``
  (Daytona's default snapshot runs as ``daytona`` with passwordless sudo:
  ``images/sandbox/Dockerfile``), else the sandbox is refused with the directories it lacks
  (:data:`PREPARE`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from daytona import Image

from ray_bench.sandboxes.base import HARNESS_DIRS

#: ``/tmp``'s mode: anyone writes, only an owner removes.
_MODE = "1777"
_STAGE = "rb-harness-dirs"
_MAKE = (f"mkdir -p {' '.join('/rb' + d for d in HARNESS_DIRS)} && "
         f"chmod -R {_MODE} /rb && chmod 755 /rb")

# $1 the sandbox's uid, then the directories: each that is missing or not writable is made by
# the user, else with `sudo -n` and given to the user; those left are printed after RB-CANNOT.
PREPARE = r"""u=$1; shift; left=
for d in "$@"; do
  [ -d "$d" ] && [ -w "$d" ] && continue
  mkdir -p "$d" 2>/dev/null && [ -w "$d" ] && continue
  command -v sudo >/dev/null 2>&1 && sudo -n sh -c 'mkdir -p "$1" && chown "$2" "$1"' rb "$d" "$u" 2>/dev/null &&
    [ -w "$d" ] && continue
  left="$left $d"
done
[ -z "$left" ] || { echo "RB-CANNOT$left"; exit 1; }"""


def harness_image(image: str | None, dockerfile: Path | None) -> Image:
    """The SDK image to build for ``image`` (a name) or ``dockerfile``, with :data:`HARNESS_DIRS`."""
    if image is not None:
        # A stage of the same image as root makes the directories; the final stage is the image
        # itself (its USER, WORKDIR and ENTRYPOINT) with them copied in, root-owned.
        return Image.base(image).dockerfile_commands([
            f"FROM {image} AS {_STAGE}", "USER root", f"RUN {_MAKE}",
            f"FROM {image}", f"COPY --from={_STAGE} /rb/ /"])
    path = Path(dockerfile or ".") / "Dockerfile"
    built = Image.from_dockerfile(str(path))
    user = final_user(path.read_text(errors="replace"))
    if user is None:
        return built
    made = " ".join(shlex.quote(d) for d in HARNESS_DIRS)
    return built.dockerfile_commands([
        "USER root", f"RUN mkdir -p {made} && chmod {_MODE} {made}", f"USER {user}"])


_INSTRUCTION = re.compile(r"^\s*(FROM|USER)\s+(\S+)", re.IGNORECASE | re.MULTILINE)


def final_user(dockerfile: str) -> str | None:
    """The ``USER`` the final stage of ``dockerfile`` last names, if any."""
    user = None
    for keyword, value in _INSTRUCTION.findall(dockerfile.replace("\\\n", " ")):
        user = None if keyword.upper() == "FROM" else value
    return user
