"""Bounded reading of every file ray-bench parses: a size limit, a YAML alias-expansion
limit, a nesting limit and duplicate keys refused with both line numbers.

A YAML alias is a shared node: ``yaml.compose`` builds a 1 KB "billion laughs" document in
microseconds, but anything that walks it as a tree (the line index, pydantic validation,
``json.dumps``) visits every expanded path: nine levels of nine aliases are 387 million
nodes, which took 16 GB before this module existed. The expanded size is counted on the
shared graph (memoised per node, so the count itself is linear) and refused above
:data:`MAX_EXPANDED_NODES` before anything walks the tree.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from ray_bench.errors import UserInputError

#: Suites, accounts, catalogs: hand-written files; the largest real one is a few KiB.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Selection files list task ids; 16 MiB holds far more tasks than any benchmark has.
MAX_SELECTION_BYTES = 16 * 1024 * 1024
#: A 100,000-cell plan is 8.6 MiB (tests/perf/README.md).
MAX_PLAN_BYTES = 64 * 1024 * 1024
#: Files ray-bench writes for itself (pause requests, halts, holds, HOME logins): a few KiB.
MAX_STATE_BYTES = 1024 * 1024
#: Nodes after expanding every alias; a 10,000-task suite written out is ~100,000 nodes.
MAX_EXPANDED_NODES = 1_000_000
#: Nesting depth of any document; config files nest 5 levels at most.
MAX_DEPTH = 64

Loc = tuple[str | int, ...]


def read_bounded(path: Path, error: type[UserInputError], limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of ``path``, refused (one line) when missing, unreadable or over ``limit``."""
    try:
        # opened without blocking and checked to be a regular file before a byte is read:
        # a FIFO would block the read forever, /dev/zero or a sparse file cost ``limit``
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(st.st_mode):
                raise error("is not a regular file (a FIFO, socket or device)", where=str(path),
                            fix="name a regular file")
            if st.st_size > limit:
                raise error(f"file is larger than {limit // (1024 * 1024)} MiB", where=str(path),
                            fix="this is not a file ray-bench writes or expects; check the path")
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise error("file not found", where=str(path), fix="check the path") from None
    except IsADirectoryError:
        raise error("is a directory, not a file", where=str(path), fix="name the file") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", where=str(path), fix="check the path") from None
    if len(data) > limit:
        raise error(f"file is larger than {limit // (1024 * 1024)} MiB", where=str(path),
                    fix="this is not a file ray-bench writes or expects; check the path")
    return data


def read_capped(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a file something else wrote (an agent, a verifier); None
    when it is larger. Missing or unreadable files raise OSError."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def load_state_json(path: Path, limit: int = MAX_STATE_BYTES) -> Any:
    """A small JSON file ray-bench writes for itself, read within ``limit`` bytes. A missing
    file raises FileNotFoundError (OSError for other read failures); one that is larger, not
    UTF-8, not JSON or nested too deep raises ValueError, so each caller decides whether an
    unreadable record fails closed."""
    data = read_capped(path, limit)
    if data is None:
        raise ValueError(f"{path.name} is larger than {limit} bytes")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{path.name} is nested too deep") from None


def read_text_bounded(path: Path, error: type[UserInputError], limit: int = MAX_CONFIG_BYTES) -> str:
    data = read_bounded(path, error, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", where=str(path), fix="save the file as UTF-8") from None


def parse_yaml(text: str, path: Path, error: type[UserInputError]) -> tuple[Any, dict[Loc, int]]:
    """Parse one YAML document (JSON is YAML) within the bounds; return the data and the line
    of every key. Duplicate keys are refused with both lines."""
    loader = _DepthLimitedLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            _check_size(node, path, error)
            lines: dict[Loc, int] = {}
            _index(node, (), lines, set(), path, error)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"invalid YAML: {problem}", where=where, fix="fix the syntax") from None
    except (RecursionError, _TooDeep):
        raise error(f"nested more than {MAX_DEPTH} levels deep", where=str(path),
                    fix="flatten the document") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of 5,000 digits
        raise error(f"unreadable value: {str(exc).splitlines()[0][:120]}", where=str(path),
                    fix="fix the value") from None
    return data, lines


class _TooDeep(Exception):
    pass


class _DepthLimitedLoader(yaml.SafeLoader):
    """Stops composing past :data:`MAX_DEPTH`. PyYAML's scanner is quadratic in flow nesting
    (3,000 ``[`` took 30 s on a loaded host) and its composer recursive; composing pulls
    tokens lazily, so stopping here also stops the scanner early."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_size(root: yaml.Node, path: Path, error: type[UserInputError]) -> None:
    """Count the nodes the document has once every alias is expanded, and its depth, without
    expanding anything: each shared node is counted once and its count reused."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    # iterative post-order walk of the shared graph
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            size = 1 + sum(sizes[id(k)] for k in kids)
            depth = 1 + max((depths[id(k)] for k in kids), default=0)
            if size > MAX_EXPANDED_NODES:
                raise error(f"expands to more than {MAX_EXPANDED_NODES:,} values (YAML aliases)",
                            where=f"{path}:{node.start_mark.line + 1}",
                            fix="write the values out, or use fewer nested aliases")
            if depth > MAX_DEPTH:
                raise error(f"nested more than {MAX_DEPTH} levels deep", where=f"{path}:{node.start_mark.line + 1}",
                            fix="flatten the document")
            sizes[key], depths[key] = size, depth
            continue
        if key in sizes:
            continue
        if key in on_path:  # a recursive alias (&a [*a]) is a cycle, not a tree
            raise error("a YAML alias refers to itself", where=f"{path}:{node.start_mark.line + 1}",
                        fix="remove the recursive alias")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int], seen: set[int], path: Path,
           error: type[UserInputError]) -> None:
    """The line of every key. A node reached a second time (an alias) is not walked again:
    errors inside it are reported at the alias's line."""
    lines[loc] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else key_node.start_mark.line
            line = key_node.start_mark.line + 1
            if key != "<<" and key in first:
                raise error(f"key {_shown(key)} appears twice (lines {first[key]} and {line})",
                            where=f"{path}:{line}", fix="keep one of them")
            first[key] = line
            lines[(*loc, key)] = line
            _index(value_node, (*loc, key), lines, seen, path, error)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, (*loc, i), lines, seen, path, error)


def _shown(key: object) -> str:
    text = str(key)
    return repr(text if len(text) <= 40 else text[:40] + "...")


def parse_json(text: str, path: Path, error: type[UserInputError]) -> Any:
    """JSON with duplicate keys refused (``json`` would keep the last one silently)."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _no_duplicates(pairs, path, error))
    except json.JSONDecodeError as exc:
        raise error(f"invalid JSON: {exc.msg}", where=f"{path}:{exc.lineno}", fix="fix the syntax") from None
    except RecursionError:
        raise error(f"nested more than {MAX_DEPTH} levels deep", where=str(path), fix="flatten the document") from None
    except ValueError as exc:
        raise error(f"unreadable value: {str(exc)[:120]}", where=str(path), fix="fix the value") from None


def _no_duplicates(pairs: list[tuple[str, Any]], path: Path, error: type[UserInputError]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise error(f"key {_shown(key)} appears twice", where=str(path), fix="keep one of them")
        out[key] = value
    return out
