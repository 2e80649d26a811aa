"""LiteLLM's exceptions, as Terminus 2's model calls raise them, become the error contract the
CLI adapters produce (ray_bench.agents.base.error_from), retry-after included; request ids come
from the headers LiteLLM keeps."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

import ray_bench.harbor  # noqa: F401 - first: LiteLLM then reads the price map it ships, offline

pytestmark = pytest.mark.harbor


def _response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/v1/messages"))


def test_litellm_exceptions_map_onto_the_adapters_error_contract() -> None:
    import litellm

    from ray_bench.harbor.llm import error_of

    limited = litellm.RateLimitError("Number of request tokens has exceeded your per-minute rate limit",
                                     llm_provider="anthropic", model="m",
                                     response=_response(429, **{"retry-after": "30"}))
    error = error_of(limited)
    assert error is not None and error.type == "rate_limit" and error.status == 429 and error.retry_after == 30.0
    over = litellm.InternalServerError("Overloaded", llm_provider="anthropic", model="m",
                                       response=_response(529))
    over.status_code = 529
    assert (e := error_of(over)) is not None and e.type == "overloaded"
    auth = litellm.AuthenticationError("invalid x-api-key", llm_provider="anthropic", model="m")
    assert (e := error_of(auth)) is not None and e.type == "auth" and e.status == 401
    server = litellm.InternalServerError("boom", llm_provider="anthropic", model="m", response=_response(500))
    assert (e := error_of(server)) is not None and e.type == "server_error"
    # wrapped by the agent (Harbor re-raises with its own message): the cause is found
    outer = RuntimeError("terminus-2 gave up")
    outer.__cause__ = limited
    assert (e := error_of(outer)) is not None and e.type == "rate_limit"
    assert error_of(ValueError("the agent's own bug")) is None


def test_a_request_id_is_read_from_the_success_headers_or_the_failures_response() -> None:
    from ray_bench.harbor.llm import request_id_of

    ok = SimpleNamespace(_hidden_params={"additional_headers": {"llm_provider-request-id": "req_1"}})
    assert request_id_of(ok, {}) == "req_1"
    failed = SimpleNamespace(response=_response(429, **{"request-id": "req_2"}))
    assert request_id_of(None, {"exception": failed}) == "req_2"
    assert request_id_of(SimpleNamespace(_hidden_params={}), {}) is None


def test_a_mapped_exceptions_headers_are_the_providers_it_kept_not_its_stand_in_response() -> None:
    import litellm

    from ray_bench.harbor.llm import error_of, request_id_of

    # LiteLLM's mapped exception carries a stand-in response without headers; the provider's
    # are in litellm_response_headers (as the anthropic handler raises a 429)
    limited = litellm.RateLimitError("rate limited", llm_provider="anthropic", model="m", response=_response(429))
    limited.litellm_response_headers = httpx.Headers({"retry-after": "90", "request-id": "req_3"})
    error = error_of(limited)
    assert error is not None and error.type == "rate_limit" and error.retry_after == 90.0
    assert request_id_of(None, {"exception": limited}) == "req_3"
