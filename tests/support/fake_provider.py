"""A fake model provider on loopback that the REAL agent CLIs talk to.

It speaks, as the CLIs call them:

- the Anthropic Messages API (``POST /v1/messages``; streaming SSE: ``message_start`` with the
  input usage, a text delta, ``message_delta`` with the output usage, ``message_stop``) and
  Claude's OAuth token endpoint (``POST /v1/oauth/token``, a refresh grant);
- the OpenAI Responses API that ``codex exec`` uses: over a WebSocket first (``GET /v1/responses``
  upgraded; ``response.create`` frames, the stream's events as frames, refusals as error events),
  over HTTPS (``POST /v1/responses``, SSE) after Codex's fallback; refusals with the API's error
  bodies and headers (``openai_error``);
- the Gemini API (``POST /v1beta/models/M:streamGenerateContent?alt=sse`` and
  ``:generateContent``, ``:countTokens``) that ``gemini`` uses (its errors as ``google.rpc.Status``:
  ``unauthorized`` is its 400 ``API_KEY_INVALID``, ``expired`` an OAuth token's 401, ``forbidden`` its 403).

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

from support.fake_openai import WS_GUID, openai_error, openai_events, openai_headers, ws_read, ws_send

Kind = Literal["ok", "rate_limit", "overloaded", "unauthorized", "expired", "server_error", "stall",
               "usage_limit", "forbidden"]


@dataclass(frozen=True)
class Answer:
    kind: Kind = "ok"
    text: str = "Done."
    input_tokens: int = 120
    output_tokens: int = 7
    cache_read_tokens: int = 0
    #: Anthropic: the answer's ``cache_creation_input_tokens`` (prompt written to the cache: billed
    #: at 1.25x input for a 5-minute write, apart from ``input_tokens`` and the cache reads).
    cache_write_tokens: int = 0
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
    #: ok: seconds the answer takes to come, billed when the request is taken (a generation is
    #: billed whether or not the client is still there to read it): a call a client cut in flight.
    delay_sec: float = 0.0


@dataclass
class Served:
    """What the fake billed: successful model answers and their tokens."""

    answers: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
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
            s.cache_write_tokens += answer.cache_write_tokens
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
            if answer.delay_sec:
                time.sleep(answer.delay_sec)  # the handler thread is a daemon: a cut client leaves it here
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
                status, data, headers = openai_error(answer, request_id)
            self._json(status, data, headers)

        def _anthropic(self, a: Answer, model: str, request_id: str, stream: bool) -> None:
            """A Messages API answer. Its ``usage`` as the API reference documents it
            (https://docs.anthropic.com/en/api/messages, "usage"): ``input_tokens`` (uncached),
            ``cache_creation_input_tokens`` (written to the cache), ``cache_read_input_tokens``
            and ``output_tokens``, the input total being the sum of the first three; streamed,
            ``message_start`` carries the input counts and ``message_delta`` the output."""
            msg_id = f"msg_{uuid.uuid4().hex[:24]}"
            usage = {"input_tokens": a.input_tokens, "cache_creation_input_tokens": a.cache_write_tokens,
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
            """A Responses API answer, streamed as server-sent events (``openai_events``)."""
            self._sse(openai_events(fake, a, model), {**openai_headers(request_id), "openai-processing-ms": "412"})

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
                status, data, headers = openai_error(Answer(kind="unauthorized"), request_id)
                self._json(status, data, headers)
                return
            accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            self.send_response(101, "Switching Protocols")
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:24]}")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            while not fake._stop.is_set():
                frame = ws_read(self.rfile)
                if frame is None or frame[0] == 0x8:  # gone, or a close: answer it and end
                    with contextlib.suppress(OSError):
                        ws_send(self.wfile, 0x8, b"")
                    return
                opcode, payload = frame
                if opcode == 0x9:
                    ws_send(self.wfile, 0xA, payload)
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
                for frame in ({"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
                              {"type": "response.completed", "response": {**base, "status": "completed", "output": [],
                                                                          "usage": usage}}):
                    ws_send(self.wfile, 0x1, json.dumps(frame).encode())
                return
            answer, _, request_id = self._choose("openai")
            if answer.kind == "stall":
                time.sleep(3600)
                return
            if answer.kind != "ok":
                status, data, headers = openai_error(answer, request_id)
                event = {"type": "error", "status": status, **(data if isinstance(data, dict) else {}),
                         "headers": headers}
                ws_send(self.wfile, 0x1, json.dumps(event).encode())
                return
            for _, data in openai_events(fake, answer, str(request.get("model") or "")):
                ws_send(self.wfile, 0x1, json.dumps(data).encode())

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
            """An error as the Gemini API answers it (``google.rpc.Status``; the statuses of
            https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes): a per-minute 429
            carries ``QuotaFailure`` and ``RetryInfo.retryDelay`` (the CLI waits that long), a
            ``usage_limit`` is the daily quota (the CLI gives up at once). A bad API key is not a
            401: the API answers 400 ``INVALID_ARGUMENT`` with an ``ErrorInfo`` whose reason is
            ``API_KEY_INVALID`` (as users report it verbatim, e.g. google-gemini/gemini-cli#25198);
            a 401 ``UNAUTHENTICATED`` is an OAuth login's token (``expired``); a 403 a key
            refused (suspended, or without access)."""
            quota = "https://ai.google.dev/gemini-api/docs/rate-limits"
            service = {"service": "generativelanguage.googleapis.com"}
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
                "unauthorized": (400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", [
                    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                     "domain": "googleapis.com", "metadata": service},
                    {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US",
                     "message": "API key not valid. Please pass a valid API key."}]),
                "expired": (401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth "
                            "2 access token, login cookie or other valid authentication credential. See "
                            "https://developers.google.com/identity/sign-in/web/devconsole-project.", [
                                {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                 "reason": "ACCESS_TOKEN_EXPIRED", "domain": "googleapis.com",
                                 "metadata": {**service, "method": "google.ai.generativelanguage.v1beta."
                                              "GenerativeService.StreamGenerateContent"}}]),
                "forbidden": (403, "PERMISSION_DENIED", "Permission denied: Consumer 'api_key:redacted' has been "
                              "suspended.", [
                                  {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "CONSUMER_SUSPENDED",
                                   "domain": "googleapis.com", "metadata": {**service, "consumer": "projects/0"}}]),
            }[a.kind]
            self._json(status, {"error": {"code": status, "message": message, "status": gstatus,
                                          **({"details": details} if details else {})}})

    return Handler
