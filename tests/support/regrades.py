"""What the regrade tests share: a verifier that flips hello-world's unsolved row and the CLI run
in-process (a run's attempt rows: ``Ledger.read_attempts``)."""

from __future__ import annotations

from typer.testing import CliRunner

from ray_bench.cli import app

#: The scripted agent with no sleep.
FAST = {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"}
#: hello-world's new verifier also accepts no greeting at all: the unsolved baseline flips to 1.
LENIENT = """#!/bin/sh
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
greeting=$(cat "${APP_DIR:-/app}/hello.txt" 2>/dev/null)
case "$greeting" in "Hello, world!"|"") echo 1 ;; *) echo 0 ;; esac > "$out/reward.txt"
"""


def invoke(*args: str) -> tuple[int, str, str]:
    """``ray-bench ARGS``: exit code, stdout, stderr."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


