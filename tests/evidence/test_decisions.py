"""Exclusions with attribution and promotion gates, on ledgers written from a real plan (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reports.report_ledgers import first_run
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.errors import UserInputError
from ray_bench.evidence.decisions import record_exclusion
from ray_bench.evidence.promote import promote_run
from ray_bench.ledger import Ledger
from ray_bench.reports.build import build_report, render_markdown


def _ledger_state(root: Path) -> tuple[int, int, bytes]:
    with Ledger.reading(root) as ledger:
        return len(ledger.attempts()), len(ledger.events()), (root / "ledger.sqlite").read_bytes()


def _no_residue(_root: Path) -> int:
    return 0


def test_exclusion_leaves_both_denominators_and_is_listed_with_who_and_why(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    attempts_before = _ledger_state(root)[0]
    record_exclusion(root, "count-words/mcp/1", "agent image lacked wc; not the arm's fault", by="ana")
    record_exclusion(root, "count-words/mcp/2", "same", by="ana")
    report = build_report(root)
    arms = report.arms.set_index("arm")
    # mcp: 8 planned - 2 excluded = 6 strict, 6 valid rows, 4 solved (was 4/8 strict)
    assert (arms.loc["mcp", "cells"], arms.loc["mcp", "valid_rows"], arms.loc["mcp", "missing"]) == (6, 6, 0)
    assert arms.loc["mcp", "strict_rate"] == pytest.approx(4 / 6)
    assert arms.loc["baseline", "cells"] == 8  # the other arm is untouched
    assert len(report.attempts) == attempts_before == _ledger_state(root)[0]  # nothing deleted
    listed = report.exclusions.set_index("rep")
    assert listed.loc[1, "reason"] == "agent image lacked wc; not the arm's fault"
    assert set(listed.by) == {"ana"} and set(listed.task) == {"count-words"}
    md = render_markdown(report)
    assert "## Exclusions" in md and "agent image lacked wc" in md and "| ana |" in md

    # include undoes it, with its own record; the cell counts again (as a failure: no row)
    record_exclusion(root, "count-words/mcp/2", "wc is in the image now", include=True, by="bo")
    arms = build_report(root).arms.set_index("arm")
    assert (arms.loc["mcp", "cells"], arms.loc["mcp", "missing"]) == (7, 1)
    kinds = [e.kind for e in Ledger.open_readonly(root).events()]
    assert kinds.count("exclusion") == 2 and kinds.count("inclusion") == 1


def test_bad_exclusions_exit_2_with_one_line_and_write_nothing(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    record_exclusion(root, "fizzbuzz/baseline/2", "tool flake", by="ana")
    before = _ledger_state(root)
    runner = CliRunner()
    cases = [
        ["exclude", str(root), "--cell", "no-such-task/mcp/1", "--reason", "x"],
        ["exclude", str(root), "--cell", "deadbeefdeadbeef", "--reason", "x"],
        ["exclude", str(root), "--cell", "hello-world/mcp/1", "--reason", "  "],
        ["exclude", str(root), "--cell", "fizzbuzz/baseline/2", "--reason", "again"],
        ["include", str(root), "--cell", "hello-world/mcp/1", "--reason", "never excluded"],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert "not in the plan of run r1" in runner.invoke(app, cases[0]).stderr
    assert _ledger_state(root) == before


def test_promotion_gates_then_official_is_immutable(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    before = _ledger_state(root)
    failed = promote_run(root, reason="done", by="ana", audit=_no_residue)
    gates = {g.name: g for g in failed.gates}
    assert not failed.promoted and not gates["pairs"].ok
    assert "count-words/mcp/1" in gates["pairs"].detail
    assert gates["circuit"].ok and gates["cleanup"].ok and gates["finished"].ok
    # 4 invalid of 18 terminal attempts (3 failed, 1 stale)
    assert gates["invalid-rate"].ok and "4 of 18" in gates["invalid-rate"].detail
    assert _ledger_state(root) == before  # a failed gate records nothing
    strict = promote_run(root, reason="done", max_invalid_rate=0.2, audit=_no_residue)
    assert not {g.name: g for g in strict.gates}["invalid-rate"].ok

    assert build_report(root).title == "Report: r1 (staging)"
    for rep in (1, 2):
        record_exclusion(root, f"count-words/mcp/{rep}", "task broken for this arm", by="ana")
    still = promote_run(root, reason="done", audit=_no_residue)
    assert [g.detail for g in still.gates if not g.ok] == [
        "1 planned cells with neither a valid row nor an exclusion: fizzbuzz/baseline/2"]
    record_exclusion(root, "fizzbuzz/baseline/2", "tool flake twice; pinned since", by="bo")
    done = promote_run(root, reason="paired and clean", by="ana", audit=_no_residue)
    assert done.promoted and all(g.ok for g in done.gates)
    report = build_report(root)
    assert report.title == "Report: r1 (official)" and report.category == "official"
    md = render_markdown(report)
    assert md.startswith("# Report: r1 (official)") and "promoted by ana" in md and "paired and clean" in md

    # official: no more promotion, exclusion or rerun (the report must not change under it)
    with pytest.raises(UserInputError, match="is official"):
        promote_run(root, reason="again", audit=_no_residue)
    with pytest.raises(UserInputError, match="is official"):
        record_exclusion(root, "hello-world/mcp/1", "late change", by="ana")
    from ray_bench.commands.rerun import rerun_failed

    with pytest.raises(UserInputError, match="is official"):
        rerun_failed(root, hypothesis="x")
    assert not (root.parent / "r1-rerun-1").exists()


def test_failing_promotion_cli_exits_1_and_lists_gates(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    result = CliRunner().invoke(app, ["promote", str(root), "--reason", "try", "--by", "ana"])
    assert result.exit_code == 1, result.output
    assert "FAIL pairs:" in result.stdout and "pass circuit:" in result.stdout
    assert "stays staging: nothing recorded" in result.stderr


def test_a_reason_with_bidi_and_control_characters_is_escaped_in_report_md_and_html(tmp_path: Path) -> None:
    """Issue 58: U+202E typed into --reason reached report.md and report.html raw (the terminal
    shows it escaped): it reorders what a reader sees ("fault" reads as "tluaf")."""
    from ray_bench.reports.build import write_report

    root = first_run(tmp_path)
    record_exclusion(root, "count-words/mcp/1", "wc missing \u202etluaf s'egami\u202c|\x1b[2J", by="ana")
    write_report(root)
    for name in ("report.md", "report.html"):
        text = (root / name).read_text()
        assert "\u202e" not in text and "\u202c" not in text and "\x1b" not in text, name
        assert "\\u202etluaf" in text, name
    md = (root / "report.md").read_text()
    assert "\\u202c\\|\\x1b[2J" in md  # a pipe in the reason cannot end the table cell
