"""Bounded parsing: sizes, alias expansion, depth, duplicate keys, and the line index that
must not walk shared alias nodes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ray_bench.config.bounded import MAX_EXPANDED_NODES, parse_json, parse_yaml, read_text_bounded
from ray_bench.config.loader import load_suite
from ray_bench.errors import ConfigError, SelectionError


def _bomb(levels: int) -> str:
    lines = ['l0: &l0 ["a", "a", "a", "a", "a", "a", "a", "a", "a"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_aliases_within_the_limit_are_fine_and_indexed_once() -> None:
    data, lines = parse_yaml(_bomb(4), Path("x.yaml"), ConfigError)  # 9**5 = 59,049 strings
    assert len(data["l4"]) == 9 and data["l4"][0] is data["l3"]
    # the alias targets are indexed where they are written, not once per path through them
    assert len(lines) < 100


def test_an_alias_bomb_is_refused_quickly_with_its_line() -> None:
    started = time.process_time()
    with pytest.raises(ConfigError, match=f"more than {MAX_EXPANDED_NODES:,}") as refused:
        parse_yaml(_bomb(9), Path("x.yaml"), ConfigError)
    assert time.process_time() - started < 2.0
    assert "x.yaml:" in refused.value.line()


def test_duplicate_keys_name_both_lines() -> None:
    with pytest.raises(ConfigError, match=r"'reps' appears twice \(lines 1 and 3\)") as refused:
        parse_yaml("reps: 1\nname: t\nreps: 5\n", Path("s.yaml"), ConfigError)
    assert refused.value.where == "s.yaml:3"


def test_a_duplicate_through_a_merge_key_is_not_a_duplicate() -> None:
    data, _ = parse_yaml("base: &b {a: 1}\nx:\n  <<: *b\n  c: 2\n", Path("s.yaml"), ConfigError)
    assert data["x"] == {"a": 1, "c": 2}


def test_json_duplicate_keys_and_nesting() -> None:
    with pytest.raises(SelectionError, match="appears twice"):
        parse_json('{"tasks": [], "tasks": ["x"]}', Path("s.json"), SelectionError)
    with pytest.raises(SelectionError, match="nested more than"):
        parse_json("[" * 100_000 + "]" * 100_000, Path("s.json"), SelectionError)


def test_depth_is_bounded() -> None:
    with pytest.raises(ConfigError, match="nested more than 64"):
        parse_yaml("a: " + "[" * 100_000 + "]" * 100_000, Path("d.yaml"), ConfigError)


def test_size_is_bounded_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(1 << 33)  # 8 GiB, sparse
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        read_text_bounded(big, ConfigError, limit=1 << 20)


def test_strict_types_refuse_a_boolean_for_a_count(tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: t\ntasks_dir: tasks\nreps: true\narms:\n  - {name: b, role: baseline, command: x}\n")
    with pytest.raises(ConfigError, match="reps: Input should be a valid integer") as refused:
        load_suite(suite)
    assert refused.value.where == f"{suite}:3"


def test_state_json_is_read_within_its_limit(tmp_path: Path) -> None:
    from ray_bench.config.bounded import load_state_json

    small = tmp_path / "small.json"
    small.write_text('{"now": true}')
    assert load_state_json(small) == {"now": True}
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * 2048 + '"}')
    with pytest.raises(ValueError, match="larger than 1024 bytes"):
        load_state_json(big, limit=1024)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deep"):
        load_state_json(deep)
    with pytest.raises(FileNotFoundError):
        load_state_json(tmp_path / "missing.json")
