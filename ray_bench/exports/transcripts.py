"""An adapter's own transcript, read once, as Inspect chat messages or a Harbor ATIF trajectory.

Each CLI adapter's stdout is a transcript (recorded from the real CLIs: tests/agents/fixtures):

- Claude Code's ``--output-format stream-json`` (``ray_bench/agents/claude.py``): assistant messages
  with text and ``tool_use`` blocks, user messages with the ``tool_result`` blocks;
- Codex's ``exec --json`` (``ray_bench/agents/codex.py``): each ``item.completed``, an
  ``agent_message`` the agent's text, a ``command_execution`` (an MCP call, a file change, a web
  search) a call whose result is its output;
- Gemini CLI's ``--output-format stream-json`` (``ray_bench/agents/gemini``): the assistant's
  ``message`` deltas, ``tool_use`` and ``tool_result`` by ``tool_id`` (its ``user`` message is the
  prompt, which the exports write as the sample's input).

The ``command`` agent's log is kept as the agent's log, unconverted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ray_bench.agents.base import json_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from inspect_ai.model import ChatMessage

#: Harbor's trajectory format (harbor/models/trajectories/trajectory.py) this writes.
ATIF_VERSION = "ATIF-v1.2"


@dataclass(frozen=True)
class Call:
    id: str
    function: str
    arguments: dict[str, Any]


@dataclass
class Turn:
    """One message: the agent's (text and tool calls, then the calls' results) or the user's."""

    source: Literal["agent", "user"]
    text: str
    calls: list[Call] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)  # (call id, output)


def claude_turns(stdout: str) -> list[Turn]:
    """The stream's turns in order (other lines are the CLI's bookkeeping: init, result, retries);
    a tool result joins the agent turn that made the call."""
    turns: list[Turn] = []
    for event in (json_line(line) for line in stdout.splitlines()):
        if event is None or event.get("type") not in ("assistant", "user"):
            continue
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        blocks = [b for b in (content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}])
                  if isinstance(b, dict)]
        if event["type"] == "assistant":
            args = [(b, b.get("input")) for b in blocks if b.get("type") == "tool_use"]
            turns.append(Turn("agent", "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text"),
                              [Call(str(b.get("id")), str(b.get("name")), a if isinstance(a, dict) else {"input": a})
                               for b, a in args]))
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                call = str(b.get("tool_use_id"))
                owner = next((t for t in reversed(turns) if any(c.id == call for c in t.calls)), None)
                if owner is not None:
                    owner.results.append((call, _text(b.get("content"))))
            elif b.get("type") == "text":
                turns.append(Turn("user", str(b.get("text", ""))))
    return turns


def codex_turns(stdout: str) -> list[Turn]:
    """``exec --json``'s finished items in order: a message is an agent turn; a call joins the
    agent turn before it (a turn of its own when the call comes first), with its output."""
    turns: list[Turn] = []
    for event in (json_line(line) for line in stdout.splitlines()):
        item = event.get("item") if event is not None and event.get("type") == "item.completed" else None
        if not isinstance(item, dict):
            continue
        kind = str(item.get("type") or "")
        if kind == "agent_message":
            turns.append(Turn("agent", str(item.get("text") or "")))
            continue
        call = _codex_call(kind, item)
        if call is None:
            continue  # reasoning, errors, todo lists: not the conversation
        if not turns or turns[-1].source != "agent":
            turns.append(Turn("agent", ""))
        turns[-1].calls.append(call)
        turns[-1].results.append((call.id, _codex_output(kind, item)))
    return turns


def _codex_call(kind: str, item: dict[str, Any]) -> Call | None:
    ident = str(item.get("id") or "")
    if kind == "command_execution":
        return Call(ident, "shell", {"command": item.get("command")})
    if kind == "mcp_tool_call":
        args = item.get("arguments")
        name = f"{item.get('server')}.{item.get('tool')}"
        return Call(ident, name, args if isinstance(args, dict) else {"input": args})
    if kind == "file_change":
        return Call(ident, "apply_patch", {"changes": item.get("changes")})
    if kind == "web_search":
        return Call(ident, "web_search", {"query": item.get("query")})
    return None


def _codex_output(kind: str, item: dict[str, Any]) -> str:
    if kind == "command_execution":
        code = item.get("exit_code")
        return str(item.get("aggregated_output") or "") + (f"\n[exit {code}]" if code not in (0, None) else "")
    if kind == "mcp_tool_call":
        return _text(item.get("result") if item.get("result") is not None else item.get("error"))
    return str(item.get("status") or "")


def gemini_turns(stdout: str) -> list[Turn]:
    """The stream's assistant text (its deltas joined), each ``tool_use`` on the turn it ends and
    its ``tool_result`` (by ``tool_id``; an error's message when it failed); the user's message is
    the prompt, left to the exports' input."""
    turns: list[Turn] = []
    for event in (json_line(line) for line in stdout.splitlines()):
        kind = event.get("type") if event is not None else None
        if event is None or kind not in ("message", "tool_use", "tool_result"):
            continue
        if kind == "message":
            if event.get("role") == "assistant":
                if not turns or turns[-1].calls:
                    turns.append(Turn("agent", ""))
                turns[-1].text += str(event.get("content") or "")
        elif kind == "tool_use":
            if not turns:
                turns.append(Turn("agent", ""))
            args = event.get("parameters")
            turns[-1].calls.append(Call(str(event.get("tool_id")), str(event.get("tool_name")),
                                        args if isinstance(args, dict) else {"input": args}))
        else:
            call = str(event.get("tool_id"))
            owner = next((t for t in reversed(turns) if any(c.id == call for c in t.calls)), None)
            error = event.get("error")
            output = event.get("output") if event.get("status") != "error" or not isinstance(error, dict) \
                else error.get("message")
            if owner is not None:
                owner.results.append((call, _text(output)))
    return turns


#: Adapters whose stdout is a transcript this module reads, and how.
TRANSCRIPT_ADAPTERS: dict[str, Callable[[str], list[Turn]]] = {
    "claude-code": claude_turns, "codex": codex_turns, "gemini-cli": gemini_turns}


def turns_of(adapter: str | None, stdout: str) -> list[Turn]:
    """The adapter's transcript in ``stdout``; none for an adapter without one."""
    read = TRANSCRIPT_ADAPTERS.get(adapter or "")
    return read(stdout) if read is not None else []


def inspect_messages(turns: list[Turn], model: str) -> list[ChatMessage]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    messages: list[ChatMessage] = []
    for turn in turns:
        if turn.source == "user":
            messages.append(ChatMessageUser(content=turn.text))
            continue
        names = {c.id: c.function for c in turn.calls}
        messages.append(ChatMessageAssistant(
            content=turn.text, model=model,
            tool_calls=[ToolCall(id=c.id, function=c.function, arguments=c.arguments) for c in turn.calls] or None))
        messages += [ChatMessageTool(content=out, tool_call_id=call, function=names.get(call))
                     for call, out in turn.results]
    return messages


def atif_trajectory(turns: list[Turn], *, agent: str, model: str | None, session: str) -> dict[str, Any]:
    """Harbor's ``Trajectory`` (``agent/trajectory.json``, what ``harbor view`` shows as steps)."""
    steps: list[dict[str, Any]] = []
    for i, turn in enumerate(turns, start=1):
        step: dict[str, Any] = {"step_id": i, "source": turn.source, "message": turn.text}
        if turn.source == "agent":
            step["model_name"] = model
            if turn.calls:
                step["tool_calls"] = [{"tool_call_id": c.id, "function_name": c.function, "arguments": c.arguments}
                                      for c in turn.calls]
            if turn.results:
                step["observation"] = {"results": [{"source_call_id": call, "content": out}
                                                   for call, out in turn.results]}
        steps.append(step)
    return {"schema_version": ATIF_VERSION, "session_id": session,
            "agent": {"name": agent, "version": "ray-bench", "model_name": model}, "steps": steps}


def _text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content)
    return json.dumps(content)
