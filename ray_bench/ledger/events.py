"""Typed payloads of ledger events: one model per event kind, for the kinds converted so far
(the operator's decisions). The JSON written is the shape the first ledgers stored (same keys,
same meanings), so older ledgers read with these models; a key an old writer left out takes
its default. The driver's own events (``run_started``, ``run_finished``, ``node_check``, ...)
still carry plain dicts."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

_P = TypeVar("_P", bound="EventPayload")


class EventPayload(BaseModel):
    """The ``data`` column of one event kind (:attr:`kind`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def read(cls: type[_P], data: dict[str, Any]) -> _P:
        """The payload of a stored event; fields that do not fit take their defaults."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})


class ExclusionData(EventPayload):
    """``exclusion``: an operator took a planned cell out of both denominators."""

    kind: ClassVar[str] = "exclusion"
    task: str = ""
    arm: str = ""
    rep: int = 0
    reason: str = ""
    by: str = ""


class InclusionData(ExclusionData):
    """``inclusion``: an operator undid an exclusion (same fields, its own reason)."""

    kind: ClassVar[str] = "inclusion"


class PromotionData(EventPayload):
    """``promotion``: the run (and its family) became official, with the gates it passed."""

    kind: ClassVar[str] = "promotion"
    by: str = ""
    reason: str = ""
    family: list[str] = Field(default_factory=list)
    #: [name, ok, detail] per gate, as first stored.
    gates: list[tuple[str, bool, str]] = Field(default_factory=list)
    max_invalid_rate: float | None = None
    require_settlement: bool | None = None
    identity: str = ""


class DemotionData(EventPayload):
    """``demotion``: an official run (and its family) went back to staging, with who and why
    (so that its settlement, exclusions or rows may change again, on the record)."""

    kind: ClassVar[str] = "demotion"
    by: str = ""
    reason: str = ""
    family: list[str] = Field(default_factory=list)
