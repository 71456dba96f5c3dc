"""Throughput on MLPerf Training v5.1 logs that perfwatch's rules were not written from.

The excerpts are in tests/data/mlperf-excerpts/v5.1 (round, submitter, path and cut in its NOTICE.md).
Expected values come from the raw `:::MLLOG` lines read with `json` in this file: no perfwatch code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_throughput_real import records, view_of

from perfwatch.core.ingest.mllog import LineParser
from perfwatch.core.model.run import Run

DATA = Path(__file__).parent / "data" / "mlperf-excerpts" / "v5.1"
RETINANET = DATA / "University-of-Florida/results/hpg.dgxb200x8.n1/retinanet/result_0.txt"
FLUX = DATA / "University-of-Florida/results/hpg.dgxb200x8.n16/flux1/result_0.txt"
LLAMA8B_AMD = DATA / "AMD/results/MI350X_EPYC_9575F_pytorch/llama31_8b/result_0.txt"
LLAMA8B_NV = DATA / "NVIDIA/results/theia_ngpu512_ngc25.09_nemo/llama31_8b/result_0.txt"


def first(recs: list[dict], key: str, n: int = 1) -> dict:
    return [r for r in recs if r["key"] == key][n - 1]


def counter_warnings(view) -> list[str]:
    return [f.message for f in view.findings if f.rule == "throughput"]


def test_the_average_weighs_a_slow_first_epoch_by_its_time() -> None:
    """RetinaNet: epoch 0 at ~512 images/s for 2,283 s, epoch 1 at ~3,900 for ~300 s. The run's
    average is its images over its training time (~900/s), not the mean of the two rates (~2,200)."""
    recs = records(RETINANET)
    start = first(recs, "run_start")["time_ms"]
    per_epoch = first(recs, "train_samples")["value"] * first(recs, "global_batch_size")["value"]
    assert per_epoch == 4572 * 256  # train_samples counts batches for RetinaNet
    es1, es2 = first(recs, "eval_start", 1), first(recs, "eval_start", 2)
    stop1 = first(recs, "eval_stop", 1)
    assert es1["metadata"]["epoch_num"] == 1 and es2["metadata"]["epoch_num"] == 2
    t1 = (es1["time_ms"] - start) / 1000  # epoch 0: run_start to the eval after it
    t2 = (es2["time_ms"] - stop1["time_ms"]) / 1000  # epoch 1: the end of that eval to the next
    assert t1 > 2000 and t2 < 400
    expected = 2 * per_epoch / (t1 + t2)
    mean_of_rates = (per_epoch / t1 + per_epoch / t2) / 2
    assert mean_of_rates > 2 * expected
    v = view_of(RETINANET)
    assert v.count_unit == "samples" and v.samples == 2 * per_epoch
    assert [rate for _, rate in v.throughput] == [per_epoch / t1, per_epoch / t2]
    assert v.throughput_avg == pytest.approx(expected, rel=1e-12)


def test_report_and_every_front_end_show_the_time_weighted_average() -> None:
    import subprocess
    import sys

    from perfwatch.core.engine import run_figures

    recs = records(RETINANET)
    start = first(recs, "run_start")["time_ms"]
    per_epoch = 4572 * 256
    t = (first(recs, "eval_start", 1)["time_ms"] - start + first(recs, "eval_start", 2)["time_ms"]
         - first(recs, "eval_stop", 1)["time_ms"]) / 1000
    rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(RETINANET), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    (row,) = json.loads(rep.stdout)["runs"]
    assert row["throughput_mean"] == pytest.approx(2 * per_epoch / t, rel=1e-12)
    assert run_figures(view_of(RETINANET)).tp_avg == row["throughput_mean"]


def test_flux_block_summaries_are_not_progress_and_batching_does_not_matter() -> None:
    """flux1 (NVIDIA's v5.1 code): each block ends with a tracked_stats whose samples_count is the
    block's size (262,656) between tracked_stats that count every sample trained."""
    recs = records(FLUX)
    es2 = first(recs, "eval_start", 2)
    block = first(recs, "block_start")["metadata"]["samples_count"]
    before = [r for r in recs if r["key"] == "tracked_stats" and r["time_ms"] <= es2["time_ms"]
              and "samples_count" in r["metadata"]]
    summary = before[-1]
    assert summary["metadata"]["samples_count"] == block < es2["metadata"]["samples_count"]
    last_trained = before[-2]  # the last that counts samples trained
    assert block < last_trained["metadata"]["samples_count"] < es2["metadata"]["samples_count"]
    expected = (es2["metadata"]["samples_count"] - last_trained["metadata"]["samples_count"]) / (
        (es2["time_ms"] - last_trained["time_ms"]) / 1000)
    v = view_of(FLUX)
    assert v.samples == es2["metadata"]["samples_count"]
    assert (es2["time_ms"], expected) in v.throughput
    assert counter_warnings(v) == []  # no "set aside", no "not read as progress"
    # live, lines come a few at a time: the same points as one read of the whole file
    run = Run("live", parser=LineParser())
    for line in FLUX.read_bytes().splitlines():
        run.feed_lines([line])
    assert run.view().throughput == v.throughput and run.view().throughput_avg == v.throughput_avg


def test_eval_steps_do_not_count_as_training() -> None:
    """llama31_8b (NVIDIA's v5.1 code) logs a tracked_stats per eval step whose samples_count counts
    eval samples (64, 128, ...); the training tracked_stats after the eval still count."""
    recs = records(LLAMA8B_NV)
    stop1 = first(recs, "eval_stop", 1)
    in_eval = [r for r in recs if r["key"] == "tracked_stats" and "samples_count" in r["metadata"]
               and first(recs, "eval_start", 1)["time_ms"] <= r["time_ms"] <= stop1["time_ms"]]
    assert in_eval and max(r["metadata"]["samples_count"] for r in in_eval) < stop1["metadata"]["samples_count"]
    after = next(r for r in recs if r["key"] == "tracked_stats" and r["time_ms"] > stop1["time_ms"]
                 and "samples_count" in r["metadata"])
    expected = (after["metadata"]["samples_count"] - stop1["metadata"]["samples_count"]) / (
        (after["time_ms"] - stop1["time_ms"]) / 1000)
    v = view_of(LLAMA8B_NV)
    assert v.count_unit == "samples"  # llama3.1 counts sequences (its RCPs are in samples)
    assert (after["time_ms"], expected) in v.throughput
    assert v.samples == first(recs, "eval_start", 2)["metadata"]["samples_count"]
    assert counter_warnings(v) == []


def test_a_counter_one_batch_behind_is_no_finding_and_logged_rates_weigh_by_time() -> None:
    """llama31_8b (AMD's v5.1 code): eval_accuracy's samples_count is one global batch below its
    eval_start's; the workload logs its own throughput once per block."""
    recs = records(LLAMA8B_AMD)
    gbs = first(recs, "global_batch_size")["value"]
    acc, es = first(recs, "eval_accuracy"), first(recs, "eval_start")
    assert acc["metadata"]["samples_count"] == es["metadata"]["samples_count"] - gbs
    start = first(recs, "run_start")["time_ms"]
    tracked = [r for r in recs if r["key"] == "tracked_stats" and "throughput" in r["value"]]
    times = [start] + [r["time_ms"] for r in tracked]
    gaps = [(b - a) / 1000 for a, b in zip(times[:-1], times[1:], strict=True)]
    expected = sum(r["value"]["throughput"] * g for r, g in zip(tracked, gaps, strict=True)) / sum(gaps)
    v = view_of(LLAMA8B_AMD)
    assert v.throughput_source == "tracked_stats"
    assert v.throughput_avg == pytest.approx(expected, rel=1e-12)
    assert v.samples == first(recs, "eval_stop", 2)["metadata"]["samples_count"]
    assert counter_warnings(v) == []
