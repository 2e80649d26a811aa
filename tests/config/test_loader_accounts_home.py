"""A relative ``route.home`` in accounts.yaml is the file's, not the shell's (issue 58)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_bench.config.loader import load_accounts


def test_a_relative_home_resolves_from_the_accounts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "accounts.yaml").write_text(
        "accounts:\n"
        "  - {name: a, route: {home: logins/a}, limits: {max_concurrent: 1}}\n"
        "  - {name: b, route: {home: ~/logins/b}, limits: {max_concurrent: 1}}\n"
        f"  - {{name: c, route: {{home: {tmp_path}/c}}, limits: {{max_concurrent: 1}}}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    homes = {a.name: a.route.home for a in load_accounts(Path("../conf/accounts.yaml")).accounts}
    assert Path(homes["a"] or "").resolve() == (conf / "logins" / "a").resolve()
    assert homes["b"] == "~/logins/b" and homes["c"] == f"{tmp_path}/c"
