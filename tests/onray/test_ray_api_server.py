"""A local start skips Ray's API server (the dashboard head that ``ray.init`` waits for even
with ``include_dashboard=False``) unless a dashboard is asked for or the operator turns the
skip off; Ray's own method is back once the start is over."""

from __future__ import annotations

from typing import Any

import pytest
from ray._private.node import Node

from ray_bench.onray.agent_ports import API_SERVER, api_server_not_started


class _Started(Exception):
    pass


def _ray_start(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
    raise _Started(include_dashboard)


@pytest.fixture
def ray_start_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Node, "start_api_server", _ray_start)
    monkeypatch.delenv(API_SERVER, raising=False)


@pytest.mark.usefixtures("ray_start_is_recorded")
def test_no_api_server_when_the_dashboard_is_off_and_rays_method_is_back_after() -> None:
    with api_server_not_started() as patched:
        assert patched
        Node.start_api_server(object(), include_dashboard=False, raise_on_failure=False)  # type: ignore[arg-type]
        with pytest.raises(_Started):  # a dashboard asked for (or Ray's default): Ray's start
            Node.start_api_server(object(), include_dashboard=None, raise_on_failure=False)  # type: ignore[arg-type]
    assert Node.start_api_server is _ray_start


@pytest.mark.usefixtures("ray_start_is_recorded")
def test_the_operator_can_have_rays_api_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_SERVER, "1")
    with api_server_not_started() as patched:
        assert not patched
        with pytest.raises(_Started):
            Node.start_api_server(object(), include_dashboard=False, raise_on_failure=False)  # type: ignore[arg-type]
