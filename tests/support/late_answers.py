"""A loaded host, as the Docker SDK in this process meets it: every HTTP answer read late.

Under load the client thread is scheduled late, and the daemon has sent more than the answer's
headers by the time they are read (a ``docker exec``'s first output frames, behind the upgrade's
headers). Delaying the read of each answer reproduces that at will. Only ``http.client`` users
are slowed (docker-py, through requests); aiohttp, which the Daytona SDK uses, is not."""

from __future__ import annotations

import contextlib
import http.client
import time
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def answers_read_late(monkeypatch: pytest.MonkeyPatch, delay_sec: float = 0.5) -> Iterator[None]:
    begin = http.client.HTTPResponse.begin

    def late(response: http.client.HTTPResponse) -> None:
        time.sleep(delay_sec)
        begin(response)

    with monkeypatch.context() as patched:
        patched.setattr(http.client.HTTPResponse, "begin", late)
        yield
