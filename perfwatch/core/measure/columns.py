"""A run's report columns: throughput now, warm-up statistics, MFU, telemetry and energy in one row.

What `report` (every format) and the HTML report add to a run's row (the metrics endpoint reads only the
telemetry means, `TelemetryColumns.summary_columns`; its other numbers are the live engine's); the
peak behind the MFU is THE resolver's (measure/mfu.py), so they all agree with the live view.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from perfwatch.core.layout import TELEMETRY_FILE, node_telemetry_files
from perfwatch.core.measure.mfu import CpuPeakPolicy, Mfu, Overrides, PeakRecords, mfu, run_mfu
from perfwatch.core.measure.peaks import PeakFlops
from perfwatch.core.measure.throughput import (
    DEFAULT_DISCARD,
    DEFAULT_WINDOW,
    ItemStats,
    Throughput,
    rolling_throughput,
    train_item_stats,
)
from perfwatch.core.model.run import RunView

if TYPE_CHECKING:
    from perfwatch.core.telemetry.jsonl import TelemetrySummary

__all__ = ["ThroughputSummary", "report_extra", "throughput_summary"]


class ThroughputSummary(msgspec.Struct, frozen=True):
    now: Throughput  # rolling window
    items: ItemStats  # whole run, warm-up dropped
    mfu: Mfu | None  # None when no peak was asked for


def throughput_summary(
    view: RunView,
    window: int = DEFAULT_WINDOW,
    *,
    discard: int = DEFAULT_DISCARD,
    peak: PeakFlops | None = None,
    devices: int | None = None,
    flops_per_sample: float | None = None,
    tokens_per_sample: float | None = None,
    peak_reason: str | None = None,
) -> ThroughputSummary:
    """Everything a runs table row or a report needs about speed, in one call."""
    now = rolling_throughput(view, window, world_size=devices, flops_per_sample=flops_per_sample,
                             tokens_per_sample=tokens_per_sample)
    m = mfu(view, peak, devices, flops_per_sample=flops_per_sample, window=window, peak_reason=peak_reason)
    return ThroughputSummary(now, train_item_stats(view, discard), m)


def report_extra(
    view: RunView,
    *,
    peak: PeakFlops | None = None,
    devices: int | None = None,
    flops_per_sample: float | None = None,
    overrides: Overrides | None = None,
    cpu: CpuPeakPolicy = "cached",
    window: int = DEFAULT_WINDOW,
    discard: int = DEFAULT_DISCARD,
    telemetry: TelemetryColumns | None = None,
) -> dict[str, Any]:
    """Columns for `report.run_row(..., extra=...)`: throughput, MFU and the run's telemetry summary.

    Telemetry comes from `telemetry` (a follower's, the metrics endpoint) or else from telemetry.jsonl
    beside the run's log (a perfwatch LOGDIR run folder), read in one streaming pass;
    without `peak`, THE peak resolver (measure/mfu.py) decides which peak applies and says so.
    """
    if telemetry is None:
        path = os.path.join(os.path.dirname(view.path), TELEMETRY_FILE) if view.path else None
        there = path is not None and (os.path.exists(path) or node_telemetry_files(os.path.dirname(path)))
        telemetry = TelemetryColumns.read(path) if path is not None and there else None  # the nodes' files too
    records = telemetry.head if telemetry is not None else []
    if peak is not None:  # a peak chosen by the caller (tests, benchmarks)
        s = throughput_summary(view, window, discard=discard, peak=peak, devices=devices,
                               flops_per_sample=flops_per_sample)
    else:
        o = overrides or Overrides(flops_per_sample=flops_per_sample)
        s = ThroughputSummary(
            rolling_throughput(view, window, world_size=devices, flops_per_sample=o.flops_per_sample),
            train_item_stats(view, discard),
            run_mfu(view, overrides=o, telemetry=records, cpu=cpu, scheduled_devices=devices, window=window),
        )
    m = s.mfu
    return {
        "rate_unit": s.now.unit,  # what the benchmark counts: "samples", or "tokens" (GPT-3)
        "rate_window": s.now.rate,  # in rate_unit/s
        "samples_per_s_window": s.now.samples_per_s,
        "device_samples_per_s": s.now.device_samples_per_s,
        "tokens_per_s": s.now.tokens_per_s,
        "train_item_avg": s.items.avg,
        "train_item_sd": s.items.sd,
        "train_item_min": s.items.min,
        "train_item_max": s.items.max,
        "train_item_range": s.items.range,
        "mfu": m.value if m else None,
        "mfu_reason": m.reason if m else None,
        "peak_device": m.peak.device if m and m.peak else None,
        "peak_used": m.peak_says if m else None,
        "flops_source": m.flops_source if m else None,
        **(telemetry.columns(view) if telemetry is not None and telemetry.samples else dict(NO_TELEMETRY, gpus=[])),
    }


class TelemetryColumns:
    """What a run's telemetry.jsonl adds to its row, gathered one record at a time in constant memory per
    sample (`add`): the summary (telemetry/jsonl.py), each GPU's energy readings (measure/energy.py) and
    the first records that name the GPU (for the MFU peak). `read` is `report`'s streaming pass;
    `LiveTelemetry` feeds one only what was appended (the metrics endpoint)."""

    def __init__(self) -> None:
        from perfwatch.core.measure.energy import Readings
        from perfwatch.core.telemetry.jsonl import TelemetryAccumulator

        self.summary = TelemetryAccumulator()
        self.readings: Readings = {}
        self.peak = PeakRecords()  # the records the MFU peak resolver reads (measure/mfu.py)

    @classmethod
    def read(cls, path: str) -> TelemetryColumns:
        from perfwatch.core.telemetry.jsonl import iter_telemetry

        out = cls()
        for rec in iter_telemetry(path):
            out.add(rec)
        return out

    @property
    def samples(self) -> int:
        return self.summary.n

    def add(self, rec: dict[str, Any]) -> None:
        from perfwatch.core.measure.energy import add_readings

        self.summary.add(rec)
        add_readings(self.readings, rec)
        self.peak.add(rec)

    @property
    def head(self) -> list[Mapping[str, Any]]:
        """The records the MFU peak resolver reads: the first, the first saying "no GPU", the first naming one."""
        return self.peak.records

    def summary_columns(self) -> dict[str, Any]:
        """The telemetry summary's columns alone (means, maxima, per node): what the metrics endpoint reads."""
        return _summary_columns(self.summary.summary())

    def columns(self, view: RunView) -> dict[str, Any]:
        """The telemetry summary and energy columns of the run."""
        from perfwatch.core.measure.energy import readings_energy_columns

        return {**self.summary_columns(), **readings_energy_columns(view, self.readings)}


class LiveTelemetry:
    """A run's growing telemetry followed incrementally: `poll()` parses only the lines appended since the
    last poll into `columns`, so a scrape of a 55-hour 8-GPU run reads seconds of new samples, not the
    whole file. The run's files are its telemetry.jsonl and, for a Slurm run, each node's file
    (`jsonl.TelemetryFiles`, looked for again at every poll: nodes start writing at different times);
    when one of them is replaced, truncated or gone, all are read again from the start. One thread only."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.columns = TelemetryColumns()
        self.version = 0  # increments when the columns changed
        self._followers: dict[str, Any] = {}  # file -> its RecordFollower
        self._files: Any = None  # jsonl.TelemetryFiles, at the first poll

    def poll(self) -> bool:
        from perfwatch.core.telemetry.follow import RecordFollower
        from perfwatch.core.telemetry.jsonl import TelemetryFiles

        if self._files is None:
            self._files = TelemetryFiles(self.path)
        files = [str(f) for f in self._files.files()]
        gone = [f for f in self._followers if f not in files]  # kept aside by a restart (`.attempt-N.*`)
        for f in gone:
            self._followers.pop(f).close()
        for f in files:
            if f not in self._followers:
                self._followers[f] = RecordFollower(f)
        batches = [batch for follower in self._followers.values() for batch in follower.poll()]
        if not batches and not (gone and self.columns.samples):
            return False
        if self.columns.samples and (gone or any(reset for reset, _ in batches)):  # counted samples are gone: read all again
            self.close()
            self._followers, self.columns = {}, TelemetryColumns()
            self.poll()  # nothing counted now, so this reads each file once from its start
            self.version += 1
            return True
        for _, records in batches:
            for rec in records:
                self.columns.add(rec)
        self.version += 1
        return True

    def close(self) -> None:
        for follower in self._followers.values():
            follower.close()


def _summary_columns(t: TelemetrySummary) -> dict[str, Any]:
    return {
        "telemetry_samples": t.samples,
        "gpu_util_mean": t.gpu_util_mean,
        "gpu_util_max": t.gpu_util_max,
        "gpu_mem_max_gib": t.gpu_mem_max / 1024**3 if t.gpu_mem_max is not None else None,
        "power_mean_w": t.power_mean_w,
        "power_max_w": t.power_max_w,
        "cpu_mean": t.cpu_mean,
        "rss_max_mib": t.rss_max / 1024**2 if t.rss_max is not None else None,
        "gpu_unavailable": t.gpu_unavailable,
        "gpus": list(t.gpu_indices),
        "gpu_run_mem_max_gib": t.run_mem_max / 1024**3 if t.run_mem_max is not None else None,
        "gpu_shared_with": t.shared_max,
        "clock_events": {r: round(f, 3) for r, f in (t.throttle or {}).items() if r != "gpu_idle"} or None,
        "telemetry_nodes": {node: _node_columns(n) for node, n in t.nodes.items()} if t.nodes else None,
    }


def _node_columns(t: TelemetrySummary) -> dict[str, Any]:
    """One compute node's share of a run (Slurm): the per-node figures behind the run's totals."""
    return {"samples": t.samples, "gpus": t.gpus, "gpu_util_mean": t.gpu_util_mean, "power_mean_w": t.power_mean_w,
            "cpu_mean": t.cpu_mean, "rss_max_mib": t.rss_max / 1024**2 if t.rss_max is not None else None,
            "gpu_unavailable": t.gpu_unavailable}


# what `_telemetry_columns` gives a run without telemetry (an MLPerf results tree: every run), without
# importing the telemetry reader and the energy integrator (tests/test_report.py holds them equal)
NO_TELEMETRY: dict[str, Any] = {
    "telemetry_samples": 0, "gpu_util_mean": None, "gpu_util_max": None, "gpu_mem_max_gib": None,
    "power_mean_w": None, "power_max_w": None, "cpu_mean": None, "rss_max_mib": None, "gpu_unavailable": None,
    "gpus": [], "gpu_run_mem_max_gib": None, "gpu_shared_with": 0, "clock_events": None, "telemetry_nodes": None,
    "energy_to_train_kj": None, "samples_per_j": None, "energy_run_kj": None, "energy_method": None,
    "energy_covered_s": None,
}
