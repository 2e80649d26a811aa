"""The data-driven error catalog (``configs/error-catalog.yaml``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from ray_bench.errors import ConfigError
from ray_bench.models._base import ConfigModel
from ray_bench.models.attempt import AttemptSummary

FailureClass = Literal["task", "tool", "evaluator", "executor", "stack", "provider", "auth", "capacity", "drift",
                       "behaviour"]
#: ``behaviour``: the agent degenerated (the watchdog stopped it); set by the classifier, not by rules.
FAILURE_CLASSES: tuple[str, ...] = ("task", "tool", "evaluator", "executor", "stack", "provider", "auth",
                                    "capacity", "drift", "behaviour")
Field_ = Literal["error", "agent_error", "agent_output", "verifier_output"]


class CatalogRule(ConfigModel):
    id: str = Field(description="A short stable name; part of the fingerprint.")
    failure_class: FailureClass = Field(alias="class", description="The failure class it assigns.")
    effect: Literal["rate_limited", "auth_failed", "server_error", "none"] = Field(
        default="none", description="What it does to the account.")
    fields: list[Field_] = Field(min_length=1, description="Summary fields the pattern is tried on.")
    pattern: str = Field(description="A Python regular expression.")
    exit_codes: list[int] | None = Field(default=None, min_length=1, description=(
        "Only when the agent exited with one of these codes: what tells the harness's own error "
        "(the shell's 126 cannot execute, 127 not found) from the same words in the agent's "
        "transcript."))

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from None
        return value


class CatalogFile(ConfigModel):
    rules: list[CatalogRule] = Field(description="Tried in order; the first match wins.")


@dataclass(frozen=True)
class Match:
    rule: CatalogRule
    field: str
    text: str


class Catalog:
    def __init__(self, rules: list[CatalogRule]) -> None:
        self.rules = rules
        self._compiled = [(rule, re.compile(rule.pattern)) for rule in rules]

    @classmethod
    def default(cls) -> Catalog:
        text = resources.files("ray_bench.data").joinpath("error-catalog.yaml").read_text()
        return cls(CatalogFile.model_validate(yaml.safe_load(text)).rules)

    @classmethod
    def with_user_rules(cls, path: Path | None) -> Catalog:
        base = cls.default()
        if path is None:
            return base
        from ray_bench.config.loader import load_model_file

        try:
            user = load_model_file(path, CatalogFile)
        except ValidationError as exc:  # pragma: no cover - load_model_file maps these
            raise ConfigError(str(exc), where=str(path)) from None
        return cls(user.rules + base.rules)

    def match(self, texts: dict[str, str], exit_code: int | None = None) -> Match | None:
        for rule, regex in self._compiled:
            if rule.exit_codes is not None and exit_code not in rule.exit_codes:
                continue
            for name in rule.fields:
                text = texts.get(name) or ""
                found = regex.search(text)
                if found:
                    return Match(rule, name, found.group(0))
        return None


def texts_of(summary: AttemptSummary) -> dict[str, str]:
    """The summary fields the catalog looks at, as text."""
    error, agent_error = summary.error, summary.agent_error
    fields = agent_error.model_dump(exclude_none=True) if agent_error is not None else {}
    return {
        "error": f"{error.type}: {error.message}" if error is not None else "",
        "agent_error": " ".join(f"{k}={v}" for k, v in sorted(fields.items())),
        "agent_output": summary.agent.output_tail if summary.agent is not None else "",
        "verifier_output": summary.verifier.output_tail if summary.verifier is not None else "",
    }
