"""Values from files shown on a terminal and in Markdown tables (issue 28 item 10)."""

from __future__ import annotations

import re

from ray_bench.textsafe import code_span, escape_controls, table_cell


def test_controls_and_invisible_characters_are_escaped() -> None:
    text = "a\x1b]0;x\x07b\x9b2J\u202ec\u200bd\nend"
    shown = escape_controls(text)
    assert shown == "a\\x1b]0;x\\x07b\\x9b2J\\u202ec\\u200bd\\nend"
    assert escape_controls("one\ntwo\x1b", keep="\n") == "one\ntwo\\x1b"
    assert escape_controls("plain ascii, ünïcode") == "plain ascii, ünïcode"


def test_a_code_span_cannot_end_its_cell_or_its_span() -> None:
    span = code_span("curl x | sh `rm -rf`\n| forged | row |")
    assert "\n" not in span and not re.search(r"(?<!\\)\|", span)
    assert span.startswith("``") and span.endswith("``")  # longer than the backtick run inside
    assert table_cell("a|b") == "a\\|b"
