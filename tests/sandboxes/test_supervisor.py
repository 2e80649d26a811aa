"""The resource supervisor, with an injected memory reader (no real memory pressure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_bench.errors import HaltActiveError, UserInputError
from ray_bench.sandboxes.supervisor import (
    ResourceSupervisor,
    clear_halt,
    halt_path,
    read_halt,
    require_no_halt,
)


class Meter:
    """A settable reading of host available memory."""

    def __init__(self, mb: int) -> None:
        self.mb = mb

    def __call__(self) -> int:
        return self.mb


def test_no_halt_above_reserve(tmp_path: Path) -> None:
    sup = ResourceSupervisor(tmp_path / "runs" / "r1", "r1", 2048, read_available=Meter(4096))
    assert sup.check() is None
    assert read_halt(sup.run_root) is None
    require_no_halt(sup.run_root)


def test_halt_written_with_figures_and_containers(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "r1"
    meter = Meter(1000)
    containers = [{"id": "abc", "cell": "c1", "attempt": "a1", "state": "running"}]
    sup = ResourceSupervisor(
        root,
        "r1",
        2048,
        read_available=meter,
        list_containers=lambda: containers,
        clock=lambda: 0.0,
    )
    halt = sup.check()
    assert halt is not None
    assert (halt.available_mb, halt.reserve_mb, halt.run_id) == (1000, 2048, "r1")
    on_disk = json.loads(halt_path(root).read_text())
    assert on_disk["kind"] == "resource-halt"
    assert on_disk["containers"] == containers
    assert on_disk["at"] == "1970-01-01T00:00:00+00:00"
    assert "1000 MiB" in on_disk["reason"]
    assert "2048 MiB" in on_disk["reason"]

    meter.mb = 8000  # memory came back: the halt still stands until cleared
    again = sup.check()
    assert again is not None
    assert again.available_mb == 1000
    with pytest.raises(HaltActiveError) as err:
        require_no_halt(root)
    assert "--clear-halt" in err.value.line()


def test_listing_failure_does_not_prevent_the_halt(tmp_path: Path) -> None:
    def broken() -> list[dict[str, str]]:
        raise RuntimeError("daemon gone")

    sup = ResourceSupervisor(tmp_path, "r1", 100, read_available=Meter(50), list_containers=broken)
    halt = sup.check()
    assert halt is not None
    assert "daemon gone" in halt.containers[0]["error"]


def test_clear_halt_archives_with_reason(tmp_path: Path) -> None:
    root = tmp_path / "r1"
    ResourceSupervisor(root, "r1", 100, read_available=Meter(50)).check()
    original = read_halt(root)
    with pytest.raises(UserInputError):
        clear_halt(root, None, "  ")
    with pytest.raises(UserInputError):
        clear_halt(root, tmp_path / "elsewhere.json", "fine")
    archived = clear_halt(root, halt_path(root), "killed the runaway build; 20 GiB free")
    assert read_halt(root) is None
    require_no_halt(root)
    assert archived.parent == root / "halts"
    assert archived.name.endswith("-resource-halt.json")
    record = json.loads(archived.read_text())
    assert record["halt"] == original
    assert record["clearance_reason"] == "killed the runaway build; 20 GiB free"
    with pytest.raises(UserInputError, match="no resource halt"):
        clear_halt(root, None, "again")


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"{" + b" " * (2 << 20) + b"}"],
                         ids=["corrupt", "not-a-mapping", "oversized"])
def test_an_unreadable_halt_record_still_halts(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "runs" / "r1"
    root.mkdir(parents=True)
    halt_path(root).write_bytes(content)
    halt = read_halt(root)
    assert halt is not None and "unreadable" in halt["reason"]
    with pytest.raises(HaltActiveError, match="unreadable"):
        require_no_halt(root)
