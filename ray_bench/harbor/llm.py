"""A host-side Harbor agent's model calls, seen through LiteLLM: every provider request id (from
the response headers LiteLLM keeps) and its exceptions as ray-bench's error contract. Imports
LiteLLM (the `harbor` extra).

LiteLLM's callbacks are process-wide and a runner process runs several attempts at once, so the
calls are attributed by a context variable set around one attempt's agent: LiteLLM runs its
async logging "in the original task's context" (its logging worker copies the caller's context),
and every task the agent starts inherits it.

A failure whose ``retry-after`` is long (over :data:`LONG_RETRY_AFTER_SEC`, the longest wait of
Harbor's own retries) stops the attempt's agent at once (:attr:`CallLog.stop`): Harbor's LiteLLM
wrapper and Terminus 2 each retry three times 4-15 s apart, nine calls and ~45 s of a cell spent
against an account the provider said to leave alone; the scheduler honours the retry-after by
cooling the account, and the cell goes to another one."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import litellm
import openai
from litellm.integrations.custom_logger import CustomLogger

from ray_bench.agents.base import CliRun, error_from
from ray_bench.models.agent import AgentError, RefusedCall

#: Response headers a provider's request id comes back in, as LiteLLM keeps them.
_ID_HEADERS = ("llm_provider-request-id", "request-id", "llm_provider-x-request-id", "x-request-id")
#: A model call's failure with a longer retry-after (seconds) stops the agent instead of letting
#: its own retries wait (Harbor's LiteLLM wrapper waits 4 s to 15 s between its three tries).
LONG_RETRY_AFTER_SEC = 15.0
#: The error types a provider's retry-after comes with.
_WAITING = frozenset({"rate_limit", "usage_limit", "overloaded"})


@dataclass
class CallLog:
    """One attempt's model calls: how many began and ended, and the request ids seen (billed or refused)."""

    started: int = 0
    ended: int = 0
    request_ids: list[str] = field(default_factory=list)
    #: The calls the provider refused (an error status): their ids and class, not billed.
    refused: list[RefusedCall] = field(default_factory=list)
    #: Prompt tokens written to the provider's cache over the answered calls, where the provider
    #: reports them (Anthropic's ``cache_creation_input_tokens``). LiteLLM counts them inside
    #: ``prompt_tokens`` (with the cache reads), and so does Harbor's context: this takes them out.
    cache_write_tokens: int = 0
    #: The first failure with a long retry-after: the agent is stopped with it.
    stopping: BaseException | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: The attempt's watch (an ``ExecWatch``): each answer is fed to it as one line
    #: (:mod:`ray_bench.harbor.live`), so the watchdog sees a host-side agent's commands live.
    watch: Any = None

    def counts(self) -> dict[str, int]:
        """What :data:`~ray_bench.agents.harbor_evidence.CALLS_FILE` keeps: a call started and
        not ended (cancelled in flight by the timeout: LiteLLM logs no end for a cancelled call,
        ``asyncio.CancelledError`` being no ``Exception``) makes the usage a lower bound."""
        return {"started": self.started, "ended": self.ended, "cache_write_tokens": self.cache_write_tokens}

    async def settled(self, within_sec: float = 10.0) -> None:
        """Wait (bounded) for the logging of calls that already returned: LiteLLM logs a
        success after handing the response back."""
        deadline = time.monotonic() + within_sec
        while self.ended < self.started and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


_CURRENT: contextvars.ContextVar[CallLog | None] = contextvars.ContextVar("ray_bench_harbor_calls", default=None)


class _Recorder(CustomLogger):  # type: ignore[misc,unused-ignore]  # Any where LiteLLM is absent (3.11)
    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        log = _CURRENT.get()
        if log is not None:
            log.started += 1

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        self._end(response_obj, kwargs)
        log = _CURRENT.get()
        if log is not None:
            log.cache_write_tokens += cache_writes_of(response_obj)
        if log is not None and log.watch is not None:
            with contextlib.suppress(Exception):  # an answer the watch cannot read is not the agent's failure
                log.watch.feed("stdout", _answer_of(response_obj))

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        exc = kwargs.get("exception") if isinstance(kwargs, dict) else None
        error = error_of(exc) if isinstance(exc, BaseException) else None
        self._end(response_obj, kwargs, error)
        log = _CURRENT.get()
        if log is None or log.stopping is not None or not isinstance(exc, BaseException):
            return
        if error is not None and error.type in _WAITING and (error.retry_after or 0.0) > LONG_RETRY_AFTER_SEC:
            log.stopping = exc
            log.stop.set()

    @staticmethod
    def _end(response_obj: Any, kwargs: Any, refusal: AgentError | None = None) -> None:
        """One call ended: its request id, billed, or refused when the provider answered it with
        an error status (``refusal``: a 429, a 5xx, a 401; no tokens served, not billed). A failure
        without a status (the connection dropped) keeps its id among the billed: it may be."""
        log = _CURRENT.get()
        if log is None:
            return
        log.ended += 1
        rid = request_id_of(response_obj, kwargs)
        if not rid:
            return
        if refusal is not None and refusal.status is not None:
            if all(r.request_id != rid for r in log.refused):
                log.refused.append(RefusedCall(request_id=rid, status=refusal.status, type=refusal.type))
        elif rid not in log.request_ids:
            log.request_ids.append(rid)


_RECORDER = _Recorder()


def _answer_of(response_obj: Any) -> bytes:
    """One LiteLLM ``ModelResponse`` as the line the watch reads."""
    from ray_bench.harbor.live import answer_line

    choices = getattr(response_obj, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    text = str(getattr(message, "content", None) or "")
    usage = getattr(response_obj, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return answer_line(text, getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None),
                       getattr(details, "cached_tokens", None), getattr(response_obj, "model", None))


def cache_writes_of(response_obj: Any) -> int:
    """One answer's cache writes as LiteLLM's ``Usage`` carries them: ``cache_creation_input_tokens``
    (Anthropic's own field, kept by LiteLLM's Anthropic transformation beside
    ``prompt_tokens_details.cache_creation_tokens``, both already inside ``prompt_tokens``); 0 where
    the provider reports none (OpenAI, Gemini: no write is billed over input)."""
    usage = getattr(response_obj, "usage", None)
    for value in (getattr(usage, "cache_creation_input_tokens", None),
                  getattr(getattr(usage, "prompt_tokens_details", None), "cache_creation_tokens", None)):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def headers_of(exc: BaseException | None) -> list[Any]:
    """A LiteLLM exception's provider response headers: ``litellm_response_headers`` (what the
    provider sent; LiteLLM's own ``response`` on a mapped exception is a stand-in without
    them), then the response's."""
    response = getattr(exc, "response", None)
    found = [getattr(exc, "litellm_response_headers", None), getattr(response, "headers", None)]
    return [h for h in found if h]


def request_id_of(response_obj: Any, kwargs: Any) -> str | None:
    """The provider's request id of one call (success: the response's headers; failure: the
    exception's response headers)."""
    sources: list[Any] = []
    hidden = getattr(response_obj, "_hidden_params", None)
    if isinstance(hidden, dict):
        sources += [hidden.get("additional_headers"), hidden.get("headers")]
    exc = kwargs.get("exception") if isinstance(kwargs, dict) else None
    sources += headers_of(exc)
    for headers in sources:
        if not headers:
            continue
        for name in _ID_HEADERS:
            with contextlib.suppress(AttributeError, TypeError):
                value = headers.get(name)
                if value:
                    return str(value)
    return None


@contextlib.contextmanager
def calls_of_this_attempt() -> Iterator[CallLog]:
    """Record the model calls made in this context (installs the recorder once per process)."""
    if _RECORDER not in litellm.callbacks:
        litellm.callbacks.append(_RECORDER)
    log = CallLog()
    token = _CURRENT.set(log)
    try:
        yield log
    finally:
        _CURRENT.reset(token)


def error_of(exc: BaseException) -> AgentError | None:
    """A LiteLLM exception (the first in the chain) as the error contract the CLI adapters
    produce: 429 with its retry-after, 529/503 overload, 401/403 auth, other 5xx server errors.
    None: not a model call's failure (the agent's own)."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, openai.OpenAIError):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    status = getattr(seen, "status_code", None)
    retry_after: float | None = None
    for headers in headers_of(seen):
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            raw = headers.get("retry-after")
            retry_after = float(raw) if raw is not None else None
        if retry_after is not None:
            break
    message = str(getattr(seen, "message", None) or seen)
    run = CliRun("", "", None, False, now=time.time())
    return error_from(status if isinstance(status, int) else None, message, run, retry_after=retry_after)
