"""``execute_run`` builds a session's options once (ray_bench/api.py ``session_options``): what it
derives is filled in a new frozen value, never by mutating the caller's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ray_bench.api import MetricsSettings, session_options
from ray_bench.scheduler.driver import RunOptions
from ray_bench.scheduler.signals import SignalStop


def test_the_metrics_fill_only_what_the_options_leave_unset_and_the_callers_options_stay() -> None:
    given = RunOptions(deadline=5.0)
    metrics = MetricsSettings(state_root=Path("/state/m"), deadline=9.0)
    built = session_options(given, 123.0, metrics, None)
    assert (built.session_started, built.state_root, built.deadline) == (123.0, Path("/state/m"), 5.0)
    assert (given.session_started, given.state_root) == (None, None)  # not mutated
    named = session_options(RunOptions(state_root=Path("/state/own")), 1.0, metrics, None)
    assert (named.state_root, named.deadline) == (Path("/state/own"), 9.0)
    bare = session_options(RunOptions(), 1.0, None, None)
    assert (bare.state_root, bare.deadline, bare.stop_signal) == (None, None, None)


def test_the_cli_signals_become_the_stop_signal_and_the_options_are_frozen() -> None:
    signals = SignalStop(say=lambda line: None)
    built = session_options(RunOptions(stop_signal=lambda: "SIGHUP"), 1.0, None, signals)
    assert built.stop_signal == signals.received  # the CLI's, not the one given
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.tick_sec = 1.0  # type: ignore[misc]
