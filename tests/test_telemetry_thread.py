"""TelemetryThread: per-run telemetry.jsonl, sink on the sampling thread, bounded history, clean stop."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from perfwatch.core.telemetry.fake import FakeGpu, FakeSampler
from perfwatch.core.telemetry.host import HostSampler
from perfwatch.core.telemetry.sampling import (
    MultiSampler,
    RunResources,
    Snapshot,
    TelemetryThread,
    read_telemetry,
    resources_from_procs,
    summarize_telemetry,
)

GIB = 1024**3
ME = os.getpid()


def two_gpus(pid_on_gpu0: int | None = None) -> FakeSampler:
    procs: list[tuple[int, int | None]] = [(pid_on_gpu0, 3 * GIB)] if pid_on_gpu0 else []
    return FakeSampler([
        FakeGpu(bus_id="00000000:18:00.0", compute_procs=procs, util_gpu=90, power_mw=500_000),
        FakeGpu(bus_id="00000000:2A:00.0", util_gpu=40, power_mw=200_000),
    ])


def wait_for(cond: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_pinned_run_records_only_its_gpus_and_its_process_tree(tmp_path: Path) -> None:
    runs = {"mlp.bs32.r0": RunResources((ME,), (1,), tmp_path / "mlp.bs32.r0")}
    tt = TelemetryThread(MultiSampler(HostSampler(), two_gpus()), runs=lambda: runs)
    tt.tick()
    tt.tick()
    records = read_telemetry(tmp_path / "mlp.bs32.r0")
    assert len(records) == 2
    rec = records[-1]
    assert rec["run"] == "mlp.bs32.r0"
    assert [g["index"] for g in rec["gpus"]] == [1]
    assert rec["gpus"][0]["util_sm"] == 40.0 and rec["gpus"][0]["power_w"] == 200.0
    assert ME in rec["pids"]
    assert rec["nprocs"] >= 1 and rec["rss"] > 0 and rec["cpu_percent"] >= 0.0
    assert rec["host_mem_used"] > 0


def test_an_unpinned_run_gets_the_gpus_its_processes_use(tmp_path: Path) -> None:
    runs = {"r": RunResources((ME,), None, tmp_path / "r")}
    tt = TelemetryThread(MultiSampler(HostSampler(), two_gpus(pid_on_gpu0=ME)), runs=lambda: runs)
    tt.tick()
    (rec,) = read_telemetry(tmp_path / "r" / "telemetry.jsonl")
    assert [g["index"] for g in rec["gpus"]] == [0]
    assert rec["gpus"][0]["run_mem"] == 3 * GIB


def test_without_gpus_the_record_says_why(tmp_path: Path) -> None:
    runs = {"r": RunResources((ME,), (0,), tmp_path / "r")}
    sampler = MultiSampler(HostSampler(), FakeSampler(init_error="LibraryNotFound"))
    TelemetryThread(sampler, runs=lambda: runs).tick()
    (rec,) = read_telemetry(tmp_path / "r")
    assert rec["gpus"] == []
    assert rec["gpu_unavailable"] == "NVML library not found: no NVIDIA driver on this machine"
    assert rec["rss"] > 0


def test_a_failing_field_is_recorded_as_na(tmp_path: Path) -> None:
    fake = two_gpus()
    fake.fail("temp_c", gpu=1)
    runs = {"r": RunResources((ME,), (1,), tmp_path / "r")}
    TelemetryThread(fake, runs=lambda: runs).tick()
    (rec,) = read_telemetry(tmp_path / "r")
    gpu = rec["gpus"][0]
    assert "temp_c" not in gpu and gpu["na"] == {"temp_c": "not supported by this GPU or driver"}


def test_a_finished_run_stops_growing_its_file(tmp_path: Path) -> None:
    runs = {"gone": RunResources((2**22 + 4321,), (0,), tmp_path / "gone")}
    TelemetryThread(MultiSampler(HostSampler(), two_gpus()), runs=lambda: runs).tick()
    assert not (tmp_path / "gone" / "telemetry.jsonl").exists()


def test_background_thread_calls_the_sink_on_its_own_thread_and_stops_cleanly(tmp_path: Path) -> None:
    seen: list[tuple[int, Snapshot]] = []
    runs = {"r": RunResources((ME,), (0,), tmp_path / "r")}
    tt = TelemetryThread(
        MultiSampler(HostSampler(), two_gpus()),
        interval=0.02,
        sink=lambda s: seen.append((threading.get_ident(), s)),
        runs=lambda: runs,
        history=3,
    )
    before = set(threading.enumerate())  # a thread another test left behind is not this one's
    tt.start()
    try:
        wait_for(lambda: len(seen) >= 5)
    finally:
        tt.stop()
    assert not tt.running
    assert {ident for ident, _ in seen} != {threading.get_ident()}
    assert len(tt.history) == 3  # bounded
    assert tt.latest is tt.history[-1]
    n = len(read_telemetry(tmp_path / "r"))
    assert n >= 5
    assert not any(t.name == "perfwatch-telemetry" for t in set(threading.enumerate()) - before)


def test_a_broken_sink_or_runs_callback_does_not_stop_sampling() -> None:
    def bad_sink(_: Snapshot) -> None:
        raise RuntimeError("widget gone")

    def bad_runs() -> dict[str, RunResources]:
        raise KeyError("scheduler busy")

    tt = TelemetryThread(two_gpus(), interval=0.02, sink=bad_sink, runs=bad_runs)
    tt.start()
    try:
        wait_for(lambda: tt.ticks >= 3)
    finally:
        tt.stop()
    assert tt.errors >= 6
    assert "sink failed" in (tt.last_error or "") or "runs() failed" in (tt.last_error or "")


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TelemetryThread(two_gpus(), interval=0)


def test_reading_tolerates_a_cut_last_line_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.jsonl"
    path.write_bytes(
        b'{"time": 1.0, "run": "r", "gpus": []}\n'
        b"\xff\xfe not json\n"
        b'{"time": 2.0, "run": "r", "gpus": []}\n'
        b'{"time": 3.0, "run": "r", "gpu'
    )
    assert [r["time"] for r in read_telemetry(path)] == [1.0, 2.0]
    assert read_telemetry(tmp_path / "missing.jsonl") == []


def test_summary_hand_computed() -> None:
    records = [
        {"time": 10.0, "cpu_percent": 100.0, "rss": 1000, "gpus": [
            {"index": 0, "uuid": "A", "util_sm": 80.0, "mem_used": 5, "power_w": 300.0},
            {"index": 1, "uuid": "B", "util_sm": 60.0, "mem_used": 7, "power_w": 200.0}]},
        {"time": 12.0, "cpu_percent": 300.0, "rss": 3000, "gpus": [
            {"index": 0, "uuid": "A", "util_sm": 100.0, "mem_used": 9, "power_w": 400.0},
            {"index": 1, "uuid": "B", "util_sm": 40.0, "mem_used": 6, "power_w": 100.0}]},
    ]
    s = summarize_telemetry(records)
    assert (s.samples, s.gpus, s.duration_s) == (2, 2, 2.0)
    assert s.gpu_util_mean == pytest.approx(70.0) and s.gpu_util_max == 100.0
    assert s.gpu_mem_max == 9
    assert s.power_mean_w == pytest.approx(500.0) and s.power_max_w == 500.0  # summed over the run's GPUs
    assert (s.cpu_mean, s.cpu_max, s.rss_max) == (200.0, 300.0, 3000)
    assert s.gpu_unavailable is None
    none = summarize_telemetry([{"time": 1.0, "gpus": [], "gpu_unavailable": "no driver"}])
    assert none.gpu_util_mean is None and none.gpu_unavailable == "no driver"


def test_scheduler_procs_adapter(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from perfwatch.core.control.states import RunState

    procs = {
        "gpu.r0": SimpleNamespace(pid=ME, devices=(2, 3), folder=tmp_path / "gpu.r0", state=RunState.RUNNING),
        "cpu.r0": SimpleNamespace(pid=ME, devices=(), folder=tmp_path / "cpu.r0", state=RunState.PAUSED),
        "queued": SimpleNamespace(pid=None, devices=(), folder=tmp_path / "queued", state=RunState.QUEUED),
        "done": SimpleNamespace(pid=ME, devices=(0,), folder=tmp_path / "done", state=RunState.SUCCEEDED),
    }
    res = resources_from_procs(procs)
    assert set(res) == {"gpu.r0", "cpu.r0"}
    assert res["gpu.r0"].gpu_indices == (2, 3) and res["gpu.r0"].pids == (ME,)
    assert res["cpu.r0"].gpu_indices == ()  # a CPU run gets no GPU rows, even if some process uses one
