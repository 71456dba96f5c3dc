"""Throughput / MFU / warm-up statistics against hand-computed numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfwatch.core.ingest.mllog import Event
from perfwatch.core.measure.columns import report_extra, throughput_summary
from perfwatch.core.measure.mfu import mfu, mfu_from_rate
from perfwatch.core.measure.peaks import PeakFlops
from perfwatch.core.measure.throughput import (
    SpeedWindow,
    rolling_throughput,
    train_item_stats,
    warmup_stats,
    window_rate,
)
from perfwatch.core.model.run import Run, RunView


def make_view(
    rates: list[tuple[float, float]],
    *,
    flops_per_sample: float | None = None,
    world_size: int | None = None,
    gbs: int | None = None,
    accum: int | None = None,
    tokens_per_sample: float | None = None,
    precision: str | None = None,
    path: str = "",
) -> RunView:
    """A run whose workload logged tracked_stats throughput `rates` = [(time_ms, samples/s)]."""
    events = [Event(0.0, "run_start", None, "INTERVAL_START")]
    params = {
        "perfwatch_flops_per_sample": flops_per_sample,
        "perfwatch_world_size": world_size,
        "global_batch_size": gbs,
        "gradient_accumulation_steps": accum,
        "perfwatch_tokens_per_sample": tokens_per_sample,
        "perfwatch_precision": precision,
    }
    events += [Event(0.0, k, v) for k, v in params.items() if v is not None]
    for i, (t, rate) in enumerate(rates):
        events.append(Event(t, "tracked_stats", {"throughput": rate}, metadata={"step": i + 1}))
    run = Run("r0", path)
    run.apply(events)
    return run.view()


PEAK_100T = PeakFlops("campaign", "bf16", 100e12, "campaign peak_flops")


# ---- SpeedMonitor window -------------------------------------------------------------
def test_speed_window_is_ratio_over_the_last_n_batches_and_divides_by_world_size() -> None:
    sw = SpeedWindow(window=4)
    for k in range(10):  # 32 samples every 0.5 s, 256 tokens per batch
        sw.observe(0.5 * k, 32, tokens=256)
    tp = sw.rates(world_size=2, flops_per_sample=1e9)
    # window of 4 observations = 3 intervals of 0.5 s, 3 x 32 samples
    assert tp.full
    assert tp.samples_per_s == pytest.approx(64.0)
    assert tp.batches_per_s == pytest.approx(2.0)
    assert tp.tokens_per_s == pytest.approx(512.0)
    assert tp.flops_per_s == pytest.approx(64e9)
    assert tp.device_samples_per_s == pytest.approx(32.0)
    assert tp.device_flops_per_s == pytest.approx(32e9)


def test_speed_window_under_gradient_accumulation_counts_samples_not_micro_batches() -> None:
    # micro-batches of 16 samples every 0.125 s; an optimizer step every 4 micro-batches (gbs 64)
    sw = SpeedWindow(window=9)
    for k in range(1, 17):
        sw.observe(0.125 * k, 16, steps=1 if k % 4 == 0 else 0)
    tp = sw.rates()
    assert tp.samples_per_s == pytest.approx(128.0)  # 8 x 16 samples in 1.0 s
    assert tp.batches_per_s == pytest.approx(2.0)  # optimizer steps, not the 8 micro-batches/s


def test_speed_window_needs_two_observations() -> None:
    sw = SpeedWindow(window=3)
    assert sw.rates().samples_per_s is None
    sw.observe(1.0, 10)
    assert sw.rates().samples_per_s is None


# ---- throughput from a RunView ---------------------------------------------------------
def test_window_rate_weights_by_interval_not_a_mean_of_rates() -> None:
    # 100 samples/s for 1 s, then 400 samples/s for 2 s: 900 samples in 3 s
    points = ((0.0, 50.0), (1000.0, 100.0), (3000.0, 400.0))
    rate, span = window_rate(points, window=2)
    assert rate == pytest.approx(300.0)  # a plain mean of the rates would say 250
    assert span == pytest.approx(3.0)
    rate1, _ = window_rate(points, window=1)
    assert rate1 == pytest.approx(400.0)


def test_rolling_throughput_of_a_multi_device_run() -> None:
    view = make_view(
        [(1000.0 * i, 2000.0) for i in range(1, 6)],
        flops_per_sample=1e11, world_size=4, gbs=256, tokens_per_sample=128,
    )
    tp = rolling_throughput(view, window=3)
    assert tp.samples_per_s == pytest.approx(2000.0)
    assert tp.batches_per_s == pytest.approx(2000.0 / 256)
    assert tp.tokens_per_s == pytest.approx(256_000.0)
    assert tp.flops_per_s == pytest.approx(2e14)
    assert tp.device_samples_per_s == pytest.approx(500.0)
    assert tp.device_flops_per_s == pytest.approx(5e13)
    assert tp.full


# ---- MFU ---------------------------------------------------------------------------------
def test_mfu_multi_device_hand_computed() -> None:
    # 2000 samples/s x 1e11 FLOPs = 2e14 FLOP/s over 4 devices x 100 TFLOP/s = 4e14 -> 50 %
    view = make_view([(1000.0 * i, 2000.0) for i in range(1, 4)], flops_per_sample=1e11, world_size=4)
    m = mfu(view, PEAK_100T)
    assert m.value == pytest.approx(0.5)
    assert m.devices == 4
    assert m.achieved_flops_per_s == pytest.approx(2e14)
    assert m.peak_flops_per_s == pytest.approx(4e14)
    assert m.flops_source == "log"
    assert m.text() == "50.0%"
    # the same run seen as one device would be at 200 %: the device count matters
    assert mfu(view, PEAK_100T, devices=1).value == pytest.approx(2.0)


def test_mfu_is_unchanged_by_gradient_accumulation() -> None:
    # 512 samples/s, gbs 256 = 2 ranks x micro-batch 32 x 4 accumulation steps
    # MFU = 512 x 1e10 / (2 x 10e12) = 0.256, with or without accumulation
    peak = PeakFlops("campaign", "fp32", 10e12, "campaign peak_flops")
    rates = [(500.0 * i, 512.0) for i in range(1, 6)]
    with_accum = make_view(rates, flops_per_sample=1e10, world_size=2, gbs=256, accum=4)
    without = make_view(rates, flops_per_sample=1e10, world_size=2, gbs=256)
    assert mfu(with_accum, peak).value == pytest.approx(0.256)
    assert mfu(without, peak).value == pytest.approx(0.256)
    tp = rolling_throughput(with_accum)
    assert tp.batches_per_s == pytest.approx(2.0)  # optimizer steps/s = 512 / 256
    assert tp.samples_per_s == pytest.approx(512.0)


def test_mfu_unknown_flops_says_why_and_campaign_override_fills_it() -> None:
    view = make_view([(1000.0, 100.0), (2000.0, 100.0)])
    m = mfu(view, PEAK_100T, devices=1)
    assert m.value is None
    assert m.text() == "—"
    assert "perfwatch_flops_per_sample" in (m.reason or "")
    m2 = mfu(view, PEAK_100T, devices=1, flops_per_sample=5e11)
    assert m2.value == pytest.approx(100.0 * 5e11 / 100e12)
    assert m2.flops_source == "campaign"


def test_campaign_flops_override_wins_over_the_log() -> None:
    view = make_view([(1000.0, 100.0), (2000.0, 100.0)], flops_per_sample=1e9)
    assert mfu(view, PEAK_100T, 1, flops_per_sample=2e9).achieved_flops_per_s == pytest.approx(2e11)


def test_mfu_unknown_peak_carries_the_identification_reason() -> None:
    view = make_view([(1000.0, 100.0), (2000.0, 100.0)], flops_per_sample=1e9)
    m = mfu(view, None, 1, peak_reason="'NVIDIA GH200 480GB' is not in the table")
    assert m.value is None
    assert "GH200" in (m.reason or "")


def test_mfu_without_throughput() -> None:
    m = mfu_from_rate(None, 1e9, PEAK_100T, 8)
    assert m.value is None and m.reason == "no throughput measured yet"


# ---- Mila statistics ------------------------------------------------------------------------
def test_warmup_stats_discard_the_first_observations() -> None:
    s = warmup_stats([10.0, 50.0, 100.0, 102.0, 98.0, 100.0], discard=2)
    assert (s.count, s.discarded) == (4, 2)
    assert s.avg == pytest.approx(100.0)
    assert (s.min, s.max, s.range) == (98.0, 102.0, 4.0)
    assert s.sd == pytest.approx(math.sqrt(8 / 3))
    assert s.unit == "items/sec"


def test_warmup_stats_when_everything_is_warm_up() -> None:
    s = warmup_stats([1.0, 2.0], discard=5)
    assert s.count == 0 and s.discarded == 2 and s.avg is None


def test_train_item_stats_and_summary_over_a_run() -> None:
    rates = [5.0, 7.0, 20.0, 22.0, 21.0]
    view = make_view([(1000.0 * (i + 1), r) for i, r in enumerate(rates)], flops_per_sample=1e12, world_size=1)
    items = train_item_stats(view, discard=2)
    assert items.avg == pytest.approx(21.0)
    assert items.range == pytest.approx(2.0)
    summary = throughput_summary(view, window=2, discard=2, peak=PEAK_100T)
    assert summary.now.samples_per_s == pytest.approx(21.5)
    assert summary.mfu is not None and summary.mfu.value == pytest.approx(21.5 * 1e12 / 100e12)


def test_report_columns_take_the_peak_from_the_runs_gpu_telemetry(tmp_path: Path) -> None:
    folder = tmp_path / "bert.r0"
    folder.mkdir()
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_total": 81559 * 1024**2, "power_limit_w": 350.0,
           "power_default_limit_w": 700.0, "util_sm": 90.0, "power_w": 600.0, "mem_used": 2 * 1024**3}
    lines = [{"time": 1.0 + i, "run": "bert.r0", "cpu_percent": 100.0, "rss": 2**20, "gpus": [gpu]} for i in range(3)]
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    view = make_view([(1000.0 * i, 1000.0) for i in range(1, 8)], flops_per_sample=9.895e11, world_size=1,
                     precision="amp_bf16", path=str(folder / "mllog.txt"))
    cols = report_extra(view, discard=2)
    # 1000 samples/s x 9.895e11 FLOPs = 9.895e14 = 100 % of an H100 SXM's 989.5 dense bf16 TFLOP/s
    assert cols["peak_device"] == "H100 SXM"  # the 350 W cap is not the board's default limit
    assert cols["mfu"] == pytest.approx(1.0)
    assert cols["train_item_avg"] == pytest.approx(1000.0)
    assert (cols["telemetry_samples"], cols["gpu_util_mean"], cols["power_max_w"]) == (3, 90.0, 600.0)
    assert cols["gpu_mem_max_gib"] == pytest.approx(2.0)


def test_report_columns_without_telemetry_say_why_mfu_is_missing(tmp_path: Path) -> None:
    view = make_view([(1000.0, 10.0), (2000.0, 10.0)], flops_per_sample=1e9, path=str(tmp_path / "mllog.txt"))
    cols = report_extra(view)
    assert cols["mfu"] is None and "no GPU" in cols["mfu_reason"]
    assert cols["telemetry_samples"] == 0 and cols["gpu_util_mean"] is None
