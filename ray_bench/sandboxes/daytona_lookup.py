"""Plan-time questions to the Daytona API, without the SDK (``plan`` runs where the extra may be
missing): does a snapshot a task or the pool names exist? One short GET each; the answer is
"missing", "there" or "not asked" (no key in the planning environment, the service unreachable),
never a guess."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Daytona's cloud, where the SDK goes when no URL is set.
DEFAULT_API_URL = "https://app.daytona.io/api"


@dataclass
class SnapshotCheck:
    missing: list[str] = field(default_factory=list)
    #: Why the snapshots were not checked (None: every one was asked).
    unchecked: str | None = None


def check_snapshots(names: Iterable[str], options: Mapping[str, Any], environ: Mapping[str, str],
                    timeout: float = 5.0) -> SnapshotCheck:
    """Ask ``GET /snapshots/{name}`` for each name, with the backend's credential route read from
    ``environ`` (its value is sent, never kept or shown)."""
    names = sorted(set(names))
    out = SnapshotCheck()
    if not names:
        return out
    key_env = str(options.get("api_key_env") or "DAYTONA_API_KEY")
    key = environ.get(key_env)
    if not key:
        out.unchecked = f"{key_env} is not set where plan ran"
        return out
    url_env = str(options.get("api_url_env") or "DAYTONA_API_URL")
    base = str(options.get("api_url") or environ.get(url_env) or DEFAULT_API_URL).rstrip("/")
    for name in names:
        request = urllib.request.Request(f"{base}/snapshots/{urllib.parse.quote(name, safe='')}",
                                         headers={"Authorization": f"Bearer {key}", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                state = str(json.loads(answer.read(1 << 20) or b"{}").get("state") or "")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                out.missing.append(name)
                continue
            out.unchecked = f"{base} answered {exc.code} to GET /snapshots/{name}"
            return out
        except (OSError, ValueError) as exc:
            out.unchecked = f"{base} could not be asked ({type(exc).__name__})"
            return out
        if state in ("error", "build_failed"):
            out.missing.append(name)
    return out
