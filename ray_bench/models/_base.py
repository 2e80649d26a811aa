from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


def _no_nul(value: str) -> str:
    # the OS takes a path up to its first NUL: the rest would be silently dropped, and every
    # call that opens it raises (pathlib: "embedded null byte")
    if "\0" in value:
        raise ValueError("holds a NUL byte, which no path can hold")
    return value


#: A path written in a config file.
PathText = Annotated[str, AfterValidator(_no_nul)]


class ConfigModel(BaseModel):
    """A user-facing config model: unknown keys are errors, values are validated on set,
    numbers are finite (``inf`` would be a limit that never binds, and ``Infinity`` in a
    plan's JSON is not JSON)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class FrozenModel(BaseModel):
    """An identity or record: immutable once made."""

    model_config = ConfigDict(extra="forbid", frozen=True)
