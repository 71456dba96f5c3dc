"""The TUI's data path: engine updates coalesce into one message; nothing is lost on the way."""

from __future__ import annotations

import threading

from ui_helpers import attach_app, mllog, screen_text, table, until

from perfwatch.core.ingest.tail import LineBatch
from perfwatch.ui.messages import EngineUpdated


def test_newer_update_messages_replace_queued_ones():
    assert EngineUpdated().can_replace(EngineUpdated())


async def test_a_burst_of_batches_from_another_thread_all_arrive(tmp_path):
    (tmp_path / "result_0.txt").write_text(mllog("run_start", None, 0))
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["result_0"], "the run")
        path = str(tmp_path / "result_0.txt")

        def burst() -> None:  # what the watcher thread does, 500 times in a row
            for k in range(1, 501):
                line = mllog("eval_accuracy", k / 1000, 1000 * k, epoch_num=k).rstrip("\n").encode()
                app.engine._sink([LineBatch(path, [line], False)])

        t = threading.Thread(target=burst)
        t.start()
        t.join()
        await until(pilot, lambda: "ep 500" in screen_text(app), "the last of 500 batches")
        assert app.main.snapshot.views["result_0"].key_counts["eval_accuracy"] == 500


def test_short_durations_keep_tenths_of_a_second() -> None:
    from perfwatch.ui.format import fmt_duration

    assert fmt_duration(840) == "0.8s"
    assert fmt_duration(9_949) == "9.9s"
    assert fmt_duration(65_000) == "1:05"
    assert fmt_duration(3_725_000) == "1:02:05"
    assert fmt_duration(None) == "–"


def test_cpu_run_mfu_uses_the_measured_host_peak(tmp_path, monkeypatch) -> None:
    """A CPU run's MFU cell is computed against the matmul peak measured earlier for its thread count."""
    from perfwatch.core.engine import run_figures
    from perfwatch.core.ingest.mllog import Event
    from perfwatch.core.measure import host_peak as flops
    from perfwatch.core.measure.mfu import forget_cached_cpu_peaks
    from perfwatch.core.model.run import Run

    monkeypatch.setattr(flops, "cache_dir", lambda: tmp_path)
    forget_cached_cpu_peaks()
    run = Run("cpu.r0")
    run.apply([
        Event(0.0, "perfwatch_device", "cpu"), Event(0.0, "perfwatch_threads", 2),
        Event(0.0, "perfwatch_flops_per_sample", 1e9), Event(0.0, "run_start"),
        *[Event(1000.0 * i, "tracked_stats", {"throughput": 100.0}, metadata={"step": i}) for i in range(1, 6)],
    ])
    assert run_figures(run.view()).mfu.value is None  # never measured here: unknown, not guessed
    flops.cpu_peak("fp32", threads=2, measure_with=lambda dt, th: 2e11)
    forget_cached_cpu_peaks()
    value = run_figures(run.view()).mfu.value
    assert value is not None and abs(value - 0.5) < 1e-9  # 100 samples/s x 1 GFLOP / 200 GFLOP/s
    forget_cached_cpu_peaks()
