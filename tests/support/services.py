"""What a test does when a service it needs is missing: under ``CI=true`` it fails, elsewhere it
skips with the reason, so a laptop without dockerd still runs the rest.

Here rather than in ``tests/conftest.py``: ``from conftest import ...`` names whichever
``conftest`` module pytest imported first, so ``tests/agents`` and ``tests/reliability`` (which has
its own) could not be collected in one call."""

from __future__ import annotations

import os

import pytest


def require_service(name: str, available: bool, reason: str) -> None:
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{name} is required under CI=true but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{name} unavailable: {reason}")
