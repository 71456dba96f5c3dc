"""Throughput on real MLPerf logs, in the unit the benchmark counts, checked against the raw records.

Every expected value is computed here from the log's own lines with `json` (times and counters read by
hand), never with perfwatch's parser or model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwatch.core.measure.throughput import rolling_throughput
from perfwatch.core.model.run import Run

DATA = Path(__file__).parent / "data" / "mlperf-excerpts" / "v4.0"
GPT3 = DATA / "Google/results/cloud-tpu-v5p-1024-maxtext/gpt3/result_0.txt"
LLAMA = DATA / "Intel-HabanaLabs/results/HLS-Gaudi2-PT/llama2_70b_lora/result_0.txt"
SD = DATA / "Quanta_Cloud_Technology/results/D74H-7U/stable_diffusion/result_0.txt"


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        i = line.find(":::MLLOG ")
        if i >= 0:
            out.append(json.loads(line[i + len(":::MLLOG "):]))
    return out


def view_of(path: Path):
    run = Run(path.name)
    run.feed_block(path.read_bytes(), last=True)
    return run.view()


def test_gpt3_counts_tokens_per_block_not_samples() -> None:
    recs = records(GPT3)
    evals = [r for r in recs if r["key"] == "eval_accuracy"]
    block = next(r["metadata"]["epoch_count"] for r in recs if r["key"] == "block_start")
    assert block == 50_331_648  # tokens per eval block (24,576 sequences of 2,048)
    # the last interval: from one eval to the next, one block of tokens
    expected = block / ((evals[-1]["time_ms"] - evals[-2]["time_ms"]) / 1000)
    assert 170_000 < expected < 180_000  # ~176k tokens/s, as 50,331,648 tokens per ~286 s says
    v = view_of(GPT3)
    assert v.count_unit == "tokens"
    assert v.samples == evals[-1]["metadata"]["epoch_num"]
    assert v.throughput[-1][1] == expected
    tp = rolling_throughput(v, window=1)
    assert tp.unit == "tokens" and tp.rate == tp.tokens_per_s == expected
    seq = next(r["value"] for r in recs if r["key"] == "max_sequence_length")
    assert tp.samples_per_s == expected / seq  # sequences/s: ~86, never 50.3G
    # no interval of the run is the block_stop -> eval_accuracy millisecond (the 50.3G samples/s)
    assert max(rate for _, rate in v.throughput) < 200_000
    # MFU counts FLOPs per sample (sequence): from sequences/s, never from tokens/s
    from perfwatch.core.measure.mfu import mfu
    from perfwatch.core.measure.peaks import PeakFlops

    flops_per_seq = 6 * 175e9 * seq  # 6 N per token
    m = mfu(v, PeakFlops("test", "bf16", 1e18, "test"), 1, flops_per_sample=flops_per_seq, window=1)
    assert m.achieved_flops_per_s == expected / seq * flops_per_seq


def test_llama2_70b_lora_samples_from_consistent_counters() -> None:
    recs = records(LLAMA)
    stop = next(r for r in recs if r["key"] == "run_stop")
    start = next(r for r in recs if r["key"] == "run_start")
    # the sample counters (train_loss, block_stop, eval_*, run_stop) grow; block_start's is a step number
    progress = [(r["time_ms"], r["metadata"]["samples_count"]) for r in recs
                if r["key"] in ("train_loss", "eval_accuracy") and "samples_count" in r["metadata"]]
    first_t, first_n = progress[0]
    assert first_n == 192
    v = view_of(LLAMA)
    assert v.count_unit == "samples"
    assert v.samples == stop["metadata"]["samples_count"] == 3456  # not block_start's 432
    # the first rate: 192 samples since run_start
    assert v.throughput[0] == (first_t, first_n / ((first_t - start["time_ms"]) / 1000))
    overall = stop["metadata"]["samples_count"] / ((stop["time_ms"] - start["time_ms"]) / 1000)
    assert 0.6 < overall < 0.7
    # every derived rate is of the same order as the whole run's (never 4.6/s from step numbers)
    assert all(overall / 2 < rate < overall * 2 for _, rate in v.throughput)


def test_stable_diffusion_rate_comes_from_its_blocks() -> None:
    recs = records(SD)
    stops = [r for r in recs if r["key"] == "block_stop"]
    starts = [r for r in recs if r["key"] == "block_start"]
    last_stop = stops[-1]
    last_start = next(r for r in reversed(starts) if r["time_ms"] <= last_stop["time_ms"])
    expected = (last_stop["metadata"]["samples_count"] - last_start["metadata"]["samples_count"]) / (
        (last_stop["time_ms"] - last_start["time_ms"]) / 1000)
    v = view_of(SD)
    assert v.samples == last_stop["metadata"]["samples_count"]
    assert v.throughput[-1][1] == expected
    assert 900 < expected < 1100


def test_a_rate_orders_of_magnitude_off_is_set_aside_and_said() -> None:
    """Counters that jump (a record naming a count it did not train in that time) are not shown as fact."""
    from perfwatch.core.ingest.mllog import LineParser

    lines = [b':::MLLOG {"time_ms": 0, "key": "run_start", "value": null, "metadata": {}}']
    t, n = 0, 0
    for _ in range(5):  # 100 samples/s
        t, n = t + 1000, n + 100
        lines.append(b':::MLLOG {"time_ms": %d, "key": "train_loss", "value": 1.0, "metadata": {"samples_count": %d}}'
                     % (t, n))
    # 1,000,000 samples in 10 ms: 1e8 samples/s
    lines.append(b':::MLLOG {"time_ms": %d, "key": "train_loss", "value": 1.0, "metadata": {"samples_count": %d}}'
                 % (t + 10, n + 1_000_000))
    run = Run("jump", parser=LineParser())
    run.feed_lines(lines)
    v = run.view()
    assert [rate for _, rate in v.throughput] == [100.0] * 5
    assert any(f.rule == "throughput" and "set aside" in f.message for f in v.findings)


def test_gpt3_tokens_per_second_are_one_number_labelled_tokens_in_every_front_end() -> None:
    """report, headless and the TUI's row show the same rate, each saying it counts tokens."""
    import subprocess
    import sys

    from perfwatch.core.engine import run_figures
    from perfwatch.ui.format import fmt_per_s, fmt_rate

    rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(GPT3), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    (row,) = json.loads(rep.stdout)["runs"]
    fig = run_figures(view_of(GPT3))
    assert row["rate_unit"] == fig.unit == "tokens"
    assert fig.tp_now == row["rate_window"] and fig.tp_avg == row["throughput_mean"]
    assert row["samples_per_s_window"] * 2048 == pytest.approx(row["rate_window"])  # a GPT-3 sample: 2,048 tokens
    assert fmt_per_s(fig.tp_now, fig.unit) == f"{fmt_rate(row['rate_window'])} tok"
    once = subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(GPT3), "--once"],
                          capture_output=True, text=True, timeout=120).stdout
    assert f"now {row['rate_window']:.2f} tokens/s" in once


NVIDIA_LLAMA = (Path(__file__).parent / "data" / "mlperf-logs" / "v4.0" / "NVIDIA" / "results" /
                "h200_ngc24.04_nemo" / "llama2_70b_lora" / "result_0.txt")


@pytest.mark.parametrize("batches", ["one block", "line by line"])
def test_a_logged_throughput_orders_of_magnitude_off_is_set_aside_and_said(batches: str) -> None:
    """NVIDIA's v4.0 llama2_70b_lora log (its 5 tracked_stats throughputs, ~2.45 samples/s), once as it is and
    once with its fourth throughput multiplied by 1000: the doctored value is not shown as fact, and a
    finding says it was set aside, as for a counter rate; the real values are all kept."""
    from perfwatch.core.ingest.mllog import LineParser

    lines = NVIDIA_LLAMA.read_bytes().splitlines(keepends=True)
    tracked = [i for i, line in enumerate(lines) if b'"key": "tracked_stats"' in line]
    logged = [json.loads(lines[i].split(b":::MLLOG ", 1)[1])["value"]["throughput"] for i in tracked]
    assert len(logged) == 5
    doctored = list(lines)
    rec = json.loads(lines[tracked[3]].split(b":::MLLOG ", 1)[1])
    rec["value"]["throughput"] *= 1000
    doctored[tracked[3]] = b":::MLLOG " + json.dumps(rec).encode() + b"\n"

    def view(data: list[bytes]):
        run = Run("llama", parser=LineParser())
        if batches == "one block":
            run.feed_block(b"".join(data), last=True)
        else:
            for line in data:
                run.feed_lines([line.rstrip(b"\n")])
        return run.view()

    real = view(lines)
    assert [rate for _, rate in real.throughput] == logged
    assert not any("set aside" in f.message for f in real.findings)
    v = view(doctored)
    assert [rate for _, rate in v.throughput] == logged[:3] + logged[4:]
    said = [f.message for f in v.findings if f.rule == "throughput" and "set aside as implausible" in f.message]
    assert len(said) == 1 and "tracked_stats" in said[0] and f"{rec['value']['throughput']:.0f}" in said[0], said
