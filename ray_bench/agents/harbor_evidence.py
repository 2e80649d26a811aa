"""A Harbor agent's evidence as ray-bench's usage and error contracts, read from what
:mod:`ray_bench.harbor.run` kept under the attempt's ``harbor/`` directory. Harbor-free: the
files are plain JSON, so the 3.11 side can read them too."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from ray_bench.models.agent import AgentError, AgentReport, CostBasis, RefusedCall, Usage

#: The attempt directory's Harbor trial directory (Harbor's ``TrialPaths`` layout below it).
HARBOR_DIR = "harbor"
#: Harbor's ``AgentContext`` after ``populate_context_post_run``.
CONTEXT_FILE = "agent-context.json"
#: The agent's uncaught failure (a traceback), when it had one.
ERROR_FILE = "agent-error.json"
#: Every provider request id the agent's model calls returned, one a line.
REQUEST_IDS_FILE = "request-ids.txt"
#: The calls the provider refused (an error status: not billed), one ``RefusedCall`` JSON a line.
REFUSED_FILE = "refused-calls.jsonl"
#: A host-side agent's model calls as LiteLLM showed them (:class:`ray_bench.harbor.llm.CallLog`):
#: ``started`` and ``ended`` counts, and the answers' ``cache_write_tokens``. A call started and
#: never ended was in flight when the timeout (or a stop) cancelled the agent: Terminus 2 adds a
#: call's usage to its context only once its response is back (harbor/llms/chat.py), so what it
#: cost is in no record.
CALLS_FILE = "model-calls.json"
#: An installed agent's CLI as ray-bench's own adapter of it reads its output and sessions (the
#: usage contract): the usage of a run Harbor's context could not total (the watchdog cut it).
CLI_USAGE_FILE = "cli-usage.json"


def harbor_report(trial_dir: Path, model: str | None) -> AgentReport:
    """The usage contract from the ``AgentContext`` (Harbor's ``n_input_tokens`` includes the
    cached ones, read and written; ray-bench's ``input_tokens`` does not) and the request ids; None for an agent
    that called no model (the context is empty); unknown counts stay absent, never zero."""
    context = _read(trial_dir / CONTEXT_FILE)
    request_ids = _lines(trial_dir / REQUEST_IDS_FILE)
    usage: Usage | None = None
    calls = _read(trial_dir / CALLS_FILE)
    cli = _read(trial_dir / CLI_USAGE_FILE)
    if cli and (context.get("n_output_tokens") is None or cli.get("source") != "result"):
        # Harbor totals an installed agent's usage from its session, as if it had finished; a
        # run cut short (the watchdog, the timeout) printed no result, and the CLI's adapter
        # reads what it left: from the session or the stream, unfinished messages marked.
        usage = Usage.model_validate({**cli, "request_ids": request_ids, "model": cli.get("model") or model})
    elif context.get("n_input_tokens") is not None or context.get("n_output_tokens") is not None or request_ids:
        total_in, cached = context.get("n_input_tokens"), context.get("n_cache_tokens")
        # The cache writes Harbor's total holds: a host-side agent's from its LiteLLM calls (as
        # LiteLLM's prompt_tokens does), an installed CLI's as its adapter read them (Harbor's
        # Claude Code totals input + cache read + cache creation, harbor/agents/installed/
        # claude_code.py; Codex's writes are inside its input, 0 apart).
        writes = (cli or calls).get("cache_write_tokens")
        writes = writes if isinstance(writes, int) else None
        fresh = total_in - (cached or 0) - (writes or 0) if isinstance(total_in, int) else None
        cost = context.get("cost_usd")
        # An installed CLI's own cost (Claude Code's) is reported; where the CLI printed none
        # (Codex), Harbor priced its tokens from LiteLLM's price map: an estimate.
        basis: CostBasis = "estimated" if cli and cli.get("cost_usd") is None else "reported"
        if cost is None and total_in == 0 and context.get("n_output_tokens") == 0:
            cost, basis = 0.0, "estimated"  # every call refused (a 429, a 5xx): no token was billed
        usage = Usage(input_tokens=fresh, output_tokens=context.get("n_output_tokens"), cache_read_tokens=cached,
                      cache_write_tokens=writes, cost_usd=cost, cost_basis=basis if cost is not None else None,
                      model=model, request_ids=request_ids, source="result")
    started, ended = calls.get("started"), calls.get("ended")
    cut = max(0, started - ended) if isinstance(started, int) and isinstance(ended, int) else 0
    if cut:
        if usage is None or (not request_ids and not any((usage.input_tokens, usage.output_tokens,
                                                          usage.cache_read_tokens))):
            # nothing came back before the cut, so nothing says what the call in flight spent
            usage = Usage.unknown(request_ids=request_ids).model_copy(update={"model": model})
        usage = usage.model_copy(update={"calls_unfinished": cut})
    refused = _refused(trial_dir / REFUSED_FILE)
    if usage is None and refused:
        # Refused throughout (every call an error status): no token was served or billed.
        usage = Usage(model=model, turns=0, cost_usd=0.0, cost_basis="estimated", source="result")
    if usage is not None and refused:
        usage = usage.model_copy(update={"refused": refused})
    failure = _read(trial_dir / ERROR_FILE)
    error = None
    if failure.get("error"):
        error = AgentError.model_validate(failure["error"])
    elif failure.get("traceback"):
        error = AgentError(type="agent", message=str(failure["traceback"]).strip()[-500:])
    return AgentReport(usage=usage, error=error)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _refused(path: Path) -> list[RefusedCall]:
    out: list[RefusedCall] = []
    for line in _lines(path):
        with contextlib.suppress(ValueError):
            out.append(RefusedCall.model_validate_json(line))
    return out
