"""The files of the agent and verifier contracts in an attempt's ``logs/``, kept within the
bounds their readers read: ``usage.json``, ``error.json``, ``reward.json`` and ``reward.txt``
are a few hundred bytes when written in good faith. One over its bound is replaced, as soon as
it reaches the attempt directory and before anything reads it, by a few bytes saying so (issue
58: a 50 MB ``usage.json`` was kept whole in the run root, 51 MB an attempt); its reader then
finds it unreadable, as it would have by its own bound.
"""

from __future__ import annotations

import stat
from pathlib import Path

from ray_bench.sandboxes.archive import over_bound_note
from ray_bench.tasks.rewards import MAX_REWARD_BYTES

#: usage.json and error.json are a few hundred bytes; a larger one is not read.
AGENT_JSON_BYTES = 1024 * 1024

#: Each file's bound is its reader's: the rewards' is the one reward reader's (ray_bench.tasks.rewards).
BOUNDS: dict[tuple[str, str], int] = {
    ("agent", "usage.json"): AGENT_JSON_BYTES,
    ("agent", "error.json"): AGENT_JSON_BYTES,
    ("verifier", "reward.json"): MAX_REWARD_BYTES,
    ("verifier", "reward.txt"): MAX_REWARD_BYTES,
}


def bound_contract_files(logs: Path) -> int:
    """Replace each contract file under ``logs`` (an attempt's or a step's ``logs/``) that is
    over its bound; return the bytes freed."""
    freed = 0
    for (part, name), bound in BOUNDS.items():
        path = logs / part / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size <= bound:
            continue
        text = over_bound_note(name, bound, st.st_size)
        path.unlink()
        path.write_bytes(text)
        freed += st.st_size - len(text)
    return freed


def bounds_below(under: str = "") -> dict[str, int]:
    """:data:`BOUNDS` by path relative to the directory collected: ``logs/`` itself
    (``agent/usage.json``) or one of its parts (``under="agent"``: ``usage.json``). A backend
    that can see a file's size before copying it (a tar header, a ``stat`` in the sandbox)
    writes the note instead of copying one over its bound."""
    return {(name if under else f"{part}/{name}"): bound
            for (part, name), bound in BOUNDS.items() if not under or part == under}
