"""Credential-looking values in config files are refused without being echoed.

A plan names credentials (env var names, HOME directories); it never holds a value. A value
that looks like a key -- a known provider prefix, a long high-entropy token, or the value of
one of the accounts' route variables -- in any field of a suite, accounts or selection file
is refused at load time, before it can reach a plan, a receipt or an error message. What is
shown of it is :func:`fingerprint`: its first four characters and its length.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ray_bench.errors import fingerprint

# Known shapes, from the providers' own documentation of their key formats.
_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])("
    r"sk-ant-[A-Za-z0-9_-]{8,}"             # Anthropic (sk-ant-api03-..., sk-ant-oat01-...)
    r"|sk-[A-Za-z0-9_-]{16,}"               # OpenAI and OpenAI-compatible (sk-proj-..., sk-...)
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"           # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{20,}"          # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprse]-[A-Za-z0-9-]{10,}"       # Slack tokens
    r"|AIza[0-9A-Za-z_-]{30,}"              # Google API keys
    r"|glpat-[A-Za-z0-9_-]{20,}"            # GitLab
    r"|hf_[A-Za-z0-9]{30,}"                 # Hugging Face
    r"|dtn_[A-Za-z0-9]{20,}"                # Daytona
    r")")
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
#: Bits per character above which a 32+ character token is taken for a key. Hex digests (4.0
#: at most) and English identifiers (under 4) stay below it; random base62/64 keys of 32+
#: characters measure 4.6-5.5.
_ENTROPY_BITS = 4.3
#: Route values shorter than this are not searched for (they would match ordinary words).
_MIN_ROUTE_VALUE = 8


def _entropy(token: str) -> float:
    counts: dict[str, int] = {}
    for char in token:
        counts[char] = counts.get(char, 0) + 1
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _classes(token: str) -> int:
    return sum(1 for test in (str.islower, str.isupper, str.isdigit) if any(test(c) for c in token))


def looks_like_secret(value: str, route_values: Iterable[str] = ()) -> tuple[str, str] | None:
    """(kind, shown part) when ``value`` holds something credential-like, else None."""
    for secret in route_values:
        if len(secret) >= _MIN_ROUTE_VALUE and secret in value:
            return "the value of a route variable", fingerprint(secret)
    found = _PREFIXES.search(value)
    if found:
        return "a credential", fingerprint(found.group(0))
    # A filesystem path is judged segment by segment: a checkout under a random temporary
    # directory (``/tmp/tmp.Uerm9gL0TZ/p/tests/...``) measured as one 100-character token
    # above the threshold, while a key kept as one long segment is still found.
    path_like = value.startswith(("/", "./", "../", "~/")) and not any(c.isspace() for c in value)
    for match in _TOKEN.finditer(value):
        token = match.group(0)
        if not path_like and (token.startswith("/") or "//" in token):
            continue  # a path or URL
        parts = token.split("/") if path_like else [token]
        for part in parts:
            if len(part) >= 32 and _classes(part) == 3 and _entropy(part) >= _ENTROPY_BITS:
                return "a high-entropy token", fingerprint(part)
    return None


def _walk(data: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string (keys too) in parsed YAML/JSON, in document order. Aliases were bounded by
    the loader; shared nodes are visited once."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, loc)]
    seen: set[int] = set()
    while stack:
        item, where = stack.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        children: list[tuple[Any, tuple[str | int, ...]]] = []
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str):
                    children.append((key, (*where, key)))
                children.append((value, (*where, str(key))))
        elif isinstance(item, list):
            children = [(value, (*where, i)) for i, value in enumerate(item)]
        stack.extend(reversed(children))  # popped in the file's order: problems read top to bottom


def find_secrets(data: Any, route_values: Iterable[str] = ()) -> list[tuple[tuple[str | int, ...], str, str]]:
    """(location, kind, shown) of each credential-looking string in ``data``."""
    values = [v for v in route_values if len(v) >= _MIN_ROUTE_VALUE]
    found = []
    for loc, text in _walk(data, ()):
        hit = looks_like_secret(text, values)
        if hit is not None:
            found.append((loc, *hit))
    return found


def route_values(route_envs: Iterable[Mapping[str, str]], environ: Mapping[str, str]) -> list[str]:
    """The values of every route's variables in ``environ`` (they are searched for, never shown)."""
    return sorted({environ[source] for env in route_envs for source in env.values()
                   if environ.get(source) and len(environ[source]) >= _MIN_ROUTE_VALUE})


def shown_field(loc: tuple[str | int, ...]) -> str:
    """A dotted field path in which a key that is itself a secret is shown as its fingerprint."""
    parts = []
    for part in loc:
        text = str(part)
        hit = looks_like_secret(text) if isinstance(part, str) else None
        parts.append(f"<{hit[1]}>" if hit else text)
    return ".".join(parts) or "(top level)"
