"""When did the watchdog fire? The number of model answers the fake provider had served at the
instant a :class:`~ray_bench.agents.watchdog.DegenerationWatch` in this process fired.

A test that counts the answers served by the end measures the rule *and* how long the sandbox
took to kill the CLI; on a loaded host the second grows (the CLI keeps asking while the kill is
on its way). The count at the instant of firing is the rule's alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ray_bench.agents.watchdog import DegenerationWatch


def record_firing(monkeypatch: pytest.MonkeyPatch, served: Callable[[], int]) -> list[int]:
    """Patch the watch so each firing appends ``served()``; returns the list it fills."""
    fired: list[int] = []
    original = DegenerationWatch._fire

    def fire(self: DegenerationWatch, rule: str, message: str, evidence: list[str]) -> None:
        if self.reason is None:
            fired.append(served())
        original(self, rule, message, evidence)

    monkeypatch.setattr(DegenerationWatch, "_fire", fire)
    return fired
