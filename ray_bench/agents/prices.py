"""List prices of the models the adapters run, for an attempt whose CLI printed no cost.

Claude Code prints its cost only on its result line, so an attempt cut before it (its timeout,
the watchdog) has tokens from its session files and no cost; Codex never prints one. Such an
attempt's cost is *estimated* here from its tokens: ``Usage.cost_basis == "estimated"``, beside
``"reported"`` for the CLI's own figure; Gemini CLI prints none either. A model with no price here
leaves the cost unknown (``None``), never $0. Settlement (``ray-bench settle``) replaces either with
the provider's charge.

Prices are USD per million tokens, public list prices (standard tier, 5-minute cache writes).
The Sonnet row reproduces Claude Code 2.1.197's own ``total_cost_usd`` to the cent's millionth
(tests/agents/test_prices.py against its recorded output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ray_bench.models.agent import Usage


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    #: The price of a call whose prompt (fresh, cache read and written) is over
    #: :data:`LONG_PROMPT_TOKENS` (Gemini's pro models), where it differs.
    long: Price | None = None


#: Gemini's pro models bill a call whose prompt is over this many tokens at a higher rate
#: (https://ai.google.dev/gemini-api/docs/pricing: "prompts <= 200k tokens" / "> 200k").
LONG_PROMPT_TOKENS = 200_000


#: First match wins: a longer name before its prefix (``claude-opus-4-5`` before ``claude-opus-4``).
#: An alias whose price depends on which version it resolves to (``opus``) is left out.
PRICES: tuple[tuple[re.Pattern[str], Price], ...] = tuple((re.compile(p), price) for p, price in (
    (r"claude-opus-4-[5-9].*", Price(5.0, 25.0, 0.50, 6.25)),
    (r"(claude-opus-4|claude-3-opus).*", Price(15.0, 75.0, 1.50, 18.75)),
    (r"(claude-sonnet-4|claude-3-7-sonnet|claude-3-5-sonnet|sonnet).*", Price(3.0, 15.0, 0.30, 3.75)),
    (r"(claude-haiku-4-5|haiku).*", Price(1.0, 5.0, 0.10, 1.25)),
    (r"claude-3-5-haiku.*", Price(0.80, 4.0, 0.08, 1.0)),
    # OpenAI bills a cache write as ordinary input (no surcharge: its cache_write is its input
    # price; Codex counts the writes inside input_tokens, ray_bench.agents.codex); cached input
    # is the cache read.
    (r"(gpt-5(\.1)?-codex-mini|gpt-5-mini).*", Price(0.25, 2.0, 0.025, 0.25)),
    (r"gpt-5-nano.*", Price(0.05, 0.40, 0.005, 0.05)),
    (r"gpt-5(\.1)?(-codex(-max)?)?(-\d{4}-\d{2}-\d{2})?", Price(1.25, 10.0, 0.125, 1.25)),
    (r"gpt-4\.1-mini.*", Price(0.40, 1.60, 0.10, 0.40)),
    (r"(gpt-4\.1|o3)(-\d{4}-\d{2}-\d{2})?", Price(2.0, 8.0, 0.50, 2.0)),
    (r"o4-mini.*", Price(1.10, 4.40, 0.275, 1.10)),
    (r"codex-mini-latest", Price(1.50, 6.0, 0.375, 1.50)),
    # Gemini API (https://ai.google.dev/gemini-api/docs/pricing, paid tier, as LiteLLM 1.110.2's
    # model_prices_and_context_window.json carries it, each entry citing that page; read 7 Dec
    # 2026). The models Gemini CLI 0.61.0 runs (its config/models.ts): its default ``auto``
    # resolves to gemini-3-pro-preview or gemini-3.1-pro-preview (preview access), else
    # gemini-2.5-pro; its flash fallback and router to gemini-3-flash-preview, gemini-3.5-flash or
    # gemini-3.8-flash; its helpers (classifier, summaries) to gemini-3.1-flash-lite or
    # gemini-3.5-flash-lite. Thoughts are billed as output (the adapter counts them there); an
    # implicit cache write costs nothing over input (cache_write is the input price) and a cache
    # read is the context-caching price. The pro models bill a call whose prompt is over 200k
    # tokens at their ``long`` price: the gemini adapter prices each call by its own prompt and
    # model (:func:`call_usd`; an aggregate of calls is priced at the base rate). gemini-3-flash
    # (Code Assist logins, not billed per token) and the aliases (auto, pro, flash) have no
    # price: unknown.
    (r"gemini-3(\.1)?-pro-preview(-customtools)?", Price(2.0, 12.0, 0.20, 2.0, Price(4.0, 18.0, 0.40, 4.0))),
    (r"gemini-3-flash-preview", Price(0.50, 3.0, 0.05, 0.50)),
    (r"gemini-3\.5-flash", Price(1.50, 9.0, 0.15, 1.50)),
    (r"gemini-3\.8-flash", Price(0.75, 3.75, 0.075, 0.75)),
    (r"gemini-3\.1-flash-lite(-preview)?", Price(0.25, 1.50, 0.025, 0.25)),
    (r"gemini-3\.5-flash-lite", Price(0.30, 2.50, 0.03, 0.30)),
    (r"gemini-2\.5-pro", Price(1.25, 10.0, 0.125, 1.25, Price(2.50, 15.0, 0.25, 2.50))),
    (r"gemini-2\.5-flash", Price(0.30, 2.50, 0.03, 0.30)),
    (r"gemini-2\.5-flash-lite", Price(0.10, 0.40, 0.01, 0.10)),
))


def price_of(model: str | None) -> Price | None:
    """The list price of ``model`` (None: not in the table, so its cost cannot be estimated)."""
    if not model:
        return None
    name = model.strip().lower().removesuffix("[1m]").removeprefix("models/")
    return next((price for pattern, price in PRICES if pattern.fullmatch(name)), None)


def estimate_usd(usage: Usage, model: str | None = None) -> float | None:
    """What ``usage``'s tokens cost at list price, by its own model or else ``model`` (the
    arm's); None when the usage is unknown, a count is missing, or the model has no price."""
    price = price_of(usage.model) or price_of(model)
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    if price is None or usage.source == "unknown" or any(c is None for c in counts):
        return None
    fresh, out, read, write = (int(c or 0) for c in counts)
    return round(_usd(price, fresh, out, read, write), 9)


def call_usd(model: str | None, fresh: int, output: int, cache_read: int, cache_write: int = 0) -> float | None:
    """What one model call costs at list price, at the long-prompt rate where its prompt is over
    :data:`LONG_PROMPT_TOKENS` (None: the model has no price)."""
    price = price_of(model)
    if price is None:
        return None
    if price.long is not None and fresh + cache_read + cache_write > LONG_PROMPT_TOKENS:
        price = price.long
    return _usd(price, fresh, output, cache_read, cache_write)


def _usd(price: Price, fresh: int, output: int, cache_read: int, cache_write: int) -> float:
    return (fresh * price.input + output * price.output + cache_read * price.cache_read
            + cache_write * price.cache_write) / 1e6


def with_cost(usage: Usage | None, model: str | None) -> Usage | None:
    """``usage`` with its cost said: the CLI's own (``reported``), else the estimate from its
    tokens (``estimated``), else none (the cost stays unknown); and its :attr:`~Usage.bound` said
    (exact, or a lower bound for a CLI cut mid-turn)."""
    if usage is None:
        return usage
    usage = usage.bounded()
    if usage.cost_basis is not None:
        return usage
    if usage.cost_usd is not None:
        return usage.model_copy(update={"cost_basis": "reported"})
    estimate = estimate_usd(usage, model)
    if estimate is None:
        return usage
    return usage.model_copy(update={"cost_usd": estimate, "cost_basis": "estimated"})
