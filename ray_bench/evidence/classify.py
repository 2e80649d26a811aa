"""A finished attempt's summary -> a valid row, or a failure class with a fingerprint.

An attempt is a **valid row** only when the runner wrote its terminal summary, the verifier
produced a reward, and there was no uncaught crash, stale runner, missing summary or
infrastructure poison. An agent that ran and failed the task is a valid row with reward 0;
an agent timeout still ran the verifier and is a valid, flagged row. An agent killed by a
signal it was not sent by our timeout or watchdog (exit -N, or 128+N through a shell) crashed:
never a valid row, with a model or without.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from ray_bench.evidence.catalog import Catalog, texts_of
from ray_bench.models.attempt import AttemptSummary, ExecFacts, VerdictRecord
from ray_bench.numbers import duration_or_none, epoch_or_none

Effect = Literal["success", "rate_limited", "auth_failed", "server_error", "none"]

#: Classes that say something about the cell itself; the others are about the world around
#: it (accounts, sandboxes, the cluster), do not use up the cell's attempts, and are stopped
#: by the recovery circuit instead when they repeat.
COUNTING_CLASSES = frozenset({"task", "tool", "evaluator", "executor", "behaviour"})
#: Watchdog rules that are the executor role's bounds (max_tokens, max_spend_usd), not degeneration.
ROLE_BOUND_RULES = frozenset({"token_bound", "spend_bound"})


@dataclass(frozen=True)
class Verdict:
    valid: bool
    failure_class: str | None
    fingerprint: str | None
    message: str
    effect: Effect
    retry_after: float | None = None
    flags: tuple[str, ...] = field(default_factory=tuple)
    #: auth_failed only: the login expired (a refresh or re-login fixes it), not refused.
    expired: bool = False
    #: Lost with its runner or node: infrastructure. It does not use up the cell's attempts
    #: and does not open a recovery circuit by itself.
    lost: bool = False

    @property
    def counts(self) -> bool:
        return self.failure_class in COUNTING_CLASSES and not self.lost

    def record(self) -> VerdictRecord:
        return VerdictRecord(valid=self.valid, failure_class=self.failure_class,
                             fingerprint=self.fingerprint, message=self.message, flags=list(self.flags))


#: Every id format a failure message may name, folded to ``ID`` before hashing (on lower-cased
#: text, in this order): a systematic failure that names another sandbox, container or request
#: each time is one signature, so the recovery circuit sees it repeat. Issue 53: a Daytona
#: create timing out ("Daytona sandbox 3f2a...-beef-... still creating after 15s") gave 8
#: fingerprints for 8 failures, because a UUID's short groups ("beef", "cafe") stayed.
_ID_FORMS = re.compile("|".join((
    # a UUID, any version (Daytona's sandbox and snapshot ids, docker's request ids)
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    # ray-bench's own names: Daytona sandboxes ``rb-<hex>``, snapshots ``rb-build-<digest>``,
    # docker containers ``ray-bench-<hex>``
    r"(?<![\w-])(?:rb|ray-bench)-[a-z0-9][\w.-]*",
    # a ULID (26 Crockford base-32 characters; the first encodes a time, 0-7)
    r"(?<![\w-])[0-7][0-9a-hjkmnp-tv-z]{25}(?![\w-])",
    # provider request and message ids: Anthropic ``req_011C...``/``msg_...``, OpenAI
    # ``req_<hex>``/``chatcmpl-...``/``resp_...``
    r"(?<![\w-])(?:req|msg|chatcmpl|resp)[_-](?=[a-z_-]*\d)[a-z0-9_-]{8,}",
    # any other opaque token: 16+ characters mixing letters and digits (base-62 ids)
    r"(?<![\w-])(?=[a-z_-]*\d)(?=[\d_-]*[a-z])[a-z0-9_-]{16,}(?![\w-])",
    # hex runs (0x..., or 8+ hex digits on their own: short digests, container ids)
    r"0x[0-9a-f]+|(?<![\w-])[0-9a-f]{8,}(?![\w-])|[0-9a-f]{12,}",
)))


def fold_ids(text: str) -> str:
    """``text`` lower-cased with ids of every format (:data:`_ID_FORMS`), numbers and paths
    folded: what stays the same when a failure repeats. An opaque token (a key pasted into an
    error) is folded too, so the result may be shown where a raw message may not (a label)."""
    norm = _ID_FORMS.sub("ID", text.lower())
    norm = re.sub(r"\d+(\.\d+)?", "N", norm)
    return re.sub(r"(/[\w.-]+)+", "/PATH", norm)


def fingerprint(failure_class: str, rule: str, text: str) -> str:
    """Stable across attempts: the hash of the :func:`fold_ids` form."""
    norm = fold_ids(text)[:200]
    return hashlib.sha256(f"{failure_class}|{rule}|{norm}".encode()).hexdigest()[:12]


#: An auth failure whose message says the login ran out (rather than being refused).
_EXPIRED = re.compile(r"expired|refresh token|re-?login|session has ended", re.IGNORECASE)
_RETRY_AFTER = re.compile(
    r"retry[- ]after\D{0,3}(\d+(?:\.\d+)?)|try again in (\d+(?:\.\d+)?)\s*(s|sec|seconds|m|min)?",
    re.IGNORECASE)


def parse_retry_after(message: str) -> float | None:
    """Seconds from a ``Retry-After: 30`` header or a "try again in 2 min" phrase."""
    m = _RETRY_AFTER.search(message)
    if m is None:
        return None
    if m.group(1) is not None:
        return float(m.group(1))
    value = float(m.group(2))
    return value * 60 if (m.group(3) or "").lower().startswith("m") else value


def classify(summary: AttemptSummary, catalog: Catalog) -> Verdict:
    """The one classifier of a finished attempt: the driver, the simulator and every reader
    of the ledger call this, and admission only restates its verdict (``outcome_of``)."""
    verdict = _classify(summary, catalog)
    if verdict.effect == "rate_limited" and verdict.retry_after is None:
        text = " ".join(texts_of(summary).values())  # the rule matched a part; the hint may be elsewhere
        verdict = replace(verdict, retry_after=parse_retry_after(text))
    elif verdict.effect == "auth_failed":
        text = " ".join(texts_of(summary).values())
        verdict = replace(verdict, expired=bool(_EXPIRED.search(text)))
    return verdict


def _classify(summary: AttemptSummary, catalog: Catalog) -> Verdict:
    flags: list[str] = []
    agent = summary.agent or ExecFacts()
    if agent.timed_out:
        flags.append("agent_timeout")
    if agent.truncated_bytes:
        flags.append("output_truncated")
    texts = texts_of(summary)
    error = summary.error
    retry_after = _retry_after(summary)

    if summary.lost:
        msg = texts["error"] or "runner lost"
        return Verdict(False, "executor", fingerprint("executor", "runner-lost", msg), msg, "none",
                       None, tuple(flags), lost=True)

    if error is not None:
        match = catalog.match(texts, agent.exit_code)
        cls = error.failure_class or "executor"
        rule = "exception"
        effect: Effect = "none"
        if match is not None:
            cls, rule, effect = match.rule.failure_class, match.rule.id, match.rule.effect
        msg = texts["error"]
        return Verdict(False, cls, fingerprint(cls, rule, msg), msg, effect, retry_after, tuple(flags))

    for name, phase in (("agent", summary.agent), ("verifier", summary.verifier)):
        if phase is not None and phase.oom_killed:
            # The sandbox's memory limit killed it: a verdict on the limit, not on the agent.
            msg = f"{name} was killed by the sandbox's memory limit (OOM)"
            return Verdict(False, "capacity", fingerprint("capacity", "oom-killed", msg), msg, "none",
                           retry_after, tuple(flags))

    if summary.watchdog is not None:
        # Stopped live by the degeneration watchdog: what the agent did, not the world around it.
        rule = summary.watchdog.rule or "stopped"
        if rule in ROLE_BOUND_RULES:  # the executor role's bound reached: not degeneration
            msg = f"role bound ({rule}): {summary.watchdog.message}"
            return Verdict(False, "behaviour", fingerprint("behaviour", f"role-bound-{rule}", msg), msg, "none",
                           None, (*flags, "role_bound"))
        msg = f"degeneration watchdog ({rule}): {summary.watchdog.message}"
        return Verdict(False, "behaviour", fingerprint("behaviour", f"watchdog-{rule}", msg), msg, "none",
                       None, (*flags, "degeneration"))

    if summary.agent_error is not None and summary.agent_error.type == "loop":
        # The CLI stopped its own agent for repeating itself (Gemini CLI's loop detection, then
        # its result says success): degenerate, as when the watchdog stops one.
        msg = f"the CLI's own loop detection: {summary.agent_error.message or 'loop detected'}"
        return Verdict(False, "behaviour", fingerprint("behaviour", "cli-loop", msg), msg, "none",
                       None, (*flags, "degeneration"))

    if summary.agent_error is not None:
        # The agent said it was in trouble: whatever the verifier says, this is not evidence.
        match = catalog.match({"agent_error": texts["agent_error"]}, agent.exit_code)
        cls, rule, effect = ("tool", "agent-error", "none") if match is None else (
            match.rule.failure_class, match.rule.id, match.rule.effect)
        msg = texts["agent_error"]
        return Verdict(False, cls, fingerprint(cls, rule, msg), msg, effect, retry_after, tuple(flags))

    if agent.exit_code not in (0, None) and not agent.timed_out and summary.agent_kind in (None, "command"):
        # The agent's own transcript is in this tail too ("No such file or directory" from a
        # command it ran): rules that name a harness error say by which exit codes it is one.
        # A CLI adapter's tail is the CLI's event stream, tool results and all; its adapter has
        # already said what went wrong in error.json (above), so its text is not matched.
        match = catalog.match({"agent_output": texts["agent_output"]}, agent.exit_code)
        if match is not None and match.rule.failure_class != "task":
            cls, msg = match.rule.failure_class, match.text
            return Verdict(False, cls, fingerprint(cls, match.rule.id, msg), msg, match.rule.effect,
                           retry_after, tuple(flags))

    signal = killed_by(agent)
    if signal is not None:
        # Killed from outside (not by our timeout or watchdog): whatever it left in the
        # workspace and whatever the verifier makes of it, a crash is not evidence.
        msg = f"agent was killed by signal {signal} (exit {agent.exit_code}) before it finished"
        return Verdict(False, "tool", fingerprint("tool", "agent-killed", msg), msg, "none",
                       retry_after, (*flags, "crashed"))

    usage = summary.usage
    evidence = _missing_evidence(summary)
    if evidence is not None:
        cls, rule, msg = evidence
        return Verdict(False, cls, fingerprint(cls, rule, msg), msg, "none", retry_after, tuple(flags))
    if usage is not None and usage.output_tokens == 0 and agent.exit_code not in (0, None):
        msg = "agent produced zero output tokens"
        return Verdict(False, "provider", fingerprint("provider", "zero-output", msg), msg, "none",
                       retry_after, tuple(flags))

    if summary.reward is None:
        verifier = summary.verifier or ExecFacts()
        source = summary.reward_source
        msg = (f"verifier wrote no reward (exit {verifier.exit_code}"
               f"{', timed out' if verifier.timed_out else ''}{', ' + source if source else ''})")
        return Verdict(False, "evaluator", fingerprint("evaluator", "no-reward", msg), msg, "none",
                       retry_after, tuple(flags))

    return Verdict(True, None, None, "valid", "success", None, tuple(flags))


#: A shell reports a child killed by signal N as exit 128+N (docker exec, ``sh -c``); Python
#: reports it as -N. Signals go up to 64 on Linux.
_SIGNAL_EXIT = range(129, 128 + 65)


def killed_by(agent: ExecFacts) -> int | None:
    """The signal that killed the agent, unless our own timeout or watchdog sent it."""
    code = agent.exit_code
    if code is None or agent.timed_out or agent.stopped:
        return None
    if code < 0:
        return -code
    return code - 128 if code in _SIGNAL_EXIT else None


def _missing_evidence(summary: AttemptSummary) -> tuple[str, str, str] | None:
    """An arm that names a model must show the model answered: a usage record with output
    tokens. Whatever the reward, a row without that is not evidence about the model. A usage
    record whose numbers were refused (not finite, negative: :attr:`Usage.invalid`) is no
    evidence either, model or not: its attempt is invalid, its cost unknown."""
    if summary.usage is not None and summary.usage.invalid:
        return ("tool", "invalid-usage", f"usage record refused: {summary.usage.invalid}")
    if not summary.model:
        return None
    if summary.usage is None:
        return ("tool", "no-usage", f"no usage evidence: the arm runs {summary.model} but the agent "
                f"({summary.agent_kind or 'command'}) left no usage record")
    if not summary.usage.known:
        # Answered (else its adapter had said no_answer) but no record held what it spent: the
        # agent's records failed, not the provider; it counts, so it is not re-run unbounded.
        return ("tool", "unknown-usage", f"no usage evidence: what {summary.model} spent is unknown (the "
                f"agent, {summary.agent_kind or 'command'}, left no record of it)")
    if not summary.usage.output_tokens:
        return ("provider", "zero-output", f"no usage evidence: {summary.model} produced zero output tokens")
    return None


def _retry_after(summary: AttemptSummary) -> float | None:
    """The wait the attempt's error names: its ``retry_after``, or, for a usage limit with a
    ``reset_at`` (the error contract's epoch, as a ``command`` agent writes it in error.json
    without a ``retry_after``), until then from the attempt's end, whichever is later: a window
    that opens in three days cools its account three days, not the 60 s default."""
    # Numbers from the world (ray_bench.numbers): Infinity, or 1e300, would cool it for good
    said = next((w for v in (summary.agent_error.retry_after if summary.agent_error else None,
                             summary.error.retry_after if summary.error else None)
                 if v is not None and (w := duration_or_none(v)) is not None), None)
    reset_at = (summary.agent_error.model_extra or {}).get("reset_at") if summary.agent_error else None
    end = summary.finished_at or summary.started_at
    if isinstance(reset_at, int | float) and not isinstance(reset_at, bool) and end > 0 \
            and (until := epoch_or_none(reset_at, end)) is not None and until > end:
        return max(said or 0.0, until - end)
    return said
