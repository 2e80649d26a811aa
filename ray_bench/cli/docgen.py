"""The docs' reference pages, generated from the code: every command and option from the CLI app,
every configuration key from the pydantic models (type, default, description). Nothing is copied
by hand, so nothing drifts: the mkdocs hook (``docs/hooks/reference.py``) puts these pages in the
site at build time, and ``tests/cli/test_docgen.py`` checks that every option and key is in them.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ray_bench.models.accounts import AccountsFile
from ray_bench.models.suite import Suite
from ray_bench.sandboxes.daytona_pool import DaytonaPool

#: The configuration files a user writes, each with the model that reads it, in reading order.
#: The Daytona pool is read from a suite's ``backends.daytona.options.pool`` (docs/daytona.md).
CONFIG_FILES: tuple[tuple[str, str, type[BaseModel], str], ...] = (
    ("Suite", "suite-yaml", Suite, "suite.yaml: the tasks, the arms and the run's limits."),
    ("Accounts file", "accounts-yaml", AccountsFile,
     "accounts.yaml: every account's credential route and limits."),
    ("Daytona pool", "daytona-pool", DaytonaPool,
     "`backends.daytona.options.pool` in a suite: the organisation's compute pool on Daytona."),
)


# -- the CLI -----------------------------------------------------------------------------------

def cli_command() -> Any:
    """The click command behind the typer app, every subcommand registered (typer >= 0.16 vendors
    click as ``typer._click``: its classes are not ``click``'s, so they are read by shape)."""
    import typer.main

    from ray_bench.cli import app

    return typer.main.get_command(app)


def walk_commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command below ``command`` (groups included), as (words after ``ray-bench``, command)."""
    if path:
        yield path, command
    if _is_group(command):
        for name in sorted(command.commands):
            yield from walk_commands(command.commands[name], (*path, name))


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _first_line(text: str | None) -> str:
    return inspect.cleandoc(text or "").split("\n\n")[0].replace("\n", " ").strip()


def _rest(text: str | None) -> str:
    parts = inspect.cleandoc(text or "").split("\n\n", 1)
    return parts[1].strip() if len(parts) > 1 else ""


def _cell(text: object) -> str:
    """A value inside a Markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _param_type(param: Any) -> str:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is None:
        return "text"
    if typing.get_origin(annotation) is list:  # a repeatable option or a variadic argument: its item
        annotation = typing.get_args(annotation)[0]
    return _type_name(annotation).removesuffix(" | null")


def _param_row(param: Any) -> str:
    if param.param_type_name == "option":
        names = ", ".join(f"`{name}`" for name in (*param.opts, *param.secondary_opts))
        kind = "flag" if param.is_flag else _cell(_param_type(param))
        if param.multiple:
            kind += ", repeatable"
        default = param.default
        shown = "required" if param.required else ("" if default in (None, False, (), []) else f"`{_cell(default)}`")
        return f"| {names} | {kind} | {shown} | {_cell(param.help or '')} |"
    name = (param.name or "").upper()
    kind = f"argument: {_cell(_param_type(param))}"
    help_text = getattr(param, "help", None) or ""
    return f"| `{name}` | {kind} | {'required' if param.required else ''} | {_cell(help_text)} |"


def cli_reference() -> str:
    """The CLI reference page: every command, its summary and every parameter."""
    root = cli_command()
    lines = ["# CLI reference", "",
             "Generated from the CLI app (`ray_bench/cli/`) when the docs are built; `ray-bench COMMAND --help` "
             "prints the same.", "",
             "Exit codes: 0 success; 1 the run ended with failures or a hard stop (or a check failed); 2 bad "
             "input, with nothing started or written. `execute` stopped by a signal exits 128 + its number.", "",
             "Options of `ray-bench` itself: " + ", ".join(
                 f"`{' '.join(p.opts)}` ({_cell(p.help or '')})" for p in root.params if p.name != "help") + "",
             "", "| command | summary |", "| --- | --- |"]
    commands = list(walk_commands(root))
    for path, command in commands:
        words = " ".join(path)
        lines.append(f"| [`{words}`](#{'-'.join(path)}) | {_cell(_first_line(command.help))} |")
    for path, command in commands:
        words = " ".join(path)
        lines += ["", f"## {words} {{#{'-'.join(path)}}}", "", _first_line(command.help)]
        rest = _rest(command.help)
        if rest:
            lines += ["", rest]
        if _is_group(command):
            lines += ["", "Subcommands: " + ", ".join(f"[`{words} {name}`](#{'-'.join((*path, name))})"
                                                     for name in sorted(command.commands)) + "."]
            continue
        params = [p for p in command.params if p.name != "help"]
        if params:
            lines += ["", "| parameter | type | default | meaning |", "| --- | --- | --- | --- |"]
            lines += [_param_row(p) for p in params]
    return "\n".join(lines) + "\n"


# -- the configuration models --------------------------------------------------------------------

def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's type holds (in a list, a dict, an optional...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from nested_models(arg)


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "(its defaults)"
    if value is None or value in ({}, [], ()):
        return "" if value is None else f"`{value!r}`"
    return f"`{_cell(value)}`"


def models_of(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model below it, each once, in the order a reader meets them."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for field in model.model_fields.values():
            for child in nested_models(field.annotation):
                visit(child)

    visit(root)
    return seen


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _model_section(model: type[BaseModel], linked: set[type[BaseModel]]) -> list[str]:
    lines = ["", f"### {model.__name__} {{#{_anchor(model)}}}", ""]
    doc = _first_line(model.__doc__) if model.__doc__ and model.__doc__ != BaseModel.__doc__ else ""
    if doc:
        lines += [doc, ""]
    lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        type_text = _cell(_type_name(field.annotation))
        children = [m for m in nested_models(field.annotation) if m in linked]
        if children:
            type_text += " (" + ", ".join(f"[{m.__name__}](#{_anchor(m)})" for m in children) + ")"
        lines.append(f"| `{key}` | {type_text} | {_default(field)} | {_cell(field.description or '')} |")
    return lines


def config_reference() -> str:
    """The configuration reference page: every key of every file a user writes."""
    lines = ["# Configuration reference", "",
             "Generated from the pydantic models that read each file when the docs are built. Unknown keys "
             "are errors; types are strict (`reps: true` is not 1) and numbers finite. The task directory's "
             "`task.toml` follows Harbor's schema: [tasks](../tasks.md); `ray-bench validate --explain KEY` "
             "says what one of its keys means. Examples: `ray-bench init DIR` writes a suite and accounts file "
             "that run offline; `configs/suites/`, `configs/accounts/example.yaml` and the quickstart's "
             "`ray_bench/examples/quickstart/` show more."]
    for title, anchor, root, summary in CONFIG_FILES:
        models = models_of(root)
        lines += ["", f"## {title} {{#{anchor}}}", "", summary]
        for model in models:
            lines += _model_section(model, set(models))
    return "\n".join(lines) + "\n"


def config_keys() -> set[tuple[str, str]]:
    """Every (model name, key) the configuration reference must show: what the test checks."""
    keys: set[tuple[str, str]] = set()
    for _, _, root, _ in CONFIG_FILES:
        for model in models_of(root):
            keys |= {(model.__name__, field.alias or name) for name, field in model.model_fields.items()}
    return keys
