from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """A user-facing config model: unknown keys are errors, values are validated on set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class FrozenModel(BaseModel):
    """An identity or record: immutable once made."""

    model_config = ConfigDict(extra="forbid", frozen=True)
