"""A task whose verifier runs in its own container (``environment_mode = "separate"``), built
from ``tests/Dockerfile`` over the busybox base, with 128 MiB and no network of its own. Its
solution writes two artifacts (one with an excluded file), a file into the convention directory
``/logs/artifacts``, an artifact under ``/tmp`` (whose mode the handover must keep) and a scratch
file that is no artifact; its verifier writes what it saw to
``/logs/verifier/seen.txt`` and reward 1 only when it was handed exactly what Harbor hands it."""

from __future__ import annotations

from pathlib import Path

SOLVE = """#!/bin/sh
mkdir -p /app/out /app/notes /logs/artifacts
echo 42 > /app/out/answer.txt
echo keep > /app/notes/keep.txt
echo drop > /app/notes/drop.tmp
echo note > /logs/artifacts/note.txt
echo scratch > /app/scratch.txt
mkdir -p /tmp/outbox && echo out > /tmp/outbox/x.txt
"""

TEST = """#!/bin/sh
seen=/logs/verifier/seen.txt
: > "$seen"
[ "$(cat /app/out/answer.txt 2>/dev/null)" = "42" ] && echo answer >> "$seen"
[ -f /app/notes/keep.txt ] && echo notes >> "$seen"
[ -f /app/notes/drop.tmp ] && echo excluded-leaked >> "$seen"
[ -f /logs/artifacts/note.txt ] && echo convention >> "$seen"
[ -f /app/scratch.txt ] && echo scratch-leaked >> "$seen"
[ -f /verifier-image-marker ] && echo own-image >> "$seen"
[ -f /tmp/outbox/x.txt ] && [ "$(stat -c %a /tmp)" = "1777" ] && echo tmp-kept >> "$seen"
[ "$GREETING" = "hello" ] && echo env >> "$seen"
grep -q eth0 /proc/net/dev && echo online-leaked >> "$seen"
echo "memory $(cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)" >> "$seen"
echo "cwd $(pwd)" >> "$seen"
if grep -q answer "$seen" && grep -q notes "$seen" && grep -q convention "$seen" \\
   && grep -q own-image "$seen" && grep -q tmp-kept "$seen" && ! grep -q leaked "$seen"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def write_separate_verifier_task(task_dir: Path, base_image: str, *, exclude: bool = True) -> Path:
    """``exclude=False``: the notes artifact without its ``exclude`` pattern. Harbor collects an
    artifact with one by ``tar --exclude`` in the container (``download_dir_with_exclusions``),
    which busybox's tar lacks: there it hands the verifier nothing of that artifact."""
    notes = '{ source = "/app/notes", exclude = ["*.tmp"] }' if exclude else '"/app/notes"'
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "solution").mkdir()
    (task_dir / "environment").mkdir()
    (task_dir / "task.toml").write_text(f"""schema_version = "1.4"
artifacts = ["/app/out", {notes}, "/tmp/outbox"]

[task]
name = "ray-bench/separate-verifier"

[agent]
timeout_sec = 60

[verifier]
timeout_sec = 60
environment_mode = "separate"

[verifier.env]
GREETING = "hello"

[verifier.environment]
memory_mb = 128
network_mode = "no-network"

[environment]
docker_image = "{base_image}"
""")
    (task_dir / "instruction.md").write_text("Write 42 into /app/out/answer.txt.\n")
    (task_dir / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    (task_dir / "solution" / "solve.sh").write_text(SOLVE)
    (task_dir / "tests" / "test.sh").write_text(TEST)
    (task_dir / "tests" / "Dockerfile").write_text(
        f"FROM {base_image}\nCOPY test.sh /tests/test.sh\nRUN echo built > /verifier-image-marker\nWORKDIR /grade\n")
    return task_dir
