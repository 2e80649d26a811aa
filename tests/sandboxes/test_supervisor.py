"""The resource supervisor, with injected memory and disk readers (no real pressure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_bench.errors import HaltActiveError, UserInputError
from ray_bench.sandboxes.supervisor import (
    RESERVE_DISK_MB_ENV,
    RESERVE_MB_ENV,
    HostSupervision,
    Reserve,
    ResourceSupervisor,
    clear_halt,
    halt_path,
    read_halt,
    require_no_halt,
    shortfall,
    write_run_halt,
)


class Meter:
    """A settable reading (MiB)."""

    def __init__(self, mb: int) -> None:
        self.mb = mb

    def __call__(self, *_: object) -> int:
        return self.mb


def test_shortfall_names_memory_and_disk_with_figures() -> None:
    reserve = Reserve(2048, 500, "/scratch")
    assert shortfall(4096, 600, reserve) is None
    assert shortfall(2047, 600, reserve) == "available memory 2047 MiB is under the reserve of 2048 MiB"
    assert shortfall(4096, 499, reserve) == "free disk 499 MiB at /scratch is under the reserve of 500 MiB"
    assert shortfall(1, 1, reserve) is not None and "; free disk" in str(shortfall(1, 1, reserve))
    assert shortfall(4096, 0, Reserve(2048, 0)) is None  # 0: the disk check is off


def test_node_overrides_replace_the_plans_reserve_and_refuse_typos() -> None:
    reserve = Reserve(1024, 1024, "/tmp")
    assert reserve.on_node({}) == reserve
    assert reserve.on_node({RESERVE_MB_ENV: "4096", RESERVE_DISK_MB_ENV: "0"}) == Reserve(4096, 0, "/tmp")
    with pytest.raises(UserInputError) as err:
        reserve.on_node({RESERVE_DISK_MB_ENV: "2G"})
    assert RESERVE_DISK_MB_ENV in err.value.line() and "2G" not in err.value.line()


def test_no_halt_above_reserve() -> None:
    sup = ResourceSupervisor(Reserve(2048, 100), "r1", read_available=Meter(4096), read_disk_free=Meter(200))
    assert sup.check() is None
    assert HostSupervision(sup).check() == []


def test_halt_has_figures_and_containers_and_stays() -> None:
    meter = Meter(1000)
    containers = [{"id": "abc", "cell": "c1", "attempt": "a1", "state": "running"}]
    sup = ResourceSupervisor(Reserve(2048, 0), "r1", node="n1", address="10.0.0.2", read_available=meter,
                             list_containers=lambda: containers, clock=lambda: 0.0)
    halt = sup.check()
    assert halt is not None
    assert (halt.available_mb, halt.reserve_mb, halt.run_id, halt.node) == (1000, 2048, "r1", "n1")
    assert halt.containers == containers
    assert halt.at == "1970-01-01T00:00:00+00:00"
    assert halt.reason == "node 10.0.0.2: available memory 1000 MiB is under the reserve of 2048 MiB"
    meter.mb = 8000  # memory came back: the halt still stands
    assert sup.check() == halt


def test_disk_under_reserve_halts_the_node() -> None:
    disk = Meter(50)
    sup = ResourceSupervisor(Reserve(10, 100, "/scratch"), "r1", read_available=Meter(4096), read_disk_free=disk)
    halt = sup.check()
    assert halt is not None
    assert (halt.free_disk_mb, halt.disk_reserve_mb) == (50, 100)
    assert halt.reason == "host: free disk 50 MiB at /scratch is under the reserve of 100 MiB"


def test_listing_failure_does_not_prevent_the_halt() -> None:
    def broken() -> list[dict[str, str]]:
        raise RuntimeError("daemon gone")

    sup = ResourceSupervisor(Reserve(100), "r1", read_available=Meter(50), list_containers=broken)
    halt = sup.check()
    assert halt is not None
    assert "daemon gone" in halt.containers[0]["error"]


def _halted(node: str, root: Path) -> Path:
    halt = ResourceSupervisor(Reserve(100), "r1", node=node, address=f"addr-{node}", read_available=Meter(50)).check()
    assert halt is not None
    write_run_halt(root, [halt])
    return root


def test_run_halt_blocks_resume_and_names_every_node(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "r1"
    one, two = (ResourceSupervisor(Reserve(100), "r1", node=n, address=f"addr-{n}", read_available=Meter(50)).check()
                for n in ("n1", "n2"))
    assert one is not None and two is not None
    write_run_halt(root, [one, two])
    on_disk = read_halt(root)
    assert on_disk is not None and on_disk["kind"] == "resource-halt"
    assert [n["node"] for n in on_disk["nodes"]] == ["n1", "n2"]
    assert "addr-n1" in on_disk["reason"] and "addr-n2" in on_disk["reason"]
    with pytest.raises(HaltActiveError) as err:
        require_no_halt(root)
    assert "--clear-halt" in err.value.line()


def test_clear_halt_archives_with_reason(tmp_path: Path) -> None:
    root = _halted("n1", tmp_path / "r1")
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
