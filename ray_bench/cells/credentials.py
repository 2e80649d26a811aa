"""Credential routes resolve on the node that runs the cell. Values live only in memory here
and in the sandbox's environment; everything written is scrubbed of them."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ray_bench.errors import RayBenchError

REDACTED = "[redacted]"
#: Shorter values would redact ordinary words; credential values are never this short.
_MIN_SECRET = 6


def base64_forms(value: str) -> set[str]:
    """The base64 text that holds ``value`` wherever it sits in an encoded blob, in the
    standard and the urlsafe alphabet: for each of the three alignments, the characters that
    only the value's bytes determine. Padding or not, the encoded value contains one of them
    (what is left beside it is at most one character, under 6 bits of the value)."""
    raw = value.encode()
    forms: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        core = encoded[-(-8 * shift // 6):(8 * (shift + len(raw))) // 6]
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


class CredentialMissing(RayBenchError):
    """The route names something this node does not have (class: auth)."""


@dataclass(frozen=True)
class Credentials:
    env: dict[str, str]
    home: Path | None

    def secrets(self) -> list[str]:
        return [v for v in self.env.values() if len(v) >= _MIN_SECRET]


def resolve(route_env: Mapping[str, str], route_home: str | None, environ: Mapping[str, str]) -> Credentials:
    env: dict[str, str] = {}
    for target, source in route_env.items():
        value = environ.get(source)
        if not value:
            raise CredentialMissing(f"env var {source} is not set on this node")
        env[target] = value
    home = Path(route_home).expanduser() if route_home else None
    if home is not None and not home.is_dir():
        raise CredentialMissing(f"home directory {home} does not exist on this node")
    return Credentials(env, home)


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._bytes: list[bytes] = []
        self.extend(secrets)

    def extend(self, secrets: Iterable[str]) -> None:
        """Also scrub ``secrets`` (tokens a CLI refreshed during the attempt)."""
        self._values |= {s for s in secrets if len(s) >= _MIN_SECRET}
        # An agent that base64-encodes its key (a Basic auth header, a config blob) writes it
        # as well as the value itself: both are scrubbed.
        values = sorted(self._values | {e for v in self._values for e in base64_forms(v)}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None
        self._bytes = [v.encode() for v in values]

    def text(self, value: str) -> str:
        return self._pattern.sub(REDACTED, value) if self._pattern else value

    def tree(self, root: Path) -> int:
        """Scrub every file below ``root`` in place, names included (an agent can write a file
        named after its key); return how many files changed."""
        if not self._bytes or not root.is_dir():
            return 0
        changed = self._rename(root)
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            scrubbed = data
            for secret in self._bytes:
                scrubbed = scrubbed.replace(secret, REDACTED.encode())
            if scrubbed != data:
                path.write_bytes(scrubbed)
                changed += 1
        return changed

    def _rename(self, root: Path) -> int:
        """Rename every entry whose name holds a secret, deepest first (so parents rename after
        their children); a clash gets a numeric suffix rather than overwriting."""
        if self._pattern is None:
            return 0
        renamed = 0
        for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            name = self.text(path.name).replace("/", "_")
            if name == path.name:
                continue
            target = path.with_name(name)
            n = 1
            while target.exists() or target.is_symlink():
                target = path.with_name(f"{name}.{n}")
                n += 1
            path.rename(target)
            renamed += 1
        return renamed
