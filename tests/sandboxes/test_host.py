"""Host admission arithmetic and the /proc/meminfo reader."""

from __future__ import annotations

from pathlib import Path

from ray_bench.sandboxes.base import Resources
from ray_bench.sandboxes.host import (
    HostResources,
    admit,
    max_concurrent,
    read_available_mb,
    render_admission,
)

HOST = HostResources(memory_mb=16384, cpus=8.0, available_mb=12000)
SMALL = Resources(cpus=2, memory_mb=4096)


def test_admits_within_budget() -> None:
    d = admit([SMALL, SMALL], SMALL, HOST, reserve_mb=2048, reserve_cpus=1)
    assert d.admitted
    assert (d.memory_mb_committed, d.memory_mb_budget) == (12288, 14336)
    assert (d.cpus_committed, d.cpus_budget) == (6, 7)


def test_refuses_on_memory_and_on_cpus() -> None:
    mem = admit([SMALL, SMALL, SMALL], SMALL, HOST, reserve_mb=2048, reserve_cpus=0)
    assert not mem.admitted
    assert "memory 16384 MiB > budget 14336 MiB" in mem.reason
    cpu = admit([Resources(cpus=3, memory_mb=10)] * 2, Resources(cpus=2, memory_mb=10), HOST, 0, 1)
    assert not cpu.admitted
    assert cpu.reason == "cpus 8 > budget 7"


def test_exactly_at_budget_is_admitted() -> None:
    d = admit([SMALL], SMALL, HOST, reserve_mb=16384 - 8192, reserve_cpus=4)
    assert d.admitted


def test_unlimited_counted_with_a_default() -> None:
    d = admit([Resources()], Resources(), HOST, 0, 0, unlimited=Resources(cpus=4, memory_mb=8192))
    assert (d.memory_mb_committed, d.cpus_committed, d.admitted) == (16384, 8, True)
    assert not admit([Resources()] * 9, Resources(), HOST, 0, 0).admitted  # 10 x 1 CPU > 8


def test_max_concurrent() -> None:
    assert max_concurrent(SMALL, HOST, reserve_mb=2048, reserve_cpus=1) == 3
    assert max_concurrent(Resources(cpus=0.5, memory_mb=512), HOST, 0, 0) == 16
    assert max_concurrent(SMALL, HOST, reserve_mb=20000, reserve_cpus=0) == 0


def test_render_shows_the_arithmetic() -> None:
    lines = render_admission(admit([SMALL], SMALL, HOST, reserve_mb=2048, reserve_cpus=1))
    text = "\n".join(lines)
    assert "16384 - 2048 = 14336 MiB" in text
    assert "8192 MiB committed (1 running + next)" in text
    assert "**admitted**" in text
    assert all(line.startswith("- ") for line in lines)


def test_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24684000 kB\n"
        "MemFree:  100 kB\n"
        "MemAvailable:   20480000 kB\n"
        "HugePages_Total: 0\n"
    )
    assert read_available_mb(meminfo) == 20000
    host = HostResources.read(meminfo)
    assert (host.memory_mb, host.available_mb) == (24105, 20000)
    assert host.cpus >= 1
    real = HostResources.read()
    assert 0 < real.available_mb <= real.memory_mb
