"""What one Gemini CLI run left about its model calls: the stream, its chat file and the distilled
telemetry, read into usage (see the package doc)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ray_bench.agents.base import (
    json_line,
)
from ray_bench.agents.gemini.errors import ATTEMPT, Retry, delay_of, status_of
from ray_bench.agents.gemini.telemetry import TELEMETRY_FILE
from ray_bench.agents.prices import call_usd
from ray_bench.models.agent import Usage

#: The stream's warning when the CLI's loop detection ends the run (nonInteractiveCli in 0.61.0's
#: bundle: a ``LoopDetected`` event, its second strike; the ``result`` that follows says success).
LOOP_STOP = "Loop detected, stopping execution"


@dataclass
class Record:
    """Everything one run left about its model calls: per answer (session message id) its model
    and tokens from the chat file; in call order from the telemetry, each response's id and
    tokens and each failed attempt."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    response_ids: list[str] = field(default_factory=list)
    #: Telemetry ``api_response`` token counts, in order (where the chat file has none).
    responses: list[dict[str, Any]] = field(default_factory=list)
    session_id: str | None = None
    retry: Retry | None = None
    #: Some attempt failed (a refused call is not billed), from the telemetry or stderr.
    refusals: int = 0
    #: The stream's last word was a tool's result: the CLI had sent (or was about to send)
    #: the next call, whose answer no record may hold.
    call_under_way: bool = False
    #: Answers the stream showed (model text or tool calls after a prompt or a tool's result).
    answers_seen: int = 0
    #: Calls the telemetry shows sent (``api_request``), and ended with an error (``api_error``).
    requests: int = 0
    failed: int = 0
    #: The CLI's loop detection ended the run (its stream's warning "Loop detected, stopping
    #: execution", then a ``result`` of ``success``), and the kinds of loop it saw (telemetry).
    loop_stopped: bool = False
    loop_types: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, events: list[dict[str, Any]], sessions: tuple[tuple[str, str], ...], stderr: str) -> Record:
        rec = cls()
        in_answer = False
        for event in events:
            kind, role = event.get("type"), event.get("role")
            if kind == "tool_use" or (kind == "message" and role == "assistant"):
                rec.answers_seen += 0 if in_answer else 1
                in_answer = True
            elif kind == "tool_result" or (kind == "message" and role == "user"):
                in_answer = False
            if kind == "error" and str(event.get("message", "")).startswith(LOOP_STOP):
                rec.loop_stopped = True
            if rec.session_id is None and event.get("type") == "init" and isinstance(event.get("session_id"), str):
                rec.session_id = event["session_id"]
            if event.get("type") in ("tool_use", "tool_result", "message", "result"):
                rec.call_under_way = event.get("type") == "tool_result" or (
                    event.get("type") == "message" and event.get("role") == "user")
        telemetry = [text for path, text in sessions if path.rsplit("/", 1)[-1] == TELEMETRY_FILE]
        for path, text in sorted(sessions):
            if path.rsplit("/", 1)[-1] == TELEMETRY_FILE:
                continue
            for entry in (json_line(line) for line in text.splitlines()):
                if entry is None:
                    continue
                sets = entry.get("$set")  # a resumed session's messages come as one ``$set``
                listed = sets.get("messages") if isinstance(sets, dict) else None
                for msg in listed if isinstance(listed, list) else [entry]:
                    rec._answer(msg)
        for text in telemetry:
            rec._telemetry(text)
        if not telemetry:
            attempts = list(ATTEMPT.finditer(stderr))
            rec.refusals += len(attempts)
            if attempts and not rec.answers:  # no order to read from stderr: only when nothing was answered
                last = attempts[-1]
                tail = stderr[last.start():last.start() + 600]
                status = int(last.group(2)) if last.group(2) else (429 if "Retrying after" in tail else None)
                rec.retry = Retry(status, tail.split("\n", 1)[0], delay_of(tail))
        return rec

    def _answer(self, msg: object) -> None:
        if not isinstance(msg, dict) or msg.get("type") != "gemini" or not msg.get("id"):
            return
        tokens = msg.get("tokens")
        seen = self.answers.setdefault(str(msg["id"]), {})
        if isinstance(msg.get("model"), str):
            seen["model"] = msg["model"]
        if isinstance(tokens, dict):
            seen["tokens"] = {k: int_of(tokens.get(k)) for k in ("input", "output", "cached", "thoughts")}

    def _telemetry(self, text: str) -> None:
        for e in (json_line(line) for line in text.splitlines()):
            name = (e or {}).get("event.name")
            if e is None:
                continue
            if name == "gen_ai.client.inference.operation.details" and isinstance(e.get("gen_ai.response.id"), str):
                if e["gen_ai.response.id"] not in self.response_ids:
                    self.response_ids.append(e["gen_ai.response.id"])
            elif name == "gemini_cli.api_response":
                self.retry = None  # the CLI got past it
                self.responses.append({"input": int_of(e.get("input_token_count")),
                                       "output": int_of(e.get("output_token_count")),
                                       "cached": int_of(e.get("cached_content_token_count")),
                                       "thoughts": int_of(e.get("thoughts_token_count")), "model": e.get("model")})
            elif name == "gemini_cli.api_request":
                self.requests += 1
            elif name == "loop_detected" and isinstance(e.get("loop_type"), str):
                self.loop_types.append(e["loop_type"])
            elif name == "gemini_cli.api_error":
                self.refusals += 1
                self.failed += 1
                message = str(e.get("error") or "")
                code = e.get("status_code")
                status = int(code) if isinstance(code, int | str) and str(code).isdigit() else status_of(message)
                self.retry = Retry(status, message, delay_of(message))

    def calls_unfinished(self) -> int | None:
        """Calls the telemetry shows sent with no answer or error recorded: a stream its loop
        detection stopped reading (billed as served, in no total), or one under way at a kill."""
        chat = sum(1 for a in self.answers.values() if "tokens" in a)
        return max(0, self.requests - self.failed - max(len(self.responses), chat)) or None

    def result_usage(self, result: dict[str, Any]) -> Usage:
        """The CLI's own totals; thoughts (billed as output, not in its ``output_tokens``) from
        the gap its ``total_tokens`` leaves."""
        stats = result.get("stats") or {}
        stats = stats if isinstance(stats, dict) else {}
        prompt, cached = int_of(stats.get("input_tokens")), int_of(stats.get("cached"))
        fresh = int_of(stats.get("input")) if "input" in stats else max(0, prompt - cached)
        output = max(int_of(stats.get("output_tokens")), int_of(stats.get("total_tokens")) - prompt)
        models = stats.get("models") or {}
        model = max(models, key=lambda m: int_of((models[m] or {}).get("output_tokens"))) \
            if isinstance(models, dict) and models else self._model()
        calls = self._calls()
        agrees = (sum(c["input"] for _, c in calls), sum(c["cached"] for _, c in calls),
                  sum(c["output"] + c["thoughts"] for _, c in calls)) == (prompt, cached, output)
        cost = self.cost(calls, model) if agrees else None  # else its totals at one price (prices.with_cost)
        return Usage(input_tokens=fresh, output_tokens=output, cache_read_tokens=cached, model=model,
                     session_id=self.session_id, request_ids=list(self.response_ids),
                     turns=len(self.answers) or len(self.responses) or None, source="result",
                     cost_usd=cost, cost_basis="estimated" if cost is not None else None,
                     # its totals count the calls it read to their end (uiTelemetryService sums the
                     # api_response events): not those its loop detection broke off
                     calls_unfinished=self.calls_unfinished())

    def _calls(self) -> list[tuple[str | None, dict[str, int]]]:
        """Each answered call's model and tokens: from the chat file, or the telemetry where it
        holds more (the chat file writes a function-call answer's tokens only once its tool call
        is recorded, after the tool ran: an answer whose tool was running at a kill is there)."""
        chat = [(a.get("model"), a["tokens"]) for a in self.answers.values() if "tokens" in a]
        told = [(r.get("model"), r) for r in self.responses]
        return told if len(told) > len(chat) else chat

    @staticmethod
    def cost(calls: list[tuple[str | None, dict[str, int]]], model: str | None) -> float | None:
        """The calls at list price, each at its own model's (Gemini CLI's ``auto`` routes a turn
        to a pro or a flash model) and at the long-prompt rate where its prompt was over 200k
        tokens (:func:`~ray_bench.agents.prices.call_usd`); None when a model has no price."""
        total = 0.0
        for named, c in calls:
            usd = call_usd(named if isinstance(named, str) else model, max(0, c["input"] - c["cached"]),
                           c["output"] + c["thoughts"], c["cached"])
            if usd is None:
                return None
            total += usd
        return total if calls else None

    def _model(self) -> str | None:
        by_model: dict[str, int] = {}
        for a in [*self.answers.values(), *self.responses]:
            if isinstance(a.get("model"), str):
                by_model[a["model"]] = by_model.get(a["model"], 0) + (a.get("tokens") or a).get("output", 0)
        return max(by_model, key=lambda k: by_model[k]) if by_model else None

    def usage(self) -> Usage:
        """The sum over its answers (the chat file, or the telemetry where it holds more). None answered:
        nothing was spent if its calls were refused (a refused call is not billed; the call it was
        retrying when cut was refused too, as Claude Code's adapter counts it), otherwise a call
        may have been under way when it was cut, so what it spent is unknown."""
        calls = self._calls()
        counts = [c for _, c in calls]
        if not counts:
            if self.refusals:
                return Usage(session_id=self.session_id, request_ids=list(self.response_ids), turns=0,
                             source="stream")
            return Usage.unknown(session_id=self.session_id, request_ids=list(self.response_ids))
        prompt = sum(c["input"] for c in counts)
        cached = sum(c["cached"] for c in counts)
        output = sum(c["output"] + c["thoughts"] for c in counts)
        model = self._model()
        cost = self.cost(calls, model)
        return Usage(input_tokens=max(0, prompt - cached), output_tokens=output, cache_read_tokens=cached,
                     model=model, session_id=self.session_id, request_ids=list(self.response_ids),
                     turns=len(counts), source="session",
                     cost_usd=cost, cost_basis="estimated" if cost is not None else None,
                     # the telemetry's last 5-s batch (ids of the last answers) is lost at a kill:
                     # no setting of 0.61.0 flushes sooner (BatchLogRecordProcessor's defaults)
                     request_ids_missing=max(0, len(counts) - len(self.response_ids)) or None,
                     # an answer the stream showed whose tokens no record holds yet (the chat file
                     # writes a tool-call answer after its tool ran; the telemetry's last batch
                     # was lost): its charge is not in these numbers
                     call_under_way=self.call_under_way or self.answers_seen > len(counts),
                     calls_unfinished=self.calls_unfinished())


def int_of(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def object_of(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    while start != -1:
        try:
            data = json.loads(text[start:])
        except ValueError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
            continue
        return data if isinstance(data, dict) else None
    return None
