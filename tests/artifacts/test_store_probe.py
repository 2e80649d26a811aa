"""The artifact store probe's two halves without Ray (ray_bench.artifacts.probe): a node's
marker must read back on the driver with the node's token."""

from __future__ import annotations

from pathlib import Path

from ray_bench.artifacts.probe import probe_key, read_marker, write_marker
from ray_bench.artifacts.store import LocalStore


def test_a_marker_reads_back_only_where_it_was_written(tmp_path: Path) -> None:
    key = probe_key("r1", "node-a")
    assert write_marker(str(tmp_path / "shared"), key, "t0k3n") is None
    assert read_marker(LocalStore(tmp_path / "shared"), key, "t0k3n") is None
    # the node's view of the path is not the driver's: nothing there
    elsewhere = read_marker(LocalStore(tmp_path / "driver-view"), key, "t0k3n")
    assert elsewhere is not None and "cannot read it back" in elsewhere
    other = read_marker(LocalStore(tmp_path / "shared"), key, "another")
    assert other is not None and "another node's marker" in other


def test_a_node_that_cannot_write_says_so_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    problem = write_marker(str(blocker / "store"), probe_key("r1", "n"), "t")
    assert problem is not None and problem.startswith("cannot write its marker") and "\n" not in problem
