from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """A user-facing config model: unknown keys are errors, values are validated on set,
    numbers are finite (``inf`` would be a limit that never binds, and ``Infinity`` in a
    plan's JSON is not JSON)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class FrozenModel(BaseModel):
    """An identity or record: immutable once made."""

    model_config = ConfigDict(extra="forbid", frozen=True)
