"""The generated reference shows every CLI command and option and every configuration key: what the
docs site builds from (ray_bench/cli/docgen.py). The names are found independently of the generator,
from the typer app's click tree and from the pydantic models' fields."""

from __future__ import annotations

import re

import typer.main
from pydantic import BaseModel

from ray_bench.cli import app, docgen
from ray_bench.models.accounts import AccountsFile
from ray_bench.models.suite import Suite
from ray_bench.sandboxes.daytona_pool import DaytonaPool


def _commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    found = [(path, command)] if path else []
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def _section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = page.index(heading + " ")
    rest = page[start + len(heading):]
    stop = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: stop.start()] if stop else rest


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    page = docgen.cli_reference()
    commands = _commands(typer.main.get_command(app))
    assert len(commands) >= 25  # plan, execute, ... accounts status, export harbor, ledger rebuild
    for path, command in commands:
        section = _section(page, "## " + " ".join(path))
        for param in getattr(command, "params", []):
            if param.name == "help":
                continue
            names = [*param.opts, *param.secondary_opts] if param.param_type_name == "option" else [param.name.upper()]
            for name in names:
                assert f"`{name}`" in section, f"{' '.join(path)}: {name} missing from the CLI reference"
            if param.param_type_name == "option" and param.help:
                assert param.help.split("\n")[0][:40] in section.replace("\\|", "|")
    assert "`--version`" in page


def test_every_config_key_is_in_the_config_reference() -> None:
    page = docgen.config_reference()

    def models(root: type[BaseModel]) -> set[type[BaseModel]]:
        seen = {root}
        for field in root.model_fields.values():
            for child in docgen.nested_models(field.annotation):
                if child not in seen:
                    seen |= models(child)
        return seen

    every = set().union(*(models(root) for root in (Suite, AccountsFile, DaytonaPool)))
    assert {"Arm", "Watchdog", "ModelRole", "McpServer", "CredentialRoute", "AccountLimits", "WindowQuota"} <= {
        m.__name__ for m in every}
    for model in every:
        section = _section(page, f"### {model.__name__}")
        for name, field in model.model_fields.items():
            row = next((line for line in section.splitlines() if line.startswith(f"| `{field.alias or name}` |")), None)
            assert row is not None, f"{model.__name__}.{name} missing from the configuration reference"
            if field.description:
                assert field.description.replace("|", "\\|").replace("\n", " ") in row
            if field.is_required():
                assert "| required |" in row


def test_the_reference_pages_in_the_repository_are_placeholders() -> None:
    """The pages under docs/reference/ say they are generated and hold no key by hand."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "reference"
    for page in ("cli.md", "config.md"):
        text = (docs / page).read_text()
        assert "generated from the code" in text and "|" not in text


def test_the_readme_lists_every_top_level_command() -> None:
    """The README's table of commands is a summary written by hand: it names every command."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("## The commands", 1)[1].split("\n## ", 1)[0]
    for path, _ in _commands(typer.main.get_command(app)):
        if len(path) == 1:
            assert f"`{path[0]}" in table, f"README's table of commands leaves out {path[0]}"
