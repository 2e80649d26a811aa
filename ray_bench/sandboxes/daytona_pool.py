"""The organisation's compute pool on Daytona, as configuration (no SDK needed to read it)."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field


class DaytonaPool(BaseModel):
    """The organisation's compute pool on Daytona: what the capacity actor may hand out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vcpu: int = Field(
        gt=0, description="vCPUs the organisation may run at once across all sandboxes."
    )
    memory_gib: int = Field(gt=0, description="Memory in GiB the organisation may hold at once.")
    disk_gib: int = Field(gt=0, description="Disk in GiB the organisation may hold at once.")
    creates_per_minute: float = Field(
        gt=0,
        description="Sandbox creates per minute the API allows (its `sandbox-create` throttler).",
    )
    default_vcpu: int = Field(
        default=1, gt=0, description="vCPUs a sandbox gets when its spec names none."
    )
    default_memory_gib: int = Field(
        default=1, gt=0, description="Memory in GiB a sandbox gets when its spec names none."
    )
    default_disk_gib: int = Field(
        default=3, gt=0, description="Disk in GiB a sandbox gets when its spec names none."
    )

    max_sandbox_vcpu: int | None = Field(
        default=None, gt=0, description="The most vCPUs Daytona lets one sandbox have (the tier's limit)."
    )
    max_sandbox_memory_gib: int | None = Field(
        default=None, gt=0, description="The most memory in GiB Daytona lets one sandbox have."
    )
    max_sandbox_disk_gib: int | None = Field(
        default=None, gt=0, description="The most disk in GiB Daytona lets one sandbox have."
    )

    tier: int | None = Field(
        default=None, ge=1, le=4,
        description="The organisation's Daytona tier. Tiers 1 and 2 reach only Daytona's essential "
        "services and the hosts in `allowed_hosts`: a provider base URL elsewhere refuses the plan.",
    )
    allowed_hosts: tuple[str, ...] | None = Field(
        default=None,
        description="Hosts the organisation's sandboxes may reach beyond Daytona's essential services "
        "(what Daytona allowed for it; `*.example.com` matches subdomains). Set, it is checked on any tier.",
    )

    build_concurrency: int = Field(
        default=4, gt=0, description="Snapshots the build phase makes at once before the fan-out."
    )
    build_timeout_min: float = Field(
        default=30.0, gt=0,
        description="Minutes one snapshot build may take (a cold multi-GB build takes tens of minutes).",
    )
    snapshot_quota: int = Field(
        default=30, gt=0,
        description="Snapshots the organisation may hold (building, pending, pulling or active; Daytona's "
        "snapshotQuota, 30 by default). The build phase stays under it, deleting ray-bench's own "
        "snapshots least recently used first; cells of images past it create from their image.",
    )

    def restricted(self) -> bool:
        """Whether the organisation's sandboxes reach only an allowlist of hosts."""
        return self.allowed_hosts is not None or self.tier in (1, 2)

    def reaches(self, host: str) -> bool:
        """Whether a sandbox of the organisation may reach ``host``."""
        if not self.restricted():
            return True
        host = host.lower().rstrip(".")
        for entry in self.allowed_hosts or ():
            allowed = entry.lower().rstrip(".")
            if host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:])):
                return True
        return False

    def too_big(self, cpus: float | None, memory_mb: int | None, disk_mb: int | None) -> str | None:
        """What a sandbox of this size asks beyond the per-sandbox limits, or ``None``."""
        cpu, memory, disk = self.asked(cpus, memory_mb, disk_mb)
        for asked, limit, what in ((cpu, self.max_sandbox_vcpu, "vCPU"),
                                   (memory, self.max_sandbox_memory_gib, "GiB memory"),
                                   (disk, self.max_sandbox_disk_gib, "GiB disk")):
            if limit is not None and asked > limit:
                return f"asks {asked} {what} per sandbox; Daytona allows at most {limit}"
        return None

    def asked(self, cpus: float | None, memory_mb: int | None, disk_mb: int | None) -> tuple[int, int, int]:
        """vCPUs, GiB of memory and GiB of disk as the backend asks Daytona (whole units)."""
        return (math.ceil(cpus) if cpus else self.default_vcpu,
                math.ceil(memory_mb / 1024) if memory_mb else self.default_memory_gib,
                math.ceil(disk_mb / 1024) if disk_mb else self.default_disk_gib)

    def slots(self, cpus: float | None, memory_mb: int | None, disk_mb: int | None = None) -> int:
        """Sandboxes of this size that fit the pool at once, rounded as the backend asks Daytona
        for them (whole vCPUs, whole GiB): what the backend's admission pool may hold."""
        cpu, memory, disk = self.asked(cpus, memory_mb, disk_mb)
        return max(0, min(self.vcpu // cpu, self.memory_gib // memory, self.disk_gib // disk))
