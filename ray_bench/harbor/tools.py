"""What Terminus 2 needs in its sandbox: tmux, and asciinema for its terminal recording. Harbor
installs either when missing with the package manager of the machine the commands run on, which
on ``local`` is the host's own (``apt-get install``, as the runner's user: root on a CI machine),
and in an offline sandbox cannot work (Harbor then spends up to 240 s of execs failing to).
ray-bench checks first, with one command:

- on ``local`` Harbor's installer never runs: a missing tmux is the attempt's ``cli_missing``,
  and the recording is on only where the arm asked for it (``record_terminal_session: true``)
  and the pane's login shell has asciinema (off by default: a host shell is rarely to record);
- in a container, Harbor installs what is missing when the sandbox is online; offline, a missing
  tmux is ``cli_missing`` and the recording is off where asciinema is missing (measured:
  4.7 s of a docker cell spent on the installer's search, tests/perf/bench_harbor.py).

Harbor-free."""

from __future__ import annotations

from typing import Any

from ray_bench.errors import HostToolMissingError
from ray_bench.sandboxes.base import Sandbox

#: Which of the tools there are, one name a line: tmux as Harbor runs it (a command), asciinema
#: as its pane runs it (typed into ``bash --login``, whose profile sets its own PATH).
_CHECK = ("command -v tmux >/dev/null 2>&1 && echo tmux; "
          "bash --login -c 'command -v asciinema' >/dev/null 2>&1 </dev/null && echo asciinema; exit 0")


async def terminus_options(sandbox: Sandbox, env: dict[str, str], options: dict[str, Any], *,
                           online: bool) -> dict[str, Any]:
    """Terminus 2's options with ``record_terminal_session`` set to what can work in this
    sandbox. Raises HostToolMissingError where tmux is missing and cannot be installed."""
    if not sandbox.on_host and online:
        return options  # Harbor's own installer can reach the image's package mirror
    found = await sandbox.exec(_CHECK, timeout=60, env=env)
    tools = set(found.stdout.split())
    if "tmux" not in tools:
        where = ("the local backend runs it on this host, which has no tmux on its PATH (apt-get install tmux); "
                 "ray-bench does not let Harbor install it on the host" if sandbox.on_host else
                 "the image has none and the sandbox is offline, so Harbor cannot install it: "
                 "use an image with tmux and bash")
        raise HostToolMissingError(f"terminus-2 drives a tmux session and {where}")
    asked = options.get("record_terminal_session", not sandbox.on_host)  # Harbor's default is on
    return {**options, "record_terminal_session": bool(asked) and "asciinema" in tools}
