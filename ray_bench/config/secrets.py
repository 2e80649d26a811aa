"""Credential-looking values in config files are refused without being echoed.

A plan names credentials (env var names, HOME directories); it never holds a value. A value
that looks like a key -- a known provider prefix, a long high-entropy token, or the value of
one of the accounts' route variables -- in any field of a suite, accounts or selection file
is refused at load time, before it can reach a plan, a receipt or an error message. What is
shown of it is :func:`fingerprint`: its first four characters and its length.

Known key shapes and route values are looked for everywhere. A high-entropy token only
counts where a value reaches an agent or a command (env values, commands, arguments, free
text an operator types): benchmarks name their tasks by commit hashes, instance ids and
UUIDs (SWE-bench Pro's ``instance_NodeBB__NodeBB-76c6e302...-vd59a572...``), and a task id,
a path or a selection entry is never a place a key is handed to anyone. Even there a token
made only of words, digits and hex runs (an id's shape) is not taken for a key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ray_bench.errors import UserInputError, fingerprint

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


#: Field names whose values reach an agent or a command: where a high-entropy token counts.
AGENT_FIELDS = frozenset({"env", "command", "probe_command", "agent_args", "args", "headers", "url",
                          "verifier_env", "healthcheck"})
_ID_PART = re.compile(r"[A-Za-z]+|[A-Za-z]?[0-9A-Fa-f]+")
#: A word that is a filesystem path, bare, quoted or an option's value (``--out=/tmp/x``).
_PATH_WORD = re.compile(r"""^(?:[\w.-]*=)?["']?(?:/|\./|\.\./|~/)""")


def identifier_shaped(token: str) -> bool:
    """A token whose every ``-``/``_``/``.``-separated part is letters only, or hex digits
    (after at most one letter, as in ``v059c6fd...``): how benchmarks spell ids and digests,
    never how a random key is drawn (mixed letters and digits in one run)."""
    parts = [p for p in re.split(r"[-_.]+", token) if p]
    return bool(parts) and all(_ID_PART.fullmatch(p) for p in parts)


def looks_like_secret(value: str, route_values: Iterable[str] = (), *,
                      entropy: bool = True) -> tuple[str, str] | None:
    """(kind, shown part) when ``value`` holds something credential-like, else None.
    ``entropy=False`` looks for known shapes and route values only (ids, paths, names)."""
    for secret in route_values:
        if len(secret) >= _MIN_ROUTE_VALUE and secret in value:
            return "the value of a route variable", fingerprint(secret)
    found = _PREFIXES.search(value)
    if found:
        return "a credential", fingerprint(found.group(0))
    if not entropy:
        return None
    # A filesystem path is judged segment by segment: a checkout under a random temporary
    # directory (``/tmp/tmp.Uerm9gL0TZ/p/tests/...``) measured as one 100-character token
    # above the threshold, while a key kept as one long segment is still found. Judged word by
    # word, so a path inside a command (``test -f /tmp/ray-bench-tests.8qBdVB/...``: its
    # ``8qBdVB/main/test_...`` measured 4.3 bits as one token) is a path too.
    for word in value.split():
        path_like = _PATH_WORD.match(word) is not None
        for match in _TOKEN.finditer(word):
            token = match.group(0)
            if not path_like and (token.startswith("/") or "//" in token):
                continue  # a path or URL
            parts = token.split("/") if path_like else [token]
            for part in parts:
                if len(part) >= 32 and _classes(part) == 3 and not identifier_shaped(part) \
                        and _entropy(part) >= _ENTROPY_BITS:
                    return "a high-entropy token", fingerprint(part)
    return None


def _walk(data: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str, bool]]:
    """Every string (keys too) in parsed YAML/JSON, in document order, with whether its field
    :func:`reaches_a_command` (carried down the walk: a plan's tens of thousands of fields are
    not each searched from the top). Aliases were bounded by the loader; shared nodes are
    visited once."""
    stack: list[tuple[Any, tuple[str | int, ...], bool]] = [(data, loc, reaches_a_command(loc))]
    seen: set[int] = set()
    while stack:
        item, where, reaches = stack.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        children: list[tuple[Any, tuple[str | int, ...], bool]] = []
        if isinstance(item, str):
            yield where, item, reaches
        elif isinstance(item, dict):
            for key, value in item.items():
                below = reaches or _names_a_command(str(key))
                if isinstance(key, str):
                    children.append((key, (*where, key), below))
                children.append((value, (*where, str(key)), below))
        elif isinstance(item, list):
            children = [(value, (*where, i), reaches) for i, value in enumerate(item)]
        stack.extend(reversed(children))  # popped in the file's order: problems read top to bottom


def _names_a_command(part: str | int) -> bool:
    return isinstance(part, str) and part in AGENT_FIELDS


def reaches_a_command(loc: tuple[str | int, ...]) -> bool:
    """Whether the field at ``loc`` is handed to an agent or a command (see AGENT_FIELDS): a part
    of its path names one."""
    return any(_names_a_command(part) for part in loc)


def find_secrets(data: Any, route_values: Iterable[str] = (), *, everywhere: bool = False) -> list[
        tuple[tuple[str | int, ...], str, str]]:
    """(location, kind, shown) of each credential-looking string in ``data``: known shapes and
    route values anywhere, high-entropy tokens where :func:`reaches_a_command` (or anywhere
    with ``everywhere``)."""
    values = [v for v in route_values if len(v) >= _MIN_ROUTE_VALUE]
    found = []
    # a plan repeats its strings (5,000 tasks' same defaults): each judged once per kind of look
    judged: dict[tuple[str, bool], tuple[str, str] | None] = {}
    for loc, text, reaches in _walk(data, ()):
        entropy = everywhere or reaches
        hit = judged.get((text, entropy), _UNJUDGED)
        if hit is _UNJUDGED:
            hit = judged[(text, entropy)] = looks_like_secret(text, values, entropy=entropy)
        if hit is not None:
            found.append((loc, *hit))
    return found


_UNJUDGED: Any = object()


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


def shown_path(path: str) -> str:
    """A path in which a segment that looks like a key (a task directory named like one) is
    shown as its fingerprint: an error's "where" must not print what it refuses."""
    return "/".join(f"<{hit[1]}>" if (hit := looks_like_secret(part, entropy=False)) else part
                    for part in path.split("/"))


def refuse_operator_text(fields: Mapping[str, str | None], route_envs: Iterable[Mapping[str, str]] = (),
                         environ: Mapping[str, str] | None = None) -> None:
    """The one check of free text an operator types (``--reason``, ``--by``, ``--hypothesis``):
    no credential shape, and none of the values the routes of ``route_envs`` (the plan's or the
    accounts file's ``route.env``) have in ``environ`` (this process's environment): a live key
    of no known shape is still a key (issue 58: one pasted into ``pause --reason`` was stored in
    the pause record and the ledger and printed by ``status``)."""
    values = route_values(route_envs, os.environ if environ is None else environ)
    for option, value in fields.items():
        refuse_secret_text(value, option, values)


def refuse_secret_text(value: str | None, option: str, route_values: Iterable[str] = (), *,
                       entropy: bool = True) -> None:
    """Free text an operator types that is stored or printed (a reason, ``--by``, a
    hypothesis, a run id) is checked as a config value that reaches a command: a key pasted
    there would live for good in the insert-only ledger and in every report."""
    if not value:
        return
    hit = looks_like_secret(value, route_values, entropy=entropy)
    if hit is not None:
        kind, shown = hit
        raise UserInputError(f"{option} holds what looks like {kind} ({shown})", where=option,
                             fix="never type a secret into a command line: say what changed in words")
