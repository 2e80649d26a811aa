"""Operator holds on accounts: a small JSON file in the state root, so that a hold survives
drivers, clusters and restarts. The admission actor's ``Holds`` serves it to every driver."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import load_state_json
from ray_bench.files import write_whole

HOLDS_FILE = "account-holds.json"


def holds_path(state_root: Path) -> Path:
    return state_root / HOLDS_FILE


def read_holds(state_root: Path) -> dict[str, dict[str, Any]]:
    try:
        data = load_state_json(holds_path(state_root))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_hold(state_root: Path, account: str, *, hold: bool, reason: str = "") -> bool:
    """Hold or release ``account``; returns whether anything changed."""
    holds = read_holds(state_root)
    if hold:
        changed = account not in holds
        holds[account] = {"reason": reason or "operator", "since": time.time()}
    else:
        changed = holds.pop(account, None) is not None
    state_root.mkdir(parents=True, exist_ok=True)
    write_whole(holds_path(state_root), json.dumps(holds, indent=2, sort_keys=True))
    return changed
