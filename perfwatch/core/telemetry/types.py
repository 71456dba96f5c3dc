"""Telemetry data types: immutable snapshots that are safe to hand to any thread.

Every reading is Optional: `None` means "not available here", and the reason
for a missing GPU field is kept in `unavailable[field]` so the UI can say *why*
(not supported by this board, no permission, ...) instead of showing a blank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import msgspec

_EMPTY: Mapping[str, str] = MappingProxyType({})

# the GPU fields a sampler fills; the keys of `GpuSample.unavailable` are among these
GPU_FIELDS = (
    "name", "uuid", "bus_id", "board_part", "util_sm", "util_mem", "mem_used", "mem_total",
    "power_w", "power_limit_w", "power_default_limit_w", "power_max_limit_w", "temp_c",
    "sm_clock", "mem_clock", "throttle", "processes", "energy_mj",
)


class GpuProcess(msgspec.Struct, frozen=True):
    pid: int
    used_mem: int | None  # bytes; None when the driver does not report it (e.g. in some containers)


class GpuSample(msgspec.Struct, frozen=True):
    """One GPU at one instant. `util_sm` is NVML's "GPU utilization": the share of time a kernel ran."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    board_part: str | None = None
    util_sm: float | None = None  # percent
    util_mem: float | None = None  # percent of time the memory controller was busy
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced limit (an admin may have capped it)
    power_default_limit_w: float | None = None  # the board's default limit: its TDP
    power_max_limit_w: float | None = None  # highest limit the board accepts
    temp_c: float | None = None
    sm_clock: int | None = None  # MHz
    mem_clock: int | None = None  # MHz
    throttle: tuple[str, ...] | None = None  # decoded clock event reasons, () = none active
    processes: tuple[GpuProcess, ...] | None = None
    energy_mj: int | None = None  # NVML's total-energy counter: mJ since the driver loaded (Volta and newer)
    unavailable: Mapping[str, str] = msgspec.field(default_factory=lambda: _EMPTY)

    def reason(self, name: str) -> str | None:
        """Why `name` is None (None when it has a value)."""
        return self.unavailable.get(name)


class GpuStatus(msgspec.Struct, frozen=True):
    """All GPUs of the host, or why there are none (`available=False` and a human `reason`)."""

    available: bool
    reason: str | None = None
    driver: str | None = None
    gpus: tuple[GpuSample, ...] = ()


class HostSample(msgspec.Struct, frozen=True):
    """Host-wide CPU, memory, disk and network. Rates are None on the first sample (they need a delta)."""

    cpu_percent: float | None = None  # mean over cores, 0..100
    cpu_per_core: tuple[float, ...] = ()
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    mem_percent: float | None = None
    swap_used: int | None = None
    swap_total: int | None = None
    disk_read_bps: float | None = None  # bytes/s
    disk_write_bps: float | None = None
    net_rx_bps: float | None = None
    net_tx_bps: float | None = None
    unavailable: Mapping[str, str] = msgspec.field(default_factory=lambda: _EMPTY)


class ProcTree(msgspec.Struct, frozen=True):
    """A run's whole process tree: CPU % summed over processes (can exceed 100), RSS summed."""

    pids: tuple[int, ...] = ()  # the live processes (roots and descendants)
    cpu_percent: float | None = None
    rss: int | None = None  # bytes; pages shared between processes count once per process

    @property
    def alive(self) -> bool:
        return bool(self.pids)


class Snapshot(msgspec.Struct, frozen=True):
    """What one sampling tick saw. Parts a sampler does not cover stay None / empty."""

    time: float  # seconds since the epoch
    gpu: GpuStatus | None = None
    host: HostSample | None = None
    runs: Mapping[str, ProcTree] = msgspec.field(default_factory=lambda: MappingProxyType({}))

    def merge(self, other: Snapshot) -> Snapshot:
        """Combine two samplers' views of the same tick (the other's parts win where both have one)."""
        runs = dict(self.runs)
        runs.update(other.runs)
        return Snapshot(
            time=max(self.time, other.time),
            gpu=other.gpu if other.gpu is not None else self.gpu,
            host=other.host if other.host is not None else self.host,
            runs=MappingProxyType(runs),
        )


class RunResources(msgspec.Struct, frozen=True):
    """What the launcher knows about a live run: its root pids, its GPUs, its folder.

    `gpu_indices` are the NVML indices in the run's CUDA_VISIBLE_DEVICES (the
    launcher sets CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA and NVML number GPUs
    alike); None = "not pinned": the run's GPUs are those its processes use.
    """

    pids: tuple[int, ...]
    gpu_indices: tuple[int, ...] | None
    folder: Path


class Sampler(Protocol):
    """Anything that can take a telemetry snapshot. `roots` maps run id -> root pids of that run."""

    def sample(self, roots: Mapping[str, Sequence[int]] | None = None) -> Snapshot: ...

    def close(self) -> None: ...
