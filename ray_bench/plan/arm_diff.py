"""What an arm changes from the baseline: every field of the arm model whose value differs.

Computed from the models' dumps, so a field added to :class:`~ray_bench.models.suite.Arm` (or to
an MCP server, a role, the watchdog) is shown without editing the receipt (issue 56: the receipt
showed env names only, and an ``mcp`` arm's MCP server was not on it). A list of named entries
(MCP servers, roles) is compared entry by entry under its name, so one server added does not
show every later one as changed. What is shown of a value is never a secret: env values are not
shown at all (names only, as everywhere in the receipt), and any other value that looks like a
credential (:func:`ray_bench.config.secrets.looks_like_secret`, which refused it at load already:
a second guard) is shown as its fingerprint.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from ray_bench.config.secrets import looks_like_secret
from ray_bench.models.suite import Arm
from ray_bench.plan.arm_identity import DISPLAY_FIELDS
from ray_bench.textsafe import code_span, table_cell

#: Fields whose values are never shown, only whether they are set (env values reach the agent).
NAMES_ONLY = frozenset({"env"})
#: What a field that one side leaves unset shows.
UNSET = "-"


@dataclass(frozen=True)
class ArmDifference:
    """One field of ``arm`` whose value is not the baseline's, both values as shown."""

    arm: str
    field: str
    baseline: str
    value: str


def arm_differences(baseline: Arm, arm: Arm) -> list[ArmDifference]:
    """Every field (a dotted path, named entries by name) where ``arm`` differs from ``baseline``,
    in field order; none for an arm that runs what the baseline runs (its name and role aside)."""
    base = _leaves(baseline.model_dump(mode="json", exclude=set(DISPLAY_FIELDS)))
    mine = _leaves(arm.model_dump(mode="json", exclude=set(DISPLAY_FIELDS)))
    out: list[ArmDifference] = []
    for path in [*base, *(p for p in mine if p not in base)]:
        if path in base and path in mine and base[path] == mine[path]:
            continue
        hidden = path.split(".", 1)[0] in NAMES_ONLY
        shown = (_shown(base.get(path), hidden), _shown(mine.get(path), hidden))
        if shown == (UNSET, UNSET):  # unset on both sides, spelled differently (absent, null, empty)
            continue
        if shown == ("set", "set"):
            shown = ("set", "set, another value")
        out.append(ArmDifference(arm.name, path, *shown))
    return out


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> scalar (or list of scalars) of a model's JSON dump. A list of mappings
    with a unique ``name`` (else ``role``) is keyed by it; any other list is one value."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        # an empty mapping or list set on one side only still differs from an absent one
        return out or ({prefix: {}} if prefix else {})
    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        for label in ("name", "role"):
            keys = [item.get(label) for item in data]
            if all(isinstance(k, str) for k in keys) and len(set(keys)) == len(keys):
                keyed: dict[str, Any] = {}
                for key, item in zip(keys, data, strict=True):
                    keyed.update(_leaves({k: v for k, v in item.items() if k != label}, f"{prefix}[{key}]"))
                return keyed
    return {prefix: data}


def _shown(value: Any, hidden: bool) -> str:
    if value is None or value in ([], {}):
        return UNSET
    if hidden:
        return "set"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        text = shlex.join(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True)
    hit = looks_like_secret(text)
    return f"<{hit[1]}>" if hit else text


def render_differences(arms: list[Arm]) -> list[str]:
    """The receipt's section: each variant's differences from the baseline, one row a field."""
    out = ["## What each arm changes from the baseline", ""]
    baseline = next((a for a in arms if a.role == "baseline"), None)
    others = [a for a in arms if a is not baseline]
    if baseline is None or not others:
        return [*out, "- one arm in this plan: nothing to compare (its pairs come from earlier runs)"]
    rows: list[str] = []
    for arm in others:
        found = arm_differences(baseline, arm)
        if not found:
            rows.append(f"| {table_cell(arm.name)} | (none) | - | runs what `{table_cell(baseline.name)}` runs "
                        "(a delta between them is noise) |")
        rows += [f"| {table_cell(d.arm)} | {code_span(d.field)} | {code_span(d.baseline)} | {code_span(d.value)} |"
                 for d in found]
    return [*out, f"| arm | field | {table_cell(baseline.name)} | this arm |", "|---|---|---|---|", *rows]
