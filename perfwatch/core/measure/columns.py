"""A run's report columns: throughput now, warm-up statistics, MFU, telemetry and energy in one row.

What `report` (every format), the metrics endpoint and the HTML report add to a run's row; the
peak behind the MFU is THE resolver's (measure/mfu.py), so they all agree with the live view.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from perfwatch.core.layout import TELEMETRY_FILE
from perfwatch.core.measure.mfu import CpuPeakPolicy, Mfu, Overrides, mfu, run_mfu
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
) -> dict[str, Any]:
    """Columns for `report.run_row(..., extra=...)`: throughput, MFU and the run's telemetry summary.

    Telemetry comes from telemetry.jsonl beside the run's log (a perfwatch LOGDIR run folder);
    without `peak`, THE peak resolver (measure/mfu.py) decides which peak applies and says so.
    """
    telemetry = os.path.join(os.path.dirname(view.path), TELEMETRY_FILE) if view.path else None
    records: list[dict[str, Any]] = []
    if telemetry is not None and os.path.exists(telemetry):
        from perfwatch.core.telemetry.jsonl import read_telemetry  # a results tree has none: not imported

        records = read_telemetry(telemetry)
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
        **(_telemetry_columns(view, records) if records else dict(NO_TELEMETRY, gpus=[])),
    }


def _telemetry_columns(view: RunView, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The telemetry summary and energy columns of a run with telemetry.jsonl records."""
    from perfwatch.core.measure.energy import energy_columns
    from perfwatch.core.telemetry.jsonl import summarize_telemetry

    return {**_summary_columns(summarize_telemetry(records)), **energy_columns(view, records)}


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
    }


# what `_telemetry_columns` gives a run without telemetry (an MLPerf results tree: every run), without
# importing the telemetry reader and the energy integrator (tests/test_report.py holds them equal)
NO_TELEMETRY: dict[str, Any] = {
    "telemetry_samples": 0, "gpu_util_mean": None, "gpu_util_max": None, "gpu_mem_max_gib": None,
    "power_mean_w": None, "power_max_w": None, "cpu_mean": None, "rss_max_mib": None, "gpu_unavailable": None,
    "gpus": [], "gpu_run_mem_max_gib": None, "gpu_shared_with": 0, "clock_events": None,
    "energy_to_train_kj": None, "samples_per_j": None, "energy_run_kj": None, "energy_method": None,
    "energy_covered_s": None,
}
