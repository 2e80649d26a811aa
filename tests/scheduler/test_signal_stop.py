"""SignalStop: the first stop signal is written down; a second within the window forces the exit."""

from __future__ import annotations

import os
import signal

from ray_bench.scheduler.signals import FORCE_WINDOW_SEC, SignalStop, exit_code_of


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_first_signal_is_recorded_and_a_quick_second_forces_the_exit() -> None:
    clock, exits, said = Clock(), [], []
    stop = SignalStop(say=said.append, force_exit=exits.append, now=clock)
    assert stop.received() is None
    stop.on_signal("SIGTERM")
    assert stop.received() == "SIGTERM" and exits == [] and len(said) == 1
    clock.t += FORCE_WINDOW_SEC / 2
    stop.on_signal("SIGINT")
    assert exits == [143]  # the first signal's code
    assert stop.received() == "SIGTERM"


def test_a_late_repeat_does_not_force_but_opens_a_new_window() -> None:
    clock, exits = Clock(), []
    stop = SignalStop(say=lambda _: None, force_exit=exits.append, now=clock)
    stop.on_signal("SIGHUP")
    clock.t += FORCE_WINDOW_SEC + 1
    stop.on_signal("SIGHUP")
    assert exits == []
    clock.t += 1
    stop.on_signal("SIGHUP")
    assert exits == [129]


def test_installed_handlers_catch_a_real_signal_and_restore_puts_the_old_ones_back() -> None:
    before = signal.getsignal(signal.SIGHUP)
    stop = SignalStop(say=lambda _: None, force_exit=lambda code: None)
    stop.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert stop.received() == "SIGHUP"
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGHUP) is before


def test_exit_codes_follow_the_shell() -> None:
    assert (exit_code_of("SIGTERM"), exit_code_of("SIGINT"), exit_code_of("SIGHUP")) == (143, 130, 129)
