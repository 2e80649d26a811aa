"""A finished attempt's summary -> a valid row, or a failure class with a fingerprint.

An attempt is a **valid row** only when the runner wrote its terminal summary, the verifier
produced a reward, and there was no uncaught crash, stale runner, missing summary or
infrastructure poison. An agent that ran and failed the task is a valid row with reward 0;
an agent timeout still ran the verifier and is a valid, flagged row.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ray_bench.evidence.catalog import Catalog, texts_of

Effect = Literal["success", "rate_limited", "auth_failed", "none"]

#: Classes that say something about the cell itself; the others are about the world around
#: it (accounts, sandboxes, the cluster), do not use up the cell's attempts, and are stopped
#: by the recovery circuit instead when they repeat.
COUNTING_CLASSES = frozenset({"task", "tool", "evaluator", "executor"})


@dataclass(frozen=True)
class Verdict:
    valid: bool
    failure_class: str | None
    fingerprint: str | None
    message: str
    effect: Effect
    retry_after: float | None = None
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def counts(self) -> bool:
        return self.failure_class in COUNTING_CLASSES


def fingerprint(failure_class: str, rule: str, text: str) -> str:
    """Stable across attempts: numbers, hex ids and paths are folded before hashing."""
    norm = re.sub(r"0x[0-9a-f]+|[0-9a-f]{12,}|\d+(\.\d+)?", "N", text.lower())
    norm = re.sub(r"(/[\w.-]+)+", "/PATH", norm)[:200]
    return hashlib.sha256(f"{failure_class}|{rule}|{norm}".encode()).hexdigest()[:12]


def classify(summary: dict[str, Any], catalog: Catalog) -> Verdict:
    flags: list[str] = []
    agent = summary.get("agent") or {}
    if agent.get("timed_out"):
        flags.append("agent_timeout")
    if agent.get("truncated_bytes"):
        flags.append("output_truncated")
    texts = texts_of(summary)
    error = summary.get("error")
    retry_after = _retry_after(summary)

    if error:
        match = catalog.match(texts)
        cls = str(error.get("failure_class") or "executor")
        rule = "exception"
        effect: Effect = "none"
        if match is not None:
            cls, rule, effect = match.rule.failure_class, match.rule.id, match.rule.effect
        msg = texts["error"]
        return Verdict(False, cls, fingerprint(cls, rule, msg), msg, effect, retry_after, tuple(flags))

    for phase in ("agent", "verifier"):
        if (summary.get(phase) or {}).get("oom_killed"):
            # The sandbox's memory limit killed it: a verdict on the limit, not on the agent.
            msg = f"{phase} was killed by the sandbox's memory limit (OOM)"
            return Verdict(False, "capacity", fingerprint("capacity", "oom-killed", msg), msg, "none",
                           retry_after, tuple(flags))

    if summary.get("agent_error"):
        # The agent said it was in trouble: whatever the verifier says, this is not evidence.
        match = catalog.match({"agent_error": texts["agent_error"]})
        cls, rule, effect = ("tool", "agent-error", "none") if match is None else (
            match.rule.failure_class, match.rule.id, match.rule.effect)
        msg = texts["agent_error"]
        return Verdict(False, cls, fingerprint(cls, rule, msg), msg, effect, retry_after, tuple(flags))

    if agent.get("exit_code") not in (0, None) and not agent.get("timed_out"):
        match = catalog.match({"agent_output": texts["agent_output"]})
        if match is not None and match.rule.failure_class != "task":
            cls, msg = match.rule.failure_class, match.text
            return Verdict(False, cls, fingerprint(cls, match.rule.id, msg), msg, match.rule.effect,
                           retry_after, tuple(flags))

    usage = summary.get("usage") or {}
    if usage.get("output_tokens") == 0 and agent.get("exit_code") not in (0, None):
        msg = "agent produced zero output tokens"
        return Verdict(False, "provider", fingerprint("provider", "zero-output", msg), msg, "none",
                       retry_after, tuple(flags))

    if summary.get("reward") is None:
        verifier = summary.get("verifier") or {}
        source = summary.get("reward_source")
        msg = (f"verifier wrote no reward (exit {verifier.get('exit_code')}"
               f"{', timed out' if verifier.get('timed_out') else ''}{', ' + source if source else ''})")
        return Verdict(False, "evaluator", fingerprint("evaluator", "no-reward", msg), msg, "none",
                       retry_after, tuple(flags))

    return Verdict(True, None, None, "valid", "success", None, tuple(flags))


def _retry_after(summary: dict[str, Any]) -> float | None:
    for source in (summary.get("agent_error") or {}, summary.get("error") or {}):
        value = source.get("retry_after")
        if isinstance(value, int | float) and value >= 0:
            return float(value)
    return None
