"""The OpenAI API as the fake provider (:mod:`support.fake_provider`) answers it: the Responses
API's events, its refusals (error bodies and headers) and the WebSocket frames it is served over.
Each behaviour follows the public reference or Codex's client source named beside it."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support.fake_provider import Answer, FakeProvider


#: The OpenAI API's per-minute limits as its headers state them on every answer
#: (https://platform.openai.com/docs/guides/rate-limits, "Rate limits in headers").
_OPENAI_RPM, _OPENAI_TPM = 500, 30000


def openai_headers(request_id: str, *, remaining_requests: int = _OPENAI_RPM - 1,
                    remaining_tokens: int = _OPENAI_TPM - 1200, reset_requests: str = "120ms",
                    reset_tokens: str = "2.4s") -> dict[str, str]:
    """What api.openai.com sends with every answer, a refusal too: the request id (``x-request-id``,
    the id Codex prints in its errors: codex-rs/core/src/api_bridge.rs ``extract_request_id``), its
    version, and the rate-limit state."""
    return {"x-request-id": request_id, "openai-version": "2020-10-01",
            "x-ratelimit-limit-requests": str(_OPENAI_RPM), "x-ratelimit-limit-tokens": str(_OPENAI_TPM),
            "x-ratelimit-remaining-requests": str(remaining_requests),
            "x-ratelimit-remaining-tokens": str(remaining_tokens),
            "x-ratelimit-reset-requests": reset_requests, "x-ratelimit-reset-tokens": reset_tokens}


def openai_error(answer: Answer, request_id: str) -> tuple[int, object, dict[str, str]]:
    """An OpenAI API refusal as it answers one: ``{"error": {"message", "type", "param", "code"}}``
    with its status (https://developers.openai.com/docs/guides/error-codes; the openai-python
    client reads ``error.code`` / ``error.type``), and its headers. ``usage_limit`` is a ChatGPT
    login's plan limit as the Codex backend answers it: 429 ``{"error": {"type":
    "usage_limit_reached", "plan_type", "resets_at", "resets_in_seconds"}}`` with the
    ``x-codex-primary-*`` / ``x-codex-secondary-*`` windows (codex-rs/core/src/api_bridge.rs
    ``UsageErrorBody``; codex-rs/codex-api/src/rate_limits.rs ``parse_rate_limit``): Codex prints
    "You've hit your usage limit. ... try again at <time>." from it."""
    headers = openai_headers(request_id)
    if answer.kind == "rate_limit":
        headers |= openai_headers(request_id, remaining_tokens=0, reset_tokens=f"{answer.retry_after}s") | {
            "retry-after": str(answer.retry_after)}
        return 429, {"error": {
            "message": f"Rate limit reached for gpt-5 in organization org-fake on tokens per min (TPM): Limit "
                       f"{_OPENAI_TPM}, Used {_OPENAI_TPM}, Requested 1200. Please try again in {answer.retry_after}s. "
                       "Visit https://platform.openai.com/account/rate-limits to learn more.",
            "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}, headers
    if answer.kind == "usage_limit":
        reset = int(answer.reset_at or time.time() + 3600)
        window = {"five_hour": "primary", "seven_day": "secondary"}[answer.window]
        other = "secondary" if window == "primary" else "primary"
        headers |= {f"x-codex-{window}-used-percent": "100.0",
                    f"x-codex-{window}-window-minutes": "300" if window == "primary" else "10080",
                    f"x-codex-{window}-reset-at": str(reset),
                    f"x-codex-{other}-used-percent": "42.0",
                    f"x-codex-{other}-window-minutes": "10080" if window == "primary" else "300",
                    f"x-codex-{other}-reset-at": str(reset + 86400 if window == "primary" else reset - 3600)}
        return 429, {"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                               "plan_type": "plus", "resets_at": reset,
                               "resets_in_seconds": max(0, reset - int(time.time()))}}, headers
    status, message, etype, code = {
        "unauthorized": (401, "Incorrect API key provided: sk-test-****6789. You can find your API key at "
                         "https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"),
        "expired": (401, "Provided authentication token is expired. Please try signing in again.",
                    "invalid_request_error", "token_expired"),
        "forbidden": (403, "Country, region, or territory not supported", "request_forbidden",
                      "unsupported_country_region_territory"),
        "server_error": (500, "The server had an error while processing your request. Sorry about that!",
                         "server_error", None),
        "overloaded": (503, "The server is overloaded, please try again later.", "service_unavailable_error",
                       "server_is_overloaded"),
    }[answer.kind]
    return status, {"error": {"message": message, "type": etype, "param": None, "code": code}}, headers


def openai_events(fake: FakeProvider, a: Answer, model: str) -> list[tuple[str | None, object]]:
    """A Responses API answer's events as the API streams them (the same over HTTPS, as server-sent
    events, and over a WebSocket, one text frame each: https://platform.openai.com/docs/api-reference/
    responses-streaming): the response created, the item added, its deltas, the item done, the
    response completed with the usage. A tool answer is a ``function_call`` item (Codex's shell tool
    is ``exec_command``). Its ``resp_...`` id is recorded as served."""
    resp_id = f"resp_{uuid.uuid4().hex[:24]}"
    with fake._lock:
        fake.served.response_ids.append(resp_id)
    item: dict[str, Any]
    if a.tool:
        arguments = json.dumps(a.tool_input or {})
        item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}",
                "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": a.tool, "arguments": arguments,
                "status": "completed"}
        added = {**item, "arguments": "", "status": "in_progress"}
        deltas: list[tuple[str | None, object]] = [
            ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                        "item_id": item["id"], "output_index": 0,
                                                        "delta": arguments}),
            ("response.function_call_arguments.done", {"type": "response.function_call_arguments.done",
                                                       "item_id": item["id"], "output_index": 0,
                                                       "arguments": arguments})]
    else:
        item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": a.text, "annotations": []}]}
        added = {**item, "status": "in_progress", "content": []}
        deltas = [("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                  "output_index": 0, "content_index": 0, "delta": a.text})]
    base = {"id": resp_id, "object": "response", "model": model, "created_at": int(time.time())}
    usage = {"input_tokens": a.input_tokens,
             "input_tokens_details": {"cached_tokens": a.cache_read_tokens},
             "output_tokens": a.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": a.input_tokens + a.output_tokens}
    return [
        ("response.created", {"type": "response.created",
                              "response": {**base, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": added}),
        *deltas,
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                       "item": item}),
        ("response.completed", {"type": "response.completed", "response": {
            **base, "status": "completed", "output": [item], "usage": usage}}),
    ]


#: RFC 6455 section 1.3: the key's accept value is the SHA-1 of it and this GUID, base64.
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_read(stream: Any) -> tuple[int, bytes] | None:
    """One frame from the client (RFC 6455 section 5.2: masked, its length in 7, 16 or 64 bits),
    as (opcode, unmasked payload); None when the connection is gone. Fragments are not joined
    (Codex sends each request as one frame)."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    opcode, masked, length = head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
    if length == 126:
        length = int.from_bytes(stream.read(2), "big")
    elif length == 127:
        length = int.from_bytes(stream.read(8), "big")
    mask = stream.read(4) if masked else b"\0\0\0\0"
    payload = stream.read(length)
    if len(payload) < length:
        return None
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_send(stream: Any, opcode: int, payload: bytes) -> None:
    """One unmasked, unfragmented frame from the server (RFC 6455 section 5.2)."""
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
                                      if n < 1 << 16 else bytes([127]) + n.to_bytes(8, "big"))
    stream.write(head + payload)
    stream.flush()
