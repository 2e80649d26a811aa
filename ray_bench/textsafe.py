"""Text from files and options made safe for a terminal and for Markdown tables.

A task name, an arm command or a reason is written by whoever wrote the file: raw ESC/OSC
bytes in it can hide or rewrite what ``cat receipt.md`` shows (a ``curl ... | sh`` behind a
cursor move), and a newline or ``|`` in a table cell forges rows. Every such value is shown
with its control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``), and a command in a
Markdown code span that no backtick or pipe inside it can end.
"""

from __future__ import annotations

import html
import re

#: C0 and C1 controls and DEL, and the invisible format characters (bidi overrides,
#: zero-width spaces) that reorder or hide what a terminal shows.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str, *, keep: str = "") -> str:
    """``text`` with every control and invisible format character written as an escape,
    except those in ``keep`` (``"\\n"`` for text that is meant to have lines)."""
    if keep:
        return "".join(c if c in keep else _UNSAFE.sub(_escaped, c) for c in text)
    return _UNSAFE.sub(_escaped, text)


def table_cell(text: str) -> str:
    """A value for a Markdown table cell: one line, and a ``|`` that cannot end the cell."""
    return escape_controls(text).replace("|", "\\|")


def code_span(text: str) -> str:
    """``text`` as an inline code span inside a table: fenced by more backticks than any run
    inside it, its pipes escaped (GFM splits rows before it reads code spans)."""
    safe = table_cell(text)
    longest = max((len(run) for run in re.findall(r"`+", safe)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if safe.startswith("`") or safe.endswith("`") else ""
    return f"{fence}{pad}{safe}{pad}{fence}"


def is_utf8(name: str) -> bool:
    """A file name as Python read it is valid UTF-8 (one that is not holds lone surrogates,
    ``surrogateescape``'s stand-ins for its bytes, which no UTF-8 writer, terminal or hash of
    its text can take)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(name: str) -> str:
    """A file name for a message: its bytes that are not UTF-8 as ``\\xff``, its controls escaped."""
    if is_utf8(name):
        return escape_controls(name)
    raw = name.encode("utf-8", "surrogateescape")
    return escape_controls(raw.decode("utf-8", "backslashreplace"))


def html_text(text: str) -> str:
    """Text for HTML: controls and bidi overrides escaped as in the terminal and in Markdown
    (``html.escape`` leaves U+202E to reorder what a browser shows), then HTML-escaped."""
    return html.escape(escape_controls(text))
