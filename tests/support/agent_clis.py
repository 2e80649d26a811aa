"""Where the real agent CLIs are: installed by .ci/run with npm (``RAY_BENCH_AGENT_CLIS`` names
their ``node_modules/.bin``)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The versions .ci/run installs; the adapters' output parsing was read from these.
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini": "@google/gemini-cli"}


#: Where .ci/run installs them (kept across CI runs on one machine), then a checkout's own.
PLACES = (Path("/var/cache/ray-bench/agent-clis/node_modules/.bin"),
          REPO / ".cache" / "agent-clis" / "node_modules" / ".bin")


def bin_dir() -> Path:
    named = os.environ.get("RAY_BENCH_AGENT_CLIS")
    if named:
        return Path(named)
    return next((p for p in PLACES if p.is_dir()), PLACES[0])


def missing(binary: str) -> str | None:
    path = bin_dir() / binary
    if path.exists():
        return None
    return (f"{binary} not found at {path} "
            f"(.ci/run installs it; or npm install --prefix .cache/agent-clis {PACKAGES[binary]})")
