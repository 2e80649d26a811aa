"""A fake model provider on loopback that the REAL agent CLIs talk to.

It speaks, as the CLIs call them:

- the Anthropic Messages API (``POST /v1/messages``; streaming SSE: ``message_start`` with the
  input usage, a text delta, ``message_delta`` with the output usage, ``message_stop``) and
  Claude's OAuth token endpoint (``POST /v1/oauth/token``, a refresh grant);
- the OpenAI Responses API that ``codex exec`` uses: over a WebSocket first (``GET /v1/responses``
  upgraded; ``response.create`` frames, the stream's events as frames, refusals as error events),
  over HTTPS (``POST /v1/responses``, SSE) after Codex's fallback; refusals with the API's error
  bodies and headers (``_openai_error``);
- the Gemini API (``POST /v1beta/models/M:streamGenerateContent?alt=sse`` and
  ``:generateContent``, ``:countTokens``) that ``gemini`` uses (its errors as ``google.rpc.Status``;
  ``forbidden`` is its 403).

Each request takes the next scripted :class:`Answer` (then ``ok`` forever): ``ok``,
``rate_limit`` (429 with the provider's rate-limit headers and ``retry-after``), ``overloaded``
(529 / 503), ``unauthorized`` (401), ``server_error`` (500), ``stall`` (headers never come) and
``usage_limit`` (a subscription's 429 with the reset time in the unified rate-limit headers).
An ``ok`` answer with ``tool`` set is a tool call (Messages API ``tool_use``; Responses API
``function_call``): as the default answer it makes the model call the same tool forever, a
degenerate agent for the watchdog.
Everything served is counted, so a test can compare a report with what the "model" billed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["ok", "rate_limit", "overloaded", "unauthorized", "expired", "server_error", "stall",
               "usage_limit", "forbidden"]


@dataclass(frozen=True)
class Answer:
    kind: Kind = "ok"
    text: str = "Done."
    input_tokens: int = 120
    output_tokens: int = 7
    cache_read_tokens: int = 0
    retry_after: int = 30
    #: usage_limit: when the window resets (epoch seconds); default one hour on.
    reset_at: float | None = None
    #: usage_limit: which subscription window was hit (the unified headers' representative
    #: claim): ``five_hour`` (a session limit) or ``seven_day`` (the weekly limit).
    window: Literal["five_hour", "seven_day"] = "five_hour"
    #: ok: answer with this tool call instead of text (Anthropic ``tool_use``, stop_reason
    #: ``tool_use``); as the default answer, the same call forever (a degenerate model).
    tool: str | None = None
    tool_input: dict[str, Any] | None = None
    #: Gemini: the answer's ``thoughtsTokenCount`` (billed as output; counted apart in Served).
    thoughts_tokens: int = 0


@dataclass
class Served:
    """What the fake billed: successful model answers and their tokens."""

    answers: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    request_ids: list[str] = field(default_factory=list)
    #: The request ids of the calls answered with an error (a provider's request id comes back
    #: on its 429s and 5xx too).
    failed_request_ids: list[str] = field(default_factory=list)
    #: OpenAI Responses API: the ``resp_...`` id of each response served (Codex records these).
    response_ids: list[str] = field(default_factory=list)
    tokens_issued: list[str] = field(default_factory=list)
    refreshes: int = 0
    #: Gemini: the ``thoughtsTokenCount`` of the answers served.
    thoughts_tokens: int = 0


class FakeProvider:
    def __init__(self, default: Answer | None = None, token_ttl_sec: int = 300, host: str = "127.0.0.1") -> None:
        self.default = default or Answer()
        self.script: deque[Answer] = deque()
        self.served = Served()
        self.requests: list[dict[str, Any]] = []
        self.token_ttl_sec = token_ttl_sec
        #: Refresh tokens the token endpoint accepts (a refresh rotates them).
        self.refresh_tokens: set[str] = set()
        #: Access tokens the Messages API accepts, with their expiry (None: any credential).
        self.access_tokens: dict[str, float] | None = None
        #: Which login (label) each issued token belongs to, and what each label was served.
        self.label_of: dict[str, str] = {}
        self.served_by_label: dict[str, int] = {}
        #: A subscription window: the first request of this label is answered usage_limit, with
        #: this reset (epoch seconds) for this window (``seven_day``: the weekly limit).
        self.usage_limit_for: tuple[str, float] | None = None
        self.usage_limit_window: Literal["five_hour", "seven_day"] = "five_hour"
        #: API keys (``x-api-key`` or a bearer token) refused 401 on every call: a broken
        #: account beside a healthy one on the same fake.
        self.refused_keys: set[str] = set()
        #: API keys answered 429 on every call, with this ``retry-after`` (seconds): a rate-limited
        #: account beside a healthy one on the same fake.
        self.limited_keys: dict[str, int] = {}
        self.usage_limit_answered_at: float | None = None
        #: The Responses API over a WebSocket (``GET /v1/responses`` upgraded), as the real API
        #: serves it and Codex tries first; False refuses it (404) so Codex falls back to HTTPS.
        self.websocket = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def then(self, *answers: Answer) -> FakeProvider:
        with self._lock:
            self.script.extend(answers)
        return self

    def next_answer(self) -> Answer:
        with self._lock:
            return self.script.popleft() if self.script else self.default

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def bill(self, answer: Answer, request_id: str) -> None:
        with self._lock:
            s = self.served
            s.answers += 1
            s.input_tokens += answer.input_tokens
            s.output_tokens += answer.output_tokens
            s.cache_read_tokens += answer.cache_read_tokens
            s.thoughts_tokens += answer.thoughts_tokens
            s.request_ids.append(request_id)

    def error(self, kind: str, request_id: str | None = None) -> None:
        with self._lock:
            self.served.errors[kind] = self.served.errors.get(kind, 0) + 1
            if request_id is not None:
                self.served.failed_request_ids.append(request_id)

    def issue_login(self, label: str = "") -> dict[str, Any]:
        """A fresh Claude login (as ``.credentials.json`` holds it) that this fake accepts."""
        with self._lock:
            access = f"sk-ant-oat01-{uuid.uuid4().hex}{uuid.uuid4().hex}"
            refresh = f"sk-ant-ort01-{uuid.uuid4().hex}{uuid.uuid4().hex}"
            self.refresh_tokens.add(refresh)
            if self.access_tokens is not None:
                self.access_tokens[access] = time.time() + self.token_ttl_sec
            self.label_of[access] = self.label_of[refresh] = label
            self.served.tokens_issued += [access, refresh]
        return {"claudeAiOauth": {"accessToken": access, "refreshToken": refresh,
                                  "expiresAt": int((time.time() + self.token_ttl_sec) * 1000),
                                  "scopes": ["user:inference", "user:profile"],
                                  "subscriptionType": "max"}}

    def refresh(self, refresh_token: str) -> dict[str, Any] | None:
        with self._lock:
            if refresh_token not in self.refresh_tokens:
                return None
            self.refresh_tokens.discard(refresh_token)
            label = self.label_of.get(refresh_token, "")
        login = self.issue_login(label)["claudeAiOauth"]
        with self._lock:
            self.served.refreshes += 1
        return {"token_type": "Bearer", "access_token": login["accessToken"],
                "refresh_token": login["refreshToken"], "expires_in": self.token_ttl_sec,
                "scope": "user:inference user:profile"}


def _handler(fake: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            upgrade = self.headers.get("upgrade", "").lower() == "websocket"
            if upgrade and fake.websocket and self.path.split("?", 1)[0].endswith("/responses"):
                self._websocket()
                return
            fake.record({"method": "GET", "path": self.path, "headers": dict(self.headers)})
            self._json(404, {"error": {"type": "not_found_error", "message": "not found"}})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?", 1)[0]
            fake.record({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body})
            if path.endswith("/oauth/token"):
                self._token(body)
            elif path.endswith("/v1/messages/count_tokens"):
                self._json(200, {"input_tokens": 10})
            elif path.endswith("/v1/messages"):
                self._answer("anthropic", body)
            elif path.endswith("/responses"):
                self._answer("openai", body)
            elif path.endswith(":countTokens"):
                self._json(200, {"totalTokens": 10})
            elif ":generateContent" in path or ":streamGenerateContent" in path:
                self._answer("gemini", body)
            else:
                self._json(404, {"error": {"type": "not_found_error", "message": f"no route {path}"}})

        # -- plumbing ----------------------------------------------------------------------
        def _json(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

        def _sse(self, events: list[tuple[str | None, object]], headers: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            for event, data in events:
                chunk = (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()
            self.close_connection = True

        def _token(self, body: dict[str, Any]) -> None:
            answer = fake.refresh(str(body.get("refresh_token", "")))
            if answer is None:
                fake.error("refresh_rejected")
                self._json(400, {"error": "invalid_grant", "error_description": "Invalid refresh token"})
            else:
                self._json(200, answer)

        def _token_of(self) -> str:
            return (self.headers.get("authorization", "").removeprefix("Bearer ").strip()
                    or self.headers.get("x-api-key", ""))

        def _authorised(self, api: str) -> bool:
            if fake.access_tokens is None or api != "anthropic":
                return True
            return fake.access_tokens.get(self._token_of(), 0.0) > time.time()

        def _choose(self, api: str) -> tuple[Answer, str, str]:
            """The next answer for this caller (its key refused or limited, a login's window), its
            label and a request id; an error is counted here, an answer billed."""
            answer = fake.next_answer()
            label = fake.label_of.get(self._token_of(), "")
            limit = fake.usage_limit_for
            if limit is not None and label == limit[0] and fake.usage_limit_answered_at is None:
                fake.usage_limit_answered_at = time.time()
                answer = Answer(kind="usage_limit", reset_at=limit[1], window=fake.usage_limit_window)
            if self._token_of() in fake.refused_keys:
                answer = Answer(kind="unauthorized")
            if self._token_of() in fake.limited_keys:
                answer = Answer(kind="rate_limit", retry_after=fake.limited_keys[self._token_of()])
            if answer.kind == "ok" and not self._authorised(api):
                answer = Answer(kind="expired" if self.headers.get("authorization") else "unauthorized")
            request_id = f"req_{uuid.uuid4().hex[:24]}"
            if answer.kind != "ok":
                fake.error(answer.kind, request_id if answer.kind != "stall" else None)
                return answer, label, request_id
            fake.bill(answer, request_id)
            with fake._lock:
                fake.served_by_label[label] = fake.served_by_label.get(label, 0) + 1
            return answer, label, request_id

        def _answer(self, api: str, body: dict[str, Any]) -> None:
            answer, _, request_id = self._choose(api)
            if answer.kind != "ok":
                self._fail(api, answer, request_id)
                return
            model = str(body.get("model") or self.path.split("/models/")[-1].split(":")[0])
            if api == "anthropic":
                self._anthropic(answer, model, request_id, bool(body.get("stream")))
            elif api == "openai":
                self._openai(answer, model, request_id)
            else:
                self._gemini(answer, model, request_id, "streamGenerateContent" in self.path)

        def _fail(self, api: str, answer: Answer, request_id: str) -> None:
            if answer.kind == "stall":
                time.sleep(3600)  # the client gives up first; the handler thread is a daemon
                return
            if api == "gemini":
                self._gemini_fail(answer)
                return
            status, etype, message = {
                "rate_limit": (429, "rate_limit_error", "Number of request tokens has exceeded your "
                               "per-minute rate limit"),
                "usage_limit": (429, "rate_limit_error", "This request would exceed your account's "
                                "rate limit. Please try again later."),
                "overloaded": (529 if api == "anthropic" else 503, "overloaded_error", "Overloaded"),
                "unauthorized": (401, "authentication_error", "invalid x-api-key"),
                "expired": (401, "authentication_error", "OAuth token has expired. Please obtain a new "
                            "token or refresh your existing token."),
                "server_error": (500, "api_error", "Internal server error"),
            }[answer.kind]
            headers = {"request-id": request_id, "x-request-id": request_id}
            if answer.kind == "rate_limit":
                headers |= {"retry-after": str(answer.retry_after),
                            "anthropic-ratelimit-requests-limit": "50",
                            "anthropic-ratelimit-requests-remaining": "0",
                            "x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": f"{answer.retry_after}s"}
            if answer.kind == "usage_limit":
                reset = int(answer.reset_at or time.time() + 3600)
                short = {"five_hour": "5h", "seven_day": "7d"}[answer.window]
                headers |= {"anthropic-ratelimit-unified-status": "rejected",
                            "anthropic-ratelimit-unified-reset": str(reset),
                            f"anthropic-ratelimit-unified-{short}-status": "rejected",
                            f"anthropic-ratelimit-unified-{short}-reset": str(reset),
                            "anthropic-ratelimit-unified-representative-claim": answer.window}
            if api == "anthropic":
                data: object = {"type": "error", "error": {"type": etype, "message": message},
                                "request_id": request_id}
            elif api == "openai":
                status, data, headers = _openai_error(answer, request_id)
            self._json(status, data, headers)

        def _anthropic(self, a: Answer, model: str, request_id: str, stream: bool) -> None:
            msg_id = f"msg_{uuid.uuid4().hex[:24]}"
            usage = {"input_tokens": a.input_tokens, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": a.cache_read_tokens, "output_tokens": a.output_tokens}
            headers = {"request-id": request_id}
            stop = "tool_use" if a.tool else "end_turn"
            tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
            block: dict[str, Any] = ({"type": "tool_use", "id": tool_id, "name": a.tool, "input": a.tool_input or {}}
                                     if a.tool else {"type": "text", "text": a.text})
            if not stream:
                self._json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                 "content": [block], "stop_reason": stop,
                                 "stop_sequence": None, "usage": usage}, headers)
                return
            if a.tool:  # the input arrives as JSON deltas after an empty tool_use block
                start: dict[str, Any] = {**block, "input": {}}
                delta: dict[str, Any] = {"type": "input_json_delta", "partial_json": json.dumps(a.tool_input or {})}
            else:
                start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": a.text}
            self._sse([
                ("message_start", {"type": "message_start", "message": {
                    "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
                    "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": a.output_tokens}}),
                ("message_stop", {"type": "message_stop"}),
            ], headers)

        def _openai(self, a: Answer, model: str, request_id: str) -> None:
            """A Responses API answer, streamed as server-sent events (``_openai_events``)."""
            self._sse(_openai_events(fake, a, model), {**_openai_headers(request_id), "openai-processing-ms": "412"})

        # -- the Responses API over a WebSocket ---------------------------------------------
        def _websocket(self) -> None:
            """``GET /v1/responses`` upgraded to a WebSocket, as the Responses API serves it and
            Codex uses it first (codex-rs/codex-api/src/endpoint/responses_websocket.rs): each
            ``{"type": "response.create", ...}`` text frame is answered with the same events the
            HTTPS stream carries, one text frame each, up to ``response.completed``; a refusal is
            an error event, ``{"type": "error", "status": 429, "error": {...}, "headers": {...}}``
            (its ``WrappedWebsocketErrorEvent``), and the connection stays open. A key the API does
            not know is refused at the upgrade (HTTP 401), as any request is. No extension is
            agreed (no permessage-deflate), so the client's frames come uncompressed."""
            key = self.headers.get("sec-websocket-key", "")
            if self._token_of() in fake.refused_keys:
                request_id = f"req_{uuid.uuid4().hex[:24]}"
                fake.error("unauthorized", request_id)
                status, data, headers = _openai_error(Answer(kind="unauthorized"), request_id)
                self._json(status, data, headers)
                return
            accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
            self.send_response(101, "Switching Protocols")
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:24]}")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            while not fake._stop.is_set():
                frame = _ws_read(self.rfile)
                if frame is None or frame[0] == 0x8:  # gone, or a close: answer it and end
                    with contextlib.suppress(OSError):
                        _ws_send(self.wfile, 0x8, b"")
                    return
                opcode, payload = frame
                if opcode == 0x9:
                    _ws_send(self.wfile, 0xA, payload)
                    continue
                if opcode != 0x1:
                    continue
                with contextlib.suppress(ValueError):
                    request = json.loads(payload)
                    if isinstance(request, dict) and request.get("type") == "response.create":
                        fake.record({"method": "WS", "path": self.path, "headers": dict(self.headers), "body": request})
                        self._ws_answer(request)

        def _ws_answer(self, request: dict[str, Any]) -> None:
            if request.get("generate") is False:
                # Codex's startup prewarm (codex-rs/core: a ``response.create`` with ``generate:
                # false``, openai/codex#11258): it readies the request's state and asks for no
                # output; answered at once with an empty response, no model call, nothing billed.
                base = {"id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response",
                        "model": str(request.get("model") or ""), "created_at": int(time.time())}
                usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}
                for data in ({"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
                             {"type": "response.completed", "response": {**base, "status": "completed", "output": [],
                                                                         "usage": usage}}):
                    _ws_send(self.wfile, 0x1, json.dumps(data).encode())
                return
            answer, _, request_id = self._choose("openai")
            if answer.kind == "stall":
                time.sleep(3600)
                return
            if answer.kind != "ok":
                status, data, headers = _openai_error(answer, request_id)
                event = {"type": "error", "status": status, **(data if isinstance(data, dict) else {}),
                         "headers": headers}
                _ws_send(self.wfile, 0x1, json.dumps(event).encode())
                return
            for _, data in _openai_events(fake, answer, str(request.get("model") or "")):
                _ws_send(self.wfile, 0x1, json.dumps(data).encode())

        def _gemini(self, a: Answer, model: str, request_id: str, stream: bool) -> None:
            """A ``GenerateContentResponse`` as the Gemini API sends it: the candidate (text, or a
            ``functionCall`` part for a tool answer: Gemini CLI's shell tool is
            ``run_shell_command``), ``usageMetadata`` (``promptTokenCount`` includes the cached
            part; ``thoughtsTokenCount`` is apart from ``candidatesTokenCount``; zero counts are
            left out, as the API does) and a ``responseId`` per call (the id settlement matches:
            it is the request id the fake bills). Streamed (``alt=sse``) in two chunks, the
            usage on the last in full, as the API does."""
            part: dict[str, Any] = ({"functionCall": {"name": a.tool, "args": a.tool_input or {}}}
                                    if a.tool else {"text": a.text})
            usage: dict[str, int] = {"promptTokenCount": a.input_tokens + a.cache_read_tokens,
                                     "candidatesTokenCount": a.output_tokens,
                                     "totalTokenCount": a.input_tokens + a.cache_read_tokens + a.output_tokens
                                     + a.thoughts_tokens}
            if a.cache_read_tokens:
                usage["cachedContentTokenCount"] = a.cache_read_tokens
            if a.thoughts_tokens:
                usage["thoughtsTokenCount"] = a.thoughts_tokens
            final = {"candidates": [{"content": {"parts": [part], "role": "model"}, "finishReason": "STOP",
                                     "index": 0}],
                     "usageMetadata": usage, "modelVersion": model, "responseId": request_id}
            if not stream:
                self._json(200, final)
                return
            first = {"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "index": 0}],
                     "usageMetadata": {"promptTokenCount": usage["promptTokenCount"],
                                       "totalTokenCount": usage["promptTokenCount"]},
                     "modelVersion": model, "responseId": request_id}
            self._sse([(None, first), (None, final)], {})

        def _gemini_fail(self, a: Answer) -> None:
            """An error as the Gemini API answers it (``google.rpc.Status``): a per-minute 429
            carries ``QuotaFailure`` and ``RetryInfo.retryDelay`` (the CLI waits that long), a
            ``usage_limit`` is the daily quota (the CLI gives up at once)."""
            quota = "https://ai.google.dev/gemini-api/docs/rate-limits"
            status, gstatus, message, details = {
                "rate_limit": (429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your "
                               f"plan and billing details. Please retry in {a.retry_after}s.", [
                                   {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                                       {"quotaMetric": "generativelanguage.googleapis.com/generate_content_"
                                        "free_tier_requests",
                                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                                   {"@type": "type.googleapis.com/google.rpc.Help",
                                    "links": [{"description": "Learn more", "url": quota}]},
                                   {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                    "retryDelay": f"{a.retry_after}s"}]),
                "usage_limit": (429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check "
                                "your plan and billing details.", [
                                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                                        {"quotaMetric": "generativelanguage.googleapis.com/generate_content_"
                                         "free_tier_requests",
                                         "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]),
                "overloaded": (503, "UNAVAILABLE", "The model is overloaded. Please try again later.", []),
                "server_error": (500, "INTERNAL", "An internal error has occurred. Please retry or report in "
                                 "https://developers.generativeai.google/guide/troubleshooting", []),
                "unauthorized": (401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", []),
                "expired": (401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", []),
                "forbidden": (403, "PERMISSION_DENIED", "Permission denied: this API key has been suspended.", []),
            }[a.kind]
            self._json(status, {"error": {"code": status, "message": message, "status": gstatus,
                                          **({"details": details} if details else {})}})

    return Handler


#: The OpenAI API's per-minute limits as its headers state them on every answer
#: (https://platform.openai.com/docs/guides/rate-limits, "Rate limits in headers").
_OPENAI_RPM, _OPENAI_TPM = 500, 30000


def _openai_headers(request_id: str, *, remaining_requests: int = _OPENAI_RPM - 1,
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


def _openai_error(answer: Answer, request_id: str) -> tuple[int, object, dict[str, str]]:
    """An OpenAI API refusal as it answers one: ``{"error": {"message", "type", "param", "code"}}``
    with its status (https://developers.openai.com/docs/guides/error-codes; the openai-python
    client reads ``error.code`` / ``error.type``), and its headers. ``usage_limit`` is a ChatGPT
    login's plan limit as the Codex backend answers it: 429 ``{"error": {"type":
    "usage_limit_reached", "plan_type", "resets_at", "resets_in_seconds"}}`` with the
    ``x-codex-primary-*`` / ``x-codex-secondary-*`` windows (codex-rs/core/src/api_bridge.rs
    ``UsageErrorBody``; codex-rs/codex-api/src/rate_limits.rs ``parse_rate_limit``): Codex prints
    "You've hit your usage limit. ... try again at <time>." from it."""
    headers = _openai_headers(request_id)
    if answer.kind == "rate_limit":
        headers |= _openai_headers(request_id, remaining_tokens=0, reset_tokens=f"{answer.retry_after}s") | {
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


def _openai_events(fake: FakeProvider, a: Answer, model: str) -> list[tuple[str | None, object]]:
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
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _ws_read(stream: Any) -> tuple[int, bytes] | None:
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


def _ws_send(stream: Any, opcode: int, payload: bytes) -> None:
    """One unmasked, unfragmented frame from the server (RFC 6455 section 5.2)."""
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
                                      if n < 1 << 16 else bytes([127]) + n.to_bytes(8, "big"))
    stream.write(head + payload)
    stream.flush()
