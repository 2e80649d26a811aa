"""Credential-looking values: what is caught, what is not (no false alarm on the repository's
own configs, task files, digests or paths), and what may be shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ray_bench.config.secrets import find_secrets, looks_like_secret, route_values, shown_field
from ray_bench.errors import fingerprint

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
    "Bearer sk-proj-abcdefghij0123456789ABCD",
    "AKIAIOSFODNN7EXAMPLE",
    "token=ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe",  # 34 random base62 characters
    "/etc/keys/Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe",  # a key kept as a path segment
    "run --out=/tmp/x/Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe",  # and inside a command's path
    "curl -H 'x-api-key: Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe' http://127.0.0.1/",
])
def test_credentials_are_caught(value: str) -> None:
    assert looks_like_secret(value) is not None


@pytest.mark.parametrize("value", [
    "sh \"$AGENT_DIR/scripted-agent.sh\"",
    "ghcr.io/org/image@sha256:" + "0123456789abcdef" * 4,
    "/home/runner/work/ray-bench/ray-bench/tests/reliability/some_long_file_name.py",
    # a clone under mktemp's random directory (CI clones into one): found by CI itself
    "/tmp/tmp.Uerm9gL0TZ/p/tests/tasks/corpus/codescalebench/benchmarks/csb_sdlc_fix/teleport-users-can-delete-fix-001",
    "/tmp/pytest-of-root/pytest-195/tmp.Uerm9gL0TZ/suite/tasks",
    # a path inside a command, under scripts/test.sh's mktemp root: failed two CI tests
    "test -f /tmp/ray-bench-tests.8qBdVB/main/test_a_valid_probe_reopens_the0/fixed || no-such-agent --run",
    "until [ -e '/tmp/ray-bench-tests.8qBdVB/main/test_an_idle_worker_lost_mid_r0/release' ]; do sleep 1; done",
    "https://example.com/a/very/long/path/with/segments/AbCdEfGh/index.html",
    "task-with-a-long-name-like-disk-usage-monitoring-2024",
    "550e8400-e29b-41d4-a716-446655440000",
    "claude-sonnet-4-5-20250929",
    "ANTHROPIC_API_KEY",
])
def test_ordinary_values_are_not(value: str) -> None:
    assert looks_like_secret(value) is None


def test_no_false_alarm_on_the_repositorys_own_configs() -> None:
    files = [p for p in REPO.glob("**/*.yaml") if ".venv" not in p.parts and ".git" not in p.parts]
    assert len(files) >= 3
    for path in files:
        for data in yaml.safe_load_all(path.read_text()):
            assert find_secrets(data) == [], path


def test_route_values_are_found_anywhere_and_shown_as_fingerprints() -> None:
    environ = {"KEY_A": "a-secret-value-123", "SHORT": "x"}
    values = route_values([{"ANTHROPIC_API_KEY": "KEY_A"}, {"T": "SHORT"}, {"T": "UNSET"}], environ)
    assert values == ["a-secret-value-123"]
    found = find_secrets({"arms": [{"env": {"K": "prefix a-secret-value-123 suffix"}}]}, values)
    assert found == [(("arms", 0, "env", "K"), "the value of a route variable", "a-se... (18 chars)")]


def test_a_secret_used_as_a_key_is_fingerprinted_in_the_field_path() -> None:
    key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
    assert key[4:] not in shown_field(("arms", 0, "env", key))
    assert fingerprint(key) == "sk-a... (49 chars)"


def test_secret_check_errors_come_in_file_order(tmp_path: Path) -> None:
    from ray_bench.config.loader import load_suite
    from ray_bench.errors import MultipleInputErrors

    keys = ["sk-ant-api03-" + c * 40 for c in "abc"]
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: s\nreps: 1\narms:\n  - name: baseline\n    env:\n      FIRST: {keys[0]}\n"
                    f"      SECOND: {keys[1]}\n  - name: mcp\n    command: echo {keys[2]}\n")
    with pytest.raises(MultipleInputErrors) as caught:
        load_suite(path)
    lines = [e.line() for e in caught.value.errors]
    assert [int(line.split(f"{path}:")[1].split(":")[0]) for line in lines] == [6, 7, 9]


def test_each_field_is_judged_as_its_path_says_and_a_repeated_string_alike() -> None:
    """A token is looked at for entropy only where a part of its path reaches a command (the
    walk carries that down; issue 57), and the same string is judged the same wherever it
    repeats (it is judged once)."""
    token = "Zq8vX2mN4pL7rT1wY6bK3hJ9dF5gS0aE"  # 32 characters of three classes
    data = {"arms": [{"name": token, "env": {"K": token}, "probe": {"command": [token, "ok"]}}],
            "tasks": {7: {"config": {"verifier": {"env": {"X": token}}}, "note": token}},
            token: "x"}
    found = [loc for loc, _, _ in find_secrets(data)]
    assert found == [("arms", 0, "env", "K"), ("arms", 0, "probe", "command", 0),
                     ("tasks", "7", "config", "verifier", "env", "X")]
    assert [loc for loc, _, _ in find_secrets(data, everywhere=True)] == [
        ("arms", 0, "name"), *found[:2], *found[2:], ("tasks", "7", "note"), (token,)]
