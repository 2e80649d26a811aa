#!/usr/bin/env python3
"""Tally how ray-bench reads a directory of selection files (e.g. a CodeScaleBench checkout's
``configs/``): each *.json / *.yaml / *.yml / *.txt file below DIR is loaded with
``load_selection`` and, with --cli, checked by ``ray-bench validate FILE`` (exit code, and that
nothing was written). The secret scan is run on what each JSON file holds, in two ways: as the
loader runs it (known key shapes anywhere, entropy only where a value reaches a command) and with
``everywhere=True`` (what an entropy-only scan would take for a secret: task ids, hashes).

    PYTHONPATH=. python scripts/selection-tally.py ~/CodeScaleBench/configs [--cli] [--json]

Prints one line per file (parsed N entries / refused: the loader's one line / CRASH: the
exception) and a tally; exit 0 unless a file crashed the loader.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from ray_bench.config.secrets import find_secrets
from ray_bench.config.selection import Selection, load_selection, resolve_selection
from ray_bench.config.tasks import index_tasks
from ray_bench.errors import UserInputError

SUFFIXES = {".json", ".yaml", ".yml", ".txt"}


def _cli(path: Path) -> tuple[int, str, bool]:
    """(exit code, first line of stderr, whether the working directory was left untouched)."""
    with tempfile.TemporaryDirectory(prefix="selection-tally-") as cwd:
        code = "import sys; from ray_bench.cli import main; sys.argv[0] = 'ray-bench'; main()"
        proc = subprocess.run([sys.executable, "-c", code, "validate", str(path.resolve())],
                              cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        untouched = not any(Path(cwd).iterdir())
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return proc.returncode, lines[0] if lines else "", untouched


def _resolve(selection: Selection) -> str:
    """Resolve the entries against a stand-in checkout holding an empty task at each entry's
    ``task_dir`` (under ``benchmarks/``, as CSB lays it out), once with the checkout and once
    with its ``benchmarks/`` as the root: "ok", "ok (N warnings)", or the first problem."""
    with tempfile.TemporaryDirectory(prefix="selection-tally-root-") as tmp:
        checkout = Path(tmp) / "checkout"
        for entry in selection.entries:
            if entry.task_dir is None:
                continue
            rel = Path(entry.task_dir)
            rel = Path(*rel.parts[1:]) if rel.parts[0] == "benchmarks" else rel
            (checkout / "benchmarks" / rel).mkdir(parents=True, exist_ok=True)
            (checkout / "benchmarks" / rel / "task.toml").write_text('version = "1.0"\n')
        if not checkout.is_dir():
            return "no task_dir"
        outcome = []
        for root in (checkout, checkout / "benchmarks"):
            try:
                resolved = resolve_selection(selection, [root], index_tasks([root]))
                outcome.append(f"ok ({len(resolved.warnings)} warnings)" if resolved.warnings else "ok")
            except UserInputError as exc:
                outcome.append(f"refused: {str(exc).splitlines()[0].replace(tmp, '<tmp>')}")
        return outcome[0] if outcome[0] == outcome[1] else f"checkout: {outcome[0]}; benchmarks/: {outcome[1]}"


def tally(root: Path, *, cli: bool) -> dict[str, Any]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    rows: list[dict[str, Any]] = []
    for path in files:
        row: dict[str, Any] = {"file": str(path.relative_to(root))}
        try:
            selection = load_selection(path)
            row.update(status="parsed", entries=len(selection.entries), resolve=_resolve(selection))
        except UserInputError as exc:
            row.update(status="refused", reason=str(exc).splitlines()[0])
        except Exception as exc:  # a crash is what this tally looks for
            row.update(status="crashed", reason=f"{type(exc).__name__}: {exc}",
                       trace=traceback.format_exc(limit=3))
        if path.suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                row["secrets"] = len(find_secrets(data))
                row["entropy_everywhere"] = len(find_secrets(data, everywhere=True))
            except ValueError:
                pass
        if cli:
            code, line, untouched = _cli(path)
            row.update(cli_exit=code, cli_line=line, cli_wrote_nothing=untouched)
        rows.append(row)
    resolved = sum(1 for r in rows if str(r.get("resolve", "")).startswith("ok"))
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("parsed", "refused", "crashed")}
    return {"dir": str(root), "files": len(rows),
            "entries": sum(r.get("entries", 0) for r in rows), **counts, "resolved": resolved,
            "secret_hits": sum(r.get("secrets", 0) for r in rows),
            "entropy_hits_if_scanned_everywhere": sum(r.get("entropy_everywhere", 0) for r in rows),
            "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--cli", action="store_true", help="also run `ray-bench validate FILE` on each")
    parser.add_argument("--json", action="store_true", help="print the tally as JSON")
    args = parser.parse_args()
    result = tally(args.dir, cli=args.cli)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in result["rows"]:
            what = f"parsed, {row['entries']} entries, resolve {row['resolve']}" if row["status"] == "parsed" else \
                f"{row['status']}: {row['reason']}"
            extra = f"  [validate exit {row['cli_exit']}{'' if row['cli_wrote_nothing'] else ', WROTE FILES'}]" \
                if "cli_exit" in row else ""
            print(f"{row['file']}: {what}{extra}")
        print(f"{result['files']} files, {result['entries']} entries: {result['parsed']} parsed, "
              f"{result['refused']} refused, {result['crashed']} crashed; {result['resolved']} of the parsed "
              "resolve against a stand-in checkout; secret scan: "
              f"{result['secret_hits']} hits ({result['entropy_hits_if_scanned_everywhere']} "
              "high-entropy strings if entropy were judged everywhere)")
    return 1 if result["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
