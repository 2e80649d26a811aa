"""A host-side Harbor agent's commands, live, for the degeneration watchdog: Terminus 2 runs no
CLI whose output could be streamed, so each model answer LiteLLM hands back (its success
callback, :mod:`ray_bench.harbor.llm`) is fed to the watch as one line, and this reader finds
the commands in it: Terminus 2's ``commands`` (JSON parser) or ``<keystrokes>`` (XML parser),
the keystrokes it is about to type into its tmux pane. The same keystrokes answer after answer
is the agent looping on one command; the tokens so far bound it as a CLI's do. Harbor-free."""

from __future__ import annotations

import json
import re
from typing import Any

from ray_bench.agents.base import LiveEvent, LiveReader, signature
from ray_bench.models.agent import Usage

#: The line's marker: what the LiteLLM callback feeds (never a line an agent could print).
KIND = "ray-bench.harbor.answer"
_XML_KEYS = re.compile(r"<keystrokes[^>]*>(.*?)</keystrokes>", re.DOTALL)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def answer_line(text: str, prompt_tokens: int | None, completion_tokens: int | None,
                cached_tokens: int | None, model: str | None) -> bytes:
    """One model answer as the line :class:`TerminusReader` reads."""
    return (json.dumps({"kind": KIND, "text": text, "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens, "cached_tokens": cached_tokens,
                        "model": model}) + "\n").encode()


def commands_of(text: str) -> list[str]:
    """The keystrokes of one Terminus 2 answer, in order ([] when it names none)."""
    found = _JSON_OBJECT.search(text or "")
    if found is not None:
        try:
            data = json.loads(found.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("commands"), list):
            return [str(c.get("keystrokes", "")) for c in data["commands"] if isinstance(c, dict)]
    return [m.strip("\n") for m in _XML_KEYS.findall(text or "")]


class TerminusReader(LiveReader):
    """Each answer's commands as one tool call (the whole batch: the same batch again is the
    same step again), and the tokens so far."""

    def __init__(self) -> None:
        self._tokens = 0
        self._in = self._out = self._cached = 0
        self._model: str | None = None

    def read(self, line: str) -> LiveEvent | None:
        try:
            data: Any = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("kind") != KIND:
            return None
        prompt, completion, cached = (data.get(k) for k in ("prompt_tokens", "completion_tokens", "cached_tokens"))
        fresh = max(0, (prompt or 0) - (cached or 0))
        self._in += fresh
        self._out += completion or 0
        self._cached += cached or 0
        self._tokens += fresh + (completion or 0)
        self._model = data.get("model") or self._model
        commands = commands_of(str(data.get("text") or ""))
        calls = (signature("keystrokes", commands),) if commands else ()
        return LiveEvent(tool_calls=calls, tokens=self._tokens,
                         usage=Usage(model=self._model, source="stream", input_tokens=self._in,
                                     output_tokens=self._out, cache_read_tokens=self._cached))
