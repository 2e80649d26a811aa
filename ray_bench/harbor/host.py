"""What Terminus 2 needs where its sandbox's commands run on the host (``local``): tmux, and
asciinema for its terminal recording. Harbor installs either when missing with the package
manager of the machine the commands run on, which on ``local`` is the host's own (``apt-get
install``, as the runner's user: root on a CI machine). ray-bench never lets it: a missing tmux
is the attempt's ``cli_missing`` failure, and the recording is on only where the arm asked for it
and the pane's login shell has asciinema (off by default: a recording of a host shell is rarely wanted).
Harbor-free."""

from __future__ import annotations

from typing import Any

from ray_bench.errors import HostToolMissingError
from ray_bench.sandboxes.base import Sandbox

#: Which of the tools there are, one name a line: tmux as Harbor runs it (a command), asciinema
#: as its pane runs it (typed into ``bash --login``, whose profile sets its own PATH).
_CHECK = ("command -v tmux >/dev/null 2>&1 && echo tmux; "
          "bash --login -c 'command -v asciinema' >/dev/null 2>&1 </dev/null && echo asciinema; exit 0")


async def host_options(sandbox: Sandbox, env: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
    """Terminus 2's options on a host backend: ``record_terminal_session`` true only where asked
    and the pane's shell has asciinema. Raises HostToolMissingError when the host has no tmux."""
    found = await sandbox.exec(_CHECK, timeout=30, env=env)
    tools = set(found.stdout.split())
    if "tmux" not in tools:
        raise HostToolMissingError(
            "terminus-2 drives a tmux session and the local backend runs it on this host, which has no "
            "tmux on its PATH (apt-get install tmux); ray-bench does not let Harbor install it on the host")
    return {**options, "record_terminal_session": bool(options.get("record_terminal_session")) and "asciinema" in tools}
