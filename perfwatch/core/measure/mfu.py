"""MFU and THE one peak resolver: which peak FLOP/s a run is measured against, and saying which.

The live view, `report` (all formats), the metrics endpoint and the HTML report all call
`run_mfu`, so a run shows the same MFU everywhere. MFU = samples/s x FLOPs per sample /
(peak FLOP/s per device x devices); an unknown part gives None and a reason, never a guess.

Which peak (first that applies):
1. the campaign's `peak_flops` for the run's device and dtype ("campaign peak_flops");
2. a CPU run (the log names device "cpu"): this host's measured matmul peak for the run's dtype
   and thread count ("measured CPU peak, 2 threads, cached 2026-11-23 10:12");
3. a GPU run: the datasheet peak of the GPU, identified from the run's telemetry when there is
   some (name + memory + default power limit + board part: the live NVML sample, else the run's
   telemetry.jsonl), else from the device name the log itself carries (`keys.DEVICE`), e.g.
   "NVIDIA H100 80GB HBM3" -> "H100 SXM bf16 dense, datasheet".
Devices: the GPU count the log names (`keys.DEVICE_COUNT`), else its world size, else the GPUs
the scheduler gave the run, else 1. FLOPs per sample: the campaign's `flops_per_sample`, else
the log's (`keys.FLOPS_PER_SAMPLE`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from perfwatch.core import keys
from perfwatch.core.control.peak_values import ANY
from perfwatch.core.layout import REGISTRY_FILE
from perfwatch.core.measure import host_peak
from perfwatch.core.measure.peaks import (
    PeakFlops,
    normalize_dtype,
    peak_for,
    peak_for_sample,
)
from perfwatch.core.measure.throughput import DEFAULT_WINDOW, rolling_throughput, world_of
from perfwatch.core.model.run import RunView

if TYPE_CHECKING:
    from perfwatch.core.telemetry.types import GpuSample

__all__ = [
    "NO_FLOPS", "CpuPeakPolicy", "Mfu", "Overrides", "PeakChoice", "forget_cached_cpu_peaks", "mfu", "mfu_from_rate", "overrides_from_registry",
    "peak_from_telemetry", "resolve_peak", "run_mfu",
]

NO_FLOPS = (
    f"FLOPs per sample unknown: the workload logs no {keys.FLOPS_PER_SAMPLE} "
    "and the campaign sets no flops_per_sample"
)

# "cached": the peak this host stored (`perfwatch peak --measure`, measure/host_peak.py); nothing here
# measures or imports torch (a benchmark would steal the runs' cores); "off": CPU runs get no MFU.
CpuPeakPolicy = Literal["cached", "off"]


class Mfu(msgspec.Struct, frozen=True):
    value: float | None  # 0..1 (can exceed 1 if the peak or the FLOP count is wrong)
    reason: str | None  # why value is None
    achieved_flops_per_s: float | None  # all devices together
    peak_flops_per_s: float | None  # per device x devices
    devices: int
    flops_per_sample: float | None
    flops_source: str | None  # "log" or "campaign"
    peak: PeakFlops | None
    peak_says: str | None = None  # which peak, in words ("H100 SXM bf16 dense, datasheet (...)")

    def text(self) -> str:
        return "—" if self.value is None else f"{self.value * 100:.1f}%"


class Overrides(msgspec.Struct, frozen=True):
    """What a campaign says about a run's MFU (perfwatch.json's run record)."""

    flops_per_sample: float | None = None
    peak_flops: Mapping[str, Mapping[str, float]] | None = None  # {device pattern | "*": {dtype | "*": FLOP/s}}


class PeakChoice(msgspec.Struct, frozen=True):
    peak: PeakFlops | None  # ONE device's peak
    devices: int
    says: str | None  # which peak applies, in words
    reason: str | None  # why there is none


def mfu_from_rate(
    samples_per_s: float | None,
    flops_per_sample: float | None,
    peak: PeakFlops | None,
    devices: int,
    *,
    flops_source: str | None = None,
    peak_reason: str | None = None,
    peak_says: str | None = None,
) -> Mfu:
    """The arithmetic: samples/s x FLOPs/sample / (peak per device x devices)."""
    devices = max(int(devices), 1)
    achieved = samples_per_s * flops_per_sample if samples_per_s is not None and flops_per_sample else None
    total_peak = peak.flops * devices if peak is not None else None
    reason = None
    if not flops_per_sample:
        reason = NO_FLOPS
    elif peak is None:
        reason = f"peak FLOP/s unknown: {peak_reason}" if peak_reason else "peak FLOP/s unknown for this device"
    elif samples_per_s is None:
        reason = "no throughput measured yet"
    value = achieved / total_peak if reason is None and achieved is not None and total_peak else None
    return Mfu(value, reason, achieved, total_peak, devices, flops_per_sample or None,
               flops_source if flops_per_sample else None, peak, peak_says if peak is not None else None)


def mfu(
    view: RunView,
    peak: PeakFlops | None,
    devices: int | None = None,
    *,
    flops_per_sample: float | None = None,
    window: int = DEFAULT_WINDOW,
    peak_reason: str | None = None,
    peak_says: str | None = None,
) -> Mfu:
    """MFU of a run over its rolling window against a given peak. `flops_per_sample` = the campaign's
    override (wins over the log); `devices` defaults to the logged world size, else 1."""
    fps, source = (flops_per_sample, "campaign") if flops_per_sample else (view.flops_per_sample, "log")
    sps = rolling_throughput(view, window).samples_per_s  # samples (sequences), also where the log counts tokens
    return mfu_from_rate(sps, fps, peak, world_of(view, devices), flops_source=source, peak_reason=peak_reason,
                         peak_says=peak_says)


# ---- which peak ---------------------------------------------------------------------------------
def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def logged_device(view: RunView) -> str | None:
    device = view.params.get(keys.DEVICE)
    return device if isinstance(device, str) and device else None


def logged_devices(view: RunView, scheduled: int | None = None) -> int:
    """How many devices trained: the log's GPU count, else its world size, else the scheduler's GPUs, else 1."""
    return _int(view.params.get(keys.DEVICE_COUNT)) or _int(view.world_size) or _int(scheduled) or 1


def _campaign_peak(table: Mapping[str, Mapping[str, float]], device: str | None, dtype: str) -> tuple[float, str] | None:
    """The campaign's peak for this device and dtype: a device pattern naming it beats "*"."""
    name = (device or "").lower()
    for pattern in sorted(table, key=lambda p: (p == ANY, p)):
        if pattern != ANY and (not name or pattern.lower() not in name):
            continue
        per_dtype = table[pattern]
        for key in (dtype, ANY):
            value = per_dtype.get(key)
            if value:
                where = "" if pattern == ANY else f" for {pattern!r}"
                return float(value), f"campaign peak_flops{where}, {dtype}"
    return None


def _cached_cpu(dtype: str, threads: int | None) -> PeakFlops | None:
    """A CPU peak measured before, read once per process and cache folder (the live view asks at 4 Hz)."""
    return _cached_cpu_in(dtype, threads, host_peak.cache_dir())


def forget_cached_cpu_peaks() -> None:
    """Read the CPU peak cache again on the next call (after measuring the peak in this process)."""
    _cached_cpu_in.cache_clear()
    _cpu_failure_in.cache_clear()


@functools.lru_cache(maxsize=32)
def _cached_cpu_in(dtype: str, threads: int | None, folder: Path) -> PeakFlops | None:
    return host_peak.cached_cpu_peak(dtype, threads=threads, cache=folder)


@functools.lru_cache(maxsize=32)
def _cpu_failure_in(dtype: str, threads: int | None, folder: Path) -> str | None:
    return host_peak.failure(dtype, threads, folder)


def _cpu(dtype: str, threads: int | None, policy: CpuPeakPolicy) -> tuple[PeakFlops | None, str | None, str | None]:
    if policy == "off":
        return None, None, "CPU peak not measured (--no-cpu-peak)"
    peak = _cached_cpu(dtype, threads)
    if peak is None:
        failed = _cpu_failure_in(dtype, threads, host_peak.cache_dir())
        if failed:
            return None, None, failed
        return None, None, "this host's CPU peak was never measured (`perfwatch peak --measure` stores it)"
    n = threads or peak.device.rpartition(" x ")[2].split(" ")[0]
    when = time.strftime(" %Y-%m-%d %H:%M", time.localtime(peak.measured_at)) if peak.measured_at else ""
    how = peak.source.partition(": ")[2]  # "torch fp32 matmul, best of 5[, CPUs 35% busy then]"
    return peak, f"measured CPU peak, {n} threads, {dtype}, cached{when}" + (f" ({how})" if how else ""), None


def peak_from_telemetry(records: Sequence[Mapping[str, Any]], dtype: str) -> tuple[PeakFlops | None, str]:
    """The peak of the first GPU a run's telemetry.jsonl names (identified by name, memory, TDP)."""
    for rec in records:
        for g in rec.get("gpus") or ():
            if isinstance(g, dict) and g.get("name"):
                watts = g.get("power_default_limit_w") or g.get("power_limit_w")
                return peak_for(g["name"], dtype, mem_total=g.get("mem_total"), power_limit_w=watts,
                                board_part=g.get("board_part"))
        if rec.get("gpu_unavailable"):
            return None, f"no GPU telemetry: {rec['gpu_unavailable']}"
    return None, "no GPU in the run's telemetry"


class PeakRecords:
    """The few records of a run's telemetry that `peak_from_telemetry` reads, kept while the records stream by
    (`report`'s pass, the live engine's follower): the first record, the first saying there is no GPU, and
    the first naming one (after which nothing more is kept)."""

    __slots__ = ("_named", "_unavailable", "records")

    def __init__(self) -> None:
        self.records: list[Mapping[str, Any]] = []
        self._named = self._unavailable = False

    @property
    def named(self) -> bool:
        """A kept record names the GPU."""
        return self._named

    def add(self, rec: Mapping[str, Any]) -> bool:
        """Look at the next record; True when it was kept (the peak the records give may have changed)."""
        if self._named:
            return False
        gpus = rec.get("gpus")
        named = isinstance(gpus, list) and any(isinstance(g, dict) and g.get("name") for g in gpus)
        unavailable = bool(rec.get("gpu_unavailable")) and not self._unavailable
        kept = named or unavailable or not self.records
        if kept:
            self.records.append(rec)
        self._named, self._unavailable = named, self._unavailable or unavailable
        return kept


def _datasheet(peak: PeakFlops, evidence: str) -> str:
    return f"{peak.device} {peak.dtype} dense, datasheet ({evidence})"


def resolve_peak(
    view: RunView,
    *,
    gpu: GpuSample | None = None,
    telemetry: Sequence[Mapping[str, Any]] = (),
    peak_flops: Mapping[str, Mapping[str, float]] | None = None,
    cpu: CpuPeakPolicy = "cached",
    scheduled_devices: int | None = None,
) -> PeakChoice:
    """THE decision of which peak applies to `view` (see the module docstring for the order).

    `gpu`: the live NVML sample of the run's first GPU; `telemetry`: its telemetry.jsonl records;
    `peak_flops`: the campaign's table; `scheduled_devices`: GPUs the scheduler gave the run.
    """
    dtype = normalize_dtype(view.precision)
    device = logged_device(view)
    named = gpu.name if gpu is not None and gpu.name else device
    if named is None:
        named = next((g.get("name") for r in telemetry for g in (r.get("gpus") or ())
                      if isinstance(g, dict) and g.get("name")), None)
    devices = logged_devices(view, scheduled_devices)
    if peak_flops:
        found = _campaign_peak(peak_flops, named, dtype)
        if found is not None:
            flops, where = found
            return PeakChoice(PeakFlops("campaign", dtype, flops, "campaign peak_flops"), devices, where, None)
    if device is not None and device.lower().startswith("cpu"):
        threads = _int(view.params.get(keys.THREADS))
        cpu_peak_, says, why = _cpu(dtype, threads, cpu)
        return PeakChoice(cpu_peak_, world_of(view, None), says, why)
    reasons = []
    if gpu is not None:
        peak, evidence = peak_for_sample(gpu, dtype)
        if peak is not None:
            return PeakChoice(peak, devices, _datasheet(peak, f"live GPU: {evidence}"), None)
        reasons.append(evidence)
    if telemetry:
        peak, evidence = peak_from_telemetry(telemetry, dtype)
        if peak is not None:
            return PeakChoice(peak, devices, _datasheet(peak, f"telemetry: {evidence}"), None)
        reasons.append(evidence)
    if device is not None:
        peak, evidence = peak_for(device, dtype)
        if peak is not None:
            return PeakChoice(peak, devices, _datasheet(peak, f"the log's device: {evidence}"), None)
        reasons.append(evidence)
    else:
        reasons.append("no GPU in the run's telemetry and the log names no device")
    return PeakChoice(None, devices, None, "; ".join(dict.fromkeys(reasons)))


def run_mfu(
    view: RunView,
    *,
    overrides: Overrides | None = None,
    gpu: GpuSample | None = None,
    telemetry: Sequence[Mapping[str, Any]] = (),
    cpu: CpuPeakPolicy = "cached",
    scheduled_devices: int | None = None,
    window: int = DEFAULT_WINDOW,
) -> Mfu:
    """A run's MFU as every front end shows it: the resolved peak, the campaign's FLOPs if it sets them."""
    o = overrides or Overrides()
    if not (o.flops_per_sample or view.flops_per_sample):
        cpu = "off"  # no MFU without FLOPs: never import torch or measure the CPU for nothing
    choice = resolve_peak(view, gpu=gpu, telemetry=telemetry, peak_flops=o.peak_flops, cpu=cpu,
                          scheduled_devices=scheduled_devices)
    return mfu(view, choice.peak, choice.devices, flops_per_sample=o.flops_per_sample, window=window,
               peak_reason=choice.reason, peak_says=choice.says)


def overrides_from_registry(logdir: Path | str) -> dict[str, Overrides]:
    """Per run id, what the campaign in LOGDIR/perfwatch.json says about MFU (empty for other folders)."""
    if not (Path(logdir) / REGISTRY_FILE).is_file():
        return {}  # not a campaign's LOGDIR: nothing to import or read (report stays fast)
    from perfwatch.core.control import registry

    data = registry.read(Path(logdir))
    if data is None:
        return {}
    return {r.run_id: Overrides(r.flops_per_sample, r.peak_flops) for r in data.runs
            if r.flops_per_sample or r.peak_flops}
