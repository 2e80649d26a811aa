"""What an operator reads every day reads as a sentence: no doubled words, no negative times."""

from __future__ import annotations

import itertools

from ray_bench.plan.drift import Drift
from ray_bench.scheduler.launch import waiting_note
from ray_bench.status.read import stop_words


def test_a_wait_that_already_passed_is_zero_seconds_not_minus_zero() -> None:
    assert waiting_note("every account is cooling", -0.4) == "waiting: every account is cooling (next in 0 s)"
    assert waiting_note("docker creates per minute", 41.6) == "waiting: docker creates per minute (next in 42 s)"


def test_a_changed_file_of_its_own_kind_is_named_once() -> None:
    assert Drift("accounts", "accounts", "/a.yaml", "sha256 1 != 2").what == "accounts"
    assert Drift("task", "hello-world", "/t", "gone").what == "task hello-world"


def test_a_stop_whose_detail_names_itself_is_not_prefixed_again() -> None:
    halt = "resource halt: available memory 300 MiB is under the reserve of 1024 MiB; running cells finish."
    assert stop_words("halt", halt) == halt
    assert stop_words("preflight", "preflight gate failed: cell x").startswith("preflight gate failed")
    changed = "accounts changed (sha256 1 != 2)"
    assert stop_words("drift", changed) == f"inputs changed: {changed}"
    for stopped, detail in (("halt", halt), ("circuit", "recovery circuit open for run (signature f)"),
                            ("audit", "cleanup audit found 2 sandboxes"), ("nodes", "no node can run cells: x")):
        words = stop_words(stopped, detail).replace(":", "").split()
        assert not any(a == b for a, b in itertools.pairwise(words)), words
        assert stop_words(stopped, detail).count(detail.split()[0] + " " + detail.split()[1]) == 1
