"""CLI help reads well: every command's summary (the first paragraph of its docstring, which
`ray-bench --help` lists) is one short sentence, so the list shows one line per command; details go
in a later paragraph, which `COMMAND --help` shows."""

from __future__ import annotations

import inspect

import pytest
import typer.main
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.cli.docgen import walk_commands

COMMANDS = list(walk_commands(typer.main.get_command(app)))


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_each_summary_is_one_short_sentence(path: tuple[str, ...], command: object) -> None:
    summary = inspect.cleandoc(command.help or "").split("\n\n")[0]  # type: ignore[attr-defined]
    assert summary, f"{' '.join(path)} has no help"
    one_line = " ".join(summary.split())
    assert len(one_line) <= 80, f"{' '.join(path)}: {len(one_line)} characters: {one_line}"
    assert one_line.endswith("."), one_line
    assert ". " not in one_line.rstrip("."), f"{' '.join(path)}: one sentence: {one_line}"


def test_the_command_list_shows_one_line_per_command() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"}, terminal_width=120)
    assert shown.exit_code == 0
    listed = shown.output.split("Commands")[1]
    for path, command in COMMANDS:
        if len(path) > 1:
            continue
        line = next(line for line in listed.splitlines() if line.startswith(f"│ {path[0]} "))
        summary = " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split())
        assert summary in line, f"{path[0]}'s summary is wrapped onto a second line"
