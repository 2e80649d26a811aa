"""Shared fixtures. Services: under ``CI=true`` a missing one fails the test; elsewhere it skips
with the reason, so a laptop without dockerd still runs the rest."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import docker
import pytest
from support.images import build_base_image, build_tmux_image, images_built_one_at_a_time
from support.services import require_service

from ray_bench.errors import HostToolMissingError


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # any failure here means "no usable daemon"
        require_service("docker", False, f"{type(exc).__name__}: {exc}")
        raise  # unreachable: require_service skips or fails
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """``ray-bench-base:busybox``, imported once per test run (reused when present)."""
    try:
        with images_built_one_at_a_time():
            return build_base_image(docker_client)
    except HostToolMissingError as exc:
        require_service("busybox", False, str(exc))
        raise


@pytest.fixture(scope="session")
def tmux_image(docker_client: Any, base_image: str) -> str:
    """``ray-bench-tmux:<content hash>``: the base image with this host's tmux and bash (and
    their libraries and terminfo) laid over it, for Harbor's Terminus 2; built once per hash."""
    try:
        with images_built_one_at_a_time():
            return build_tmux_image(docker_client, base_image)
    except RuntimeError as exc:
        require_service("tmux", False, str(exc))
        raise


@pytest.fixture(autouse=True)
def _own_state_root(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own state root: account state is durable there (accounts.sqlite), and
    one test's windows, cooldowns or disabled logins must not reach the next."""
    monkeypatch.setenv("RAY_BENCH_STATE_ROOT", str(tmp_path_factory.mktemp("state-root")))


def harbor_importable() -> bool:
    try:
        import harbor  # noqa: F401
    except ImportError:
        return False
    return True


#: Markers of the tests that take seconds to minutes each: a Ray, dockerd, Prometheus or Daytona
#: fixture, or ``slow``.
_SERVICES = frozenset({"docker", "ray", "prometheus", "daytona"})


def _file_tier(items: list[pytest.Item]) -> int:
    """0: a file with a test marked ``slow``; 1: one needing a service; 2: the pure rest."""
    names = {mark.name for item in items for mark in item.iter_markers()}
    return 0 if "slow" in names else 1 if names & _SERVICES else 2


def _slow_files_first(items: list[pytest.Item]) -> None:
    """The files ordered slow, then service, then pure (collection order within each tier; a file's
    tests stay together and in order), so that the scheduler of the main pass (``--dist loadfile
    --no-loadscope-reorder``, scripts/test.sh) hands the long files out first and the many
    sub-second ones fill the end. xdist's default order (files by test count, descending) put the
    one-test files last, among them the longest of the suite (node loss, signals, driver crash:
    40-90 s each), so one worker ran them while the other idled."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    items[:] = [item for group in sorted(files.values(), key=_file_tier) for item in group]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``harbor`` run Harbor's own code, which needs Python >= 3.12: where Harbor
    cannot be imported (the 3.11 venv) they are deselected, not skipped, because scripts/test.sh
    runs them in a second pass in .venv-harbor, where they must pass (under CI=true too). Then
    the slow files go first (``_slow_files_first``)."""
    if not harbor_importable():
        deselected = [item for item in items if item.get_closest_marker("harbor")]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker("harbor")]
    _slow_files_first(items)


def pytest_configure(config: pytest.Config) -> None:
    """Under CI=true the optional Daytona SDK is required: its tests skip elsewhere when it is
    missing, and a CI run must not pass by skipping them."""
    if os.environ.get("CI", "").lower() == "true":
        try:
            import daytona  # noqa: F401
        except ImportError as exc:
            raise pytest.UsageError(
                f"CI=true needs the daytona extra (pip install -e '.[dev,daytona]'): {exc}") from exc
