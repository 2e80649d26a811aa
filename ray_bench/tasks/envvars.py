"""Harbor's env templates: ``${VAR}`` and ``${VAR:-default}`` resolved from the host that runs
the cell. A value from the host may be a secret: it goes into the sandbox and into the
redactor, never into a plan, summary or log."""

from __future__ import annotations

import re
from collections.abc import Mapping

_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingHostVar(KeyError):
    """A ``${VAR}`` without a default names a variable the host does not have."""


def template_names(env: Mapping[str, str]) -> list[str]:
    """The host variables the templates need (those without a default)."""
    return sorted({m.group(1) for v in env.values() for m in _TEMPLATE.finditer(v) if m.group(2) is None})


def resolve_env(env: Mapping[str, str], host: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The env with templates filled in, and the values that came from the host (to redact)."""
    secrets: list[str] = []

    def fill(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in host:
            if host[name]:
                secrets.append(host[name])
            return host[name]
        if default is None:
            raise MissingHostVar(name)
        return default

    return {key: _TEMPLATE.sub(fill, value) for key, value in env.items()}, secrets
