"""The tmux image Terminus 2's docker tests run in: built once per content hash over the busybox
base, and a tmux session in it runs a command typed into its bash pane, as Terminus 2 drives it."""

from __future__ import annotations

from typing import Any

import pytest
from support.images import TMUX_REPOSITORY, build_tmux_image, tmux_image_files

pytestmark = pytest.mark.docker

#: Terminus 2's own session start (harbor/agents/terminus_2/tmux_session.py), a command typed
#: with its completion marker, and the pane read back.
_SESSION = ("export TERM=xterm-256color && export SHELL=/bin/bash && "
            "tmux new-session -x 160 -y 40 -d -s terminus-2 'bash --login' && "
            "tmux send-keys -t terminus-2 -- 'echo $((6*7)) > /tmp/out; tmux wait -S done' Enter && "
            "tmux wait done && cat /tmp/out && tmux capture-pane -p -t terminus-2 && tmux kill-server")


def test_the_tmux_image_is_reused_by_content_hash_and_its_pane_runs_bash(docker_client: Any, base_image: str,
                                                                         tmux_image: str) -> None:
    assert tmux_image.startswith(f"{TMUX_REPOSITORY}:")
    built = docker_client.api.inspect_image(tmux_image)["Id"]
    assert build_tmux_image(docker_client, base_image) == tmux_image  # a second build is the same image
    assert docker_client.api.inspect_image(tmux_image)["Id"] == built
    assert "usr/bin/tmux" in tmux_image_files() and "usr/bin/bash" in tmux_image_files()
    out = docker_client.containers.run(tmux_image, ["sh", "-c", _SESSION], remove=True).decode()
    lines = out.splitlines()
    assert lines[0] == "42", out
    assert any(line.startswith("bash-") and "echo $((6*7))" in line for line in lines), out
