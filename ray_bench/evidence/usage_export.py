"""Provider usage exports, read into per-request charges for ``ray-bench settle``.

Settlement matches charges to attempts by *request id* (or session id), so only exports with
one record per request can settle. Accepted (detected from the content, not the file name):

- **CSV** with a header naming an id column (``request_id``, ``id``, ``generation_id``,
  ``session_id``) and a cost column (``cost_usd``, ``spend``, ``total_cost``, ``cost``).
  LiteLLM's spend-log export and a hand-built ledger of charges both have this shape.
- **LiteLLM spend logs** (JSON from ``GET /spend/logs``): a list of objects with
  ``request_id`` and ``spend`` (USD); ``session_id`` is read when present.
- **OpenRouter generations** (JSON from ``GET /api/v1/generation?id=...``): one
  ``{"data": {...}}`` object, a list of them, or a list of their ``data`` objects, with ``id``
  (``gen-...``), ``upstream_id`` (the provider's request id) and ``total_cost`` (USD);
  the SDK's camelCase spellings (``upstreamId``, ``totalCost``) are read too.
- **Generic JSON**: a list (or ``{"records": [...]}``) of objects with ``request_id`` or
  ``session_id`` and ``cost_usd``.

Refused with one line, because they cannot settle a request: Anthropic's Admin API
usage and cost reports (``/v1/organizations/usage_report/messages``,
``/v1/organizations/cost_report``) and OpenAI's organization usage and costs
(``/v1/organization/usage/*``, ``/v1/organization/costs``) are *time-bucketed* aggregates
(``data[].results[]`` per bucket, grouped by model, workspace or api key) with no request id.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import read_capped
from ray_bench.errors import UserInputError
from ray_bench.numbers import amount

ID_COLUMNS = ("request_id", "id", "generation_id", "upstream_id", "session_id")
COST_COLUMNS = ("cost_usd", "spend", "total_cost", "cost")
#: Exports are read whole; a month of per-request records for a large suite is well under this.
MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Charge:
    """One billed request (or session) of the export."""

    ids: tuple[str, ...]  # every id that names it (request id, provider's upstream id, session)
    cost_usd: float


@dataclass(frozen=True)
class UsageExport:
    format: str
    charges: tuple[Charge, ...]


def _bad(path: Path, what: str, fix: str) -> UserInputError:
    return UserInputError(what, where=str(path), fix=fix)


_FORMATS_FIX = ("export per-request records: a CSV with request_id and cost_usd columns, LiteLLM "
                "spend logs, or OpenRouter generations (see `ray-bench settle --help`)")


def read_usage_export(path: Path) -> UsageExport:
    """The export's charges; bad input (unknown shape, no charge at all) is a UserInputError."""
    export = _read(path)
    if not export.charges:
        # An empty export as the latest settlement would mark every charged attempt missing.
        raise _bad(path, "usage export has no charges", "export the period the run ran in, with its "
                   "per-request records")
    return export


def _read(path: Path) -> UsageExport:
    if not path.is_file():
        raise _bad(path, "no usage export here", "pass the file the provider exported")
    raw = read_capped(path, MAX_BYTES)
    if raw is None:
        raise _bad(path, f"usage export larger than {MAX_BYTES >> 20} MiB", "split it by date")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _bad(path, "usage export is not UTF-8 text", _FORMATS_FIX) from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise _bad(path, f"usage export is not valid JSON ({exc.msg} at line {exc.lineno})",
                       _FORMATS_FIX) from None
        return _from_json(path, doc)
    return _from_csv(path, text)


def _number(path: Path, where: str, value: Any) -> float:
    try:
        cost = float(value)
    except (TypeError, ValueError):
        raise _bad(path, f"{where}: cost {value!r} is not a number", "costs are USD amounts") from None
    try:
        return amount(cost)
    except ValueError:
        raise _bad(path, f"{where}: cost {value!r} is not a non-negative amount", "costs are USD amounts") from None


def _from_csv(path: Path, text: str) -> UsageExport:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    ids = [c for c in ID_COLUMNS if c in header]
    cost = next((c for c in COST_COLUMNS if c in header), None)
    if not ids or cost is None:
        raise _bad(path, f"usage export format not understood (CSV columns: {', '.join(header[:8]) or 'none'})",
                   _FORMATS_FIX)
    charges = []
    for n, row in enumerate(reader, start=2):
        record = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
        names = tuple(record[c] for c in ids if record.get(c))
        if not names:
            raise _bad(path, f"line {n}: no request id", "every record needs its request id")
        charges.append(Charge(names, _number(path, f"line {n}", record.get(cost) or 0)))
    return UsageExport("csv", tuple(charges))


def _from_json(path: Path, doc: Any) -> UsageExport:
    if isinstance(doc, dict) and isinstance(doc.get("data"), list) and _bucketed(doc["data"]):
        vendor = "OpenAI organization usage/costs" if doc.get("object") == "page" else \
            "Anthropic usage/cost report"
        raise _bad(path, f"{vendor} export: time-bucketed totals with no request ids cannot settle "
                         "an attempt", _FORMATS_FIX)
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict):
        doc = [doc]
    if isinstance(doc, dict) and isinstance(doc.get("records"), list):
        doc = doc["records"]
    if not isinstance(doc, list):
        raise _bad(path, "usage export format not understood (a JSON object of unknown shape)",
                   _FORMATS_FIX)
    records = [r["data"] if isinstance(r, dict) and isinstance(r.get("data"), dict) else r for r in doc]
    charges: list[Charge] = []
    kinds: set[str] = set()
    for n, record in enumerate(records):
        if not isinstance(record, dict):
            raise _bad(path, f"record {n}: not an object", _FORMATS_FIX)
        kind, charge = _json_record(path, n, record)
        kinds.add(kind)
        charges.append(charge)
    return UsageExport("+".join(sorted(kinds)) or "empty", tuple(charges))


def _bucketed(data: list[Any]) -> bool:
    return any(isinstance(b, dict) and "results" in b and ("starting_at" in b or "start_time" in b)
               for b in data)


def _json_record(path: Path, n: int, r: dict[str, Any]) -> tuple[str, Charge]:
    where = f"record {n}"
    if "spend" in r and "request_id" in r:
        ids = [r["request_id"], r.get("session_id") or ""]
        meta = r.get("metadata")
        if isinstance(meta, dict) and meta.get("session_id"):
            ids.append(meta["session_id"])
        return "litellm", Charge(_ids(ids), _number(path, where, r["spend"]))
    for cost_key, upstream in (("total_cost", "upstream_id"), ("totalCost", "upstreamId")):
        if cost_key in r and "id" in r:
            return "openrouter", Charge(_ids([r["id"], r.get(upstream) or ""]),
                                        _number(path, where, r[cost_key]))
    if "cost_usd" in r and (r.get("request_id") or r.get("session_id")):
        return "generic", Charge(_ids([r.get("request_id") or "", r.get("session_id") or ""]),
                                 _number(path, where, r["cost_usd"]))
    raise _bad(path, f"usage export format not understood ({where} has keys "
                     f"{', '.join(sorted(map(str, r))[:8])})", _FORMATS_FIX)


def _ids(values: list[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(v) for v in values if v))
