"""The data path: watcher bursts coalesce into one wake-up; nothing is lost on the way."""

from __future__ import annotations

import threading

from ui_helpers import attach_app, mllog, screen_text, table, until

from perfwatch.core.ingest.tail import LineBatch
from perfwatch.ui.messages import Inbox, LinesReady, TelemetryReady


def test_inbox_wakes_once_per_burst_and_keeps_everything():
    inbox: Inbox[int] = Inbox()
    wakes = [inbox.put([i]) for i in range(100)]
    assert wakes.count(True) == 1 and wakes[0] is True
    assert inbox.drain() == list(range(100))
    assert inbox.put([]) is False
    assert inbox.put([1]) is True


def test_inbox_from_many_threads():
    inbox: Inbox[int] = Inbox()
    threads = [threading.Thread(target=lambda k=k: [inbox.put([k * 1000 + i]) for i in range(500)]) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(inbox.drain()) == sorted(k * 1000 + i for k in range(4) for i in range(500))


def test_newer_messages_replace_queued_ones():
    assert LinesReady().can_replace(LinesReady())
    assert TelemetryReady("new").can_replace(TelemetryReady("old"))
    assert not TelemetryReady("x").can_replace(LinesReady())


async def test_a_burst_of_batches_from_another_thread_all_arrive(tmp_path):
    (tmp_path / "result_0.txt").write_text(mllog("run_start", None, 0))
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["result_0"], "the run")
        path = str(tmp_path / "result_0.txt")

        def burst() -> None:  # what the watcher thread does, 500 times in a row
            for k in range(1, 501):
                line = mllog("eval_accuracy", k / 1000, 1000 * k, epoch_num=k).rstrip("\n").encode()
                app._sink([LineBatch(path, [line], False)])

        t = threading.Thread(target=burst)
        t.start()
        t.join()
        await until(pilot, lambda: "ep 500" in screen_text(app), "the last of 500 batches")
        assert app.book.get("result_0").view().key_counts["eval_accuracy"] == 500


def test_short_durations_keep_tenths_of_a_second() -> None:
    from perfwatch.ui.format import fmt_duration

    assert fmt_duration(840) == "0.8s"
    assert fmt_duration(9_949) == "9.9s"
    assert fmt_duration(65_000) == "1:05"
    assert fmt_duration(3_725_000) == "1:02:05"
    assert fmt_duration(None) == "–"


def test_cpu_run_mfu_uses_the_measured_host_peak(tmp_path, monkeypatch) -> None:
    """A CPU run's MFU cell is computed against the matmul peak measured earlier for its thread count."""
    from perfwatch.core.ingest.mllog import Event
    from perfwatch.core.measure import peaks as flops
    from perfwatch.core.model.run import Run
    from perfwatch.ui import format as fmt

    monkeypatch.setattr(flops, "cache_dir", lambda: tmp_path)
    fmt._cpu_peak.cache_clear()
    run = Run("cpu.r0")
    run.apply([
        Event(0.0, "perfwatch_device", "cpu"), Event(0.0, "perfwatch_threads", 2),
        Event(0.0, "perfwatch_flops_per_sample", 1e9), Event(0.0, "run_start"),
        *[Event(1000.0 * i, "tracked_stats", {"throughput": 100.0}, metadata={"step": i}) for i in range(1, 6)],
    ])
    assert fmt.mfu_for(run.view(), None, None) is None  # never measured here: unknown, not guessed
    flops.cpu_peak("fp32", threads=2, measure=lambda dt, th: 2e11)
    fmt._cpu_peak.cache_clear()
    value = fmt.mfu_for(run.view(), None, None)
    assert value is not None and abs(value - 0.5) < 1e-9  # 100 samples/s x 1 GFLOP / 200 GFLOP/s
    fmt._cpu_peak.cache_clear()
