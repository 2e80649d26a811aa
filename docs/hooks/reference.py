"""mkdocs hook: the reference pages are generated from the code at build time (ray_bench/cli/docgen.py).
The files under docs/reference/ are placeholders that say so, for a reader of the plain Markdown."""

from __future__ import annotations

from typing import Any

from ray_bench.cli import docgen

GENERATED = {"reference/cli.md": docgen.cli_reference, "reference/config.md": docgen.config_reference}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    make = GENERATED.get(page.file.src_uri)
    return make() if make is not None else markdown
