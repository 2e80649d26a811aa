"""The tutorial runs as written: the fenced blocks of docs/tutorial/ marked ``<!-- tutorial -->``
are run one after the other in one bash shell, in an empty directory beside a ``.venv`` (this
interpreter's), so the first-suite path cannot break without CI saying so. The README's first suite
is held to the same commands."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "docs" / "tutorial" / "first-suite.md", REPO / "docs" / "tutorial" / "first-paired-report.md")
MARKER = "<!-- tutorial -->"
_BLOCK = re.compile(r"^```console\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def marked_blocks(text: str) -> list[str]:
    """The ```console blocks right after a marker line, as bash: a ``$ `` prompt is stripped, and
    lines without one are a here-document's body. A marker with no block after it is an error."""
    blocks = []
    for part in text.split(MARKER)[1:]:
        found = _BLOCK.match(part.lstrip("\n"))
        if found is None:
            raise ValueError(f"{MARKER} is not followed by a ```console block: {part[:80]!r}")
        blocks.append("\n".join(line.removeprefix("$ ") for line in found.group(1).splitlines()))
    return blocks


def commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line and not line.startswith(("#", " "))]


def tutorial_script() -> str:
    blocks = [block for page in PAGES for block in marked_blocks(page.read_text())]
    return "set -euo pipefail\n" + "\n".join(blocks) + "\n"


def test_the_blocks_are_found_and_the_readme_runs_the_tutorials_commands() -> None:
    script = tutorial_script()
    for step in ("ray-bench init my-suite", "ray-bench image base", "ray-bench plan", "ray-bench execute",
                 "ray-bench report runs/first"):
        assert step in script
    readme = (REPO / "README.md").read_text()
    first_suite = readme.split("## Your first suite", 1)[1]
    (readme_block,) = [b.group(1) for b in _BLOCK.finditer(first_suite)][:1]
    readme_commands = commands("\n".join(line.removeprefix("$ ") for line in readme_block.splitlines()))
    assert len(readme_commands) <= 10
    tutorial = commands(script)
    missing = [c for c in readme_commands if c not in tutorial]
    assert not missing, f"the README's first suite runs commands the tested tutorial does not: {missing}"
    assert [c for c in tutorial if c in readme_commands] == readme_commands  # and in the same order


def test_a_marker_without_a_console_block_is_refused() -> None:
    with pytest.raises(ValueError, match="not followed"):
        marked_blocks(f"{MARKER}\n```bash\nls\n```\n")
    heredoc = f"{MARKER}\n```console\n$ ls\n$ cat > f <<'EOF'\nx\nEOF\n```\n"
    assert marked_blocks(heredoc) == ["ls\ncat > f <<'EOF'\nx\nEOF"]


@pytest.mark.docker
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written(tmp_path: Path, base_image: str) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "RAY_BENCH_STATE_ROOT": str(tmp_path / "state")}  # not the machine's accounts
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", "-c", tutorial_script()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=840, check=False)
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, said
    assert "run first: 8 valid, 0 failed, 0 pending" in done.stdout + done.stderr, said
    receipt = (tmp_path / "runs" / "first" / "receipt.md").read_text()
    assert "## Warnings\n\n- none" in receipt
    report = (tmp_path / "runs" / "first" / "report.md").read_text()
    assert "## Paired statistics" in report
    with (tmp_path / "runs" / "first" / "report.csv").open() as f:
        rows = list(csv.DictReader(f))
    # both tasks (init's and the one the tutorial adds); the variant runs their reference solutions
    assert {row["task"] for row in rows} == {"hello", "count-lines"}
    assert sorted((row["arm"], row["reward"]) for row in rows) == [("baseline", "0.0")] * 4 + [("variant", "1.0")] * 4
