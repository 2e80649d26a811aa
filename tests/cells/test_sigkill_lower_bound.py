"""A stop that needed the SIGKILL leaves usage a lower bound (issue 25): a CLI stopped by its
timeout, the watchdog or a cancellation gets SIGTERM, then SIGKILL after the grace; a real
Claude Code killed so can lose the call it was serving in its grace (neither its stream nor its
session file records it, yet the provider billed it). The sandbox's stop says whether the SIGKILL
was needed, and the usage read from the CLI's messages is then ``lower_bound``; a CLI that exits
on its SIGTERM keeps ``exact``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from cells.test_runner_cancel_cost import _cancel_when
from support.specs import local_spec

from ray_bench.cells.runner import run_attempt
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend


def _finished(n: int) -> str:
    """A whole ``stream-json`` assistant message (its ``stop_reason`` said, its final usage)."""
    return json.dumps({"type": "assistant", "request_id": f"req_k_{n}", "session_id": "s-k",
                       "message": {"id": f"msg_k_{n}", "type": "message", "role": "assistant",
                                   "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                                   "content": [{"type": "text", "text": f"thinking {n}"}],
                                   "usage": {"input_tokens": 150, "output_tokens": 20,
                                             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}})


def _fake_claude(bin_dir: Path, marker: Path, *, ignores_sigterm: bool) -> Path:
    """A ``claude`` that prints two whole messages (nothing unfinished, no call under way: an
    exact record so far), says it runs (``marker``) and works on forever, ignoring SIGTERM or not."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(['{"type":"system","subtype":"init","session_id":"s-k"}', _finished(1), _finished(2)])
    trap = "trap '' TERM\n" if ignores_sigterm else ""
    script = bin_dir / "claude"
    script.write_text(f"#!/bin/sh\n{trap}cat <<'EOF'\n{lines}\nEOF\ntouch {marker}\n"
                      "while :; do sleep 0.1; done\n")
    script.chmod(0o755)
    return bin_dir


def _spec(tmp_path: Path, ignores_sigterm: bool, timeout: float) -> tuple[Path, object]:
    marker = tmp_path / "claude-running"
    bin_dir = _fake_claude(tmp_path / "bin", marker, ignores_sigterm=ignores_sigterm)
    return marker, local_spec(tmp_path, "", agent="claude-code", model="claude-sonnet-4-5",
                              agent_timeout_sec=timeout, agent_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})


def _check(summary: AttemptSummary, tmp_path: Path, ignores_sigterm: bool) -> None:
    usage = summary.usage
    assert usage is not None and usage.source == "stream", usage
    assert (usage.input_tokens, usage.output_tokens) == (300, 40)
    assert usage.request_ids == ["req_k_1", "req_k_2"]  # type: ignore[attr-defined]
    assert usage.bound == ("lower_bound" if ignores_sigterm else "exact"), usage
    assert summary.usage_lower_bound is ignores_sigterm
    written = json.loads((tmp_path / "attempt" / "logs" / "agent" / "usage.json").read_text())
    assert written["bound"] == usage.bound and written.get("killed_in_grace", False) is ignores_sigterm


@pytest.mark.parametrize("ignores_sigterm", [True, False], ids=["ignores SIGTERM", "exits on SIGTERM"])
def test_a_cli_cut_by_its_timeout_is_a_lower_bound_only_when_it_needed_the_sigkill(
        tmp_path: Path, ignores_sigterm: bool) -> None:
    marker, spec = _spec(tmp_path, ignores_sigterm, timeout=5.0)
    summary = asyncio.run(run_attempt(spec, LocalBackend(tmp_path / "sbx")))  # type: ignore[arg-type]
    assert marker.exists() and summary.agent is not None and summary.agent.timed_out
    _check(summary, tmp_path, ignores_sigterm)


@pytest.mark.parametrize("ignores_sigterm", [True, False], ids=["ignores SIGTERM", "exits on SIGTERM"])
def test_a_cancelled_cli_is_a_lower_bound_only_when_its_stop_needed_the_sigkill(
        tmp_path: Path, ignores_sigterm: bool) -> None:
    marker = tmp_path / "claude-running"
    bin_dir = _fake_claude(tmp_path / "bin", marker, ignores_sigterm=ignores_sigterm)
    summary = _cancel_when(marker, tmp_path, "", agent="claude-code", model="claude-sonnet-4-5",
                           agent_timeout_sec=300.0, agent_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert marker.exists() and summary.cancelled
    _check(summary, tmp_path, ignores_sigterm)
    assert list((tmp_path / "sbx").iterdir()) == []  # its sandbox still removed
