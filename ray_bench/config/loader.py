"""YAML/JSON files into pydantic models; every problem becomes one line with file, field, line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ray_bench.config.bounded import Loc, parse_yaml, read_text_bounded
from ray_bench.config.secrets import find_secrets, shown_field
from ray_bench.errors import ConfigError, MultipleInputErrors, UserInputError
from ray_bench.models.accounts import AccountsFile
from ray_bench.models.suite import Suite

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path, error: type[UserInputError] = ConfigError) -> tuple[Any, dict[Loc, int]]:
    """Parse ``path`` as YAML (JSON is YAML) within the bounds of :mod:`ray_bench.config.bounded`
    and return the data and the line of every key."""
    return parse_yaml(read_text_bounded(path, error), path, error)


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def validation_errors(
    exc: ValidationError, path: Path, lines: dict[Loc, int], error: type[UserInputError]
) -> Iterator[UserInputError]:
    for item in exc.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_for(loc, lines)
        where = f"{path}:{line}" if line else str(path)
        message = item["msg"].removeprefix("Value error, ")
        fix = _fix_for(item["type"])
        yield error(f"{field}: {message}", where=where, fix=fix)


def _fix_for(kind: str) -> str:
    return {
        "extra_forbidden": "remove the key or check its spelling",
        "missing": "add the field",
    }.get(kind, "see the field's description in the docs")


#: Error lines shown for one file; a generated file with 10,000 bad keys needs only the first few.
MAX_ERROR_LINES = 20


def load_model_file(path: Path, model: type[M], error: type[UserInputError] = ConfigError) -> M:
    """Read, bound, scan for credentials, then validate strictly: ``reps: true`` is not 1 and
    ``max_concurrent: "3"`` is not 3."""
    data, lines = read_yaml(path, error)
    if data is None:
        raise error("file is empty", where=str(path), fix=f"write a {model.__name__} document")
    refuse_secrets(data, path, lines, error)
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        errors = list(validation_errors(exc, path, lines, error))
        if len(errors) == 1:
            raise errors[0] from None
        if len(errors) > MAX_ERROR_LINES:
            rest = len(errors) - MAX_ERROR_LINES + 1
            errors = [*errors[:MAX_ERROR_LINES - 1],
                      error(f"and {rest} more problems", where=str(path), fix="fix the ones above first")]
        raise MultipleInputErrors(errors) from None


def refuse_secrets(data: Any, path: Path, lines: dict[Loc, int], error: type[UserInputError],
                   route_values: list[str] | None = None) -> None:
    """Refuse credential-looking values, each on its line, showing a fingerprint at most."""
    found = find_secrets(data, route_values or [])
    if not found:
        return
    errors: list[UserInputError] = []
    for loc, kind, shown in found[:MAX_ERROR_LINES]:
        field = shown_field(loc)
        line = _line_for(loc, lines)
        errors.append(error(f"{field} holds what looks like {kind} ({shown})",
                            where=f"{path}:{line}" if line else str(path),
                            fix="never write a secret into a config file: put it in an env var and name "
                                "that variable in an account's route"))
    raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)


def load_suite(path: Path) -> Suite:
    return load_model_file(path, Suite)


def load_accounts(path: Path) -> AccountsFile:
    """The accounts file, a relative ``route.home`` resolved from the file's directory (as a
    suite's ``tasks_dir`` is from the suite's), never from wherever the command runs (issue 58);
    ``~`` stays for the node that runs the cell to expand."""
    loaded = load_model_file(path, AccountsFile)
    base = path.absolute().parent
    accounts = [a.model_copy(update={"route": a.route.model_copy(update={"home": str(base / a.route.home)})})
                if a.route.home and not a.route.home.startswith("~") and not Path(a.route.home).is_absolute() else a
                for a in loaded.accounts]
    return loaded.model_copy(update={"accounts": accounts})
