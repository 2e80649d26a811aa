"""Credential routes resolve on the node that runs the cell. Values live only in memory here
and in the sandbox's environment; everything written is scrubbed of them."""

from __future__ import annotations

import base64
import os
import re
import stat
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
        named after its key); return how many entries changed (renamed or scrubbed). One walk, deepest directories
        first, so an entry is renamed after what is below it (a no-op attempt's logs were
        walked twice, a stat per entry each time)."""
        if not self._bytes or not root.is_dir():
            return 0
        changed = 0
        for parent, dirs, files in os.walk(root, topdown=False):
            for name in files:
                path = os.path.join(parent, name)
                if stat.S_ISREG(os.lstat(path).st_mode):  # not links, fifos, sockets
                    changed += self._scrub(path)
                changed += self._rename(parent, name)
            for name in dirs:
                changed += self._rename(parent, name)
        return changed

    def _scrub(self, path: str) -> int:
        with open(path, "rb") as f:
            data = f.read()
        scrubbed = data
        for secret in self._bytes:
            scrubbed = scrubbed.replace(secret, REDACTED.encode())
        if scrubbed == data:
            return 0
        with open(path, "wb") as f:
            f.write(scrubbed)
        return 1

    def _rename(self, parent: str, name: str) -> int:
        """Rename an entry whose name holds a secret; a clash gets a numeric suffix rather than
        overwriting."""
        safe = self.text(name).replace("/", "_")
        if safe == name:
            return 0
        target = os.path.join(parent, safe)
        n = 1
        while os.path.lexists(target):
            target = os.path.join(parent, f"{safe}.{n}")
            n += 1
        os.rename(os.path.join(parent, name), target)
        return 1
