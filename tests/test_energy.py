"""Per-run GPU truth and energy: the run's own processes and memory on a shared GPU, clock events per run,
every GPU of a multi-GPU run, and energy-to-train from the counter or from integrated power.

GPUs come from FakeSampler (the production NvmlSampler over a scripted NVML: CI has no NVIDIA GPU);
processes are real. Energy expectations are computed by hand in each test, from the numbers written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfwatch.cli import main
from perfwatch.core import keys
from perfwatch.core.measure.energy import COUNTER, POWER, gpu_energy, run_energy
from perfwatch.core.telemetry.fake import FakeGpu, FakeSampler
from perfwatch.core.telemetry.host import HostSampler
from perfwatch.core.telemetry.sampling import (
    MultiSampler,
    RunResources,
    TelemetryThread,
    read_telemetry,
    summarize_telemetry,
)

GIB = 1024**3
T0 = 1_700_000_000.0  # epoch seconds of the first telemetry sample


def _mllog(path: Path, start: float, stop: float, samples: int, status: str = "success") -> None:
    def rec(key: str, value: object, t: float, **meta: object) -> str:
        return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": round(t * 1000), "event_type": "POINT_IN_TIME",
                                         "key": key, "value": value, "metadata": meta})
    pre = {"submission_benchmark": "mlp_regression", "submission_org": "perfwatch", "submission_division": "open",
           "submission_status": "onprem", "submission_platform": "1xfake", "seed": 0, "global_batch_size": 100,
           "train_samples": 1000, "eval_samples": 100, "lowest_numerical_precision_in_linear": "fp32",
           "lowest_numerical_precision_in_attn": "fp32", "lowest_numerical_precision_in_comm": "fp32",
           "tensor_parallelism": 1, "pipeline_parallelism": 1, "context_parallelism": 1, "expert_parallelism": 1,
           "micro_batch_size": 100, "gradient_accumulation_steps": 1, "config_filename": "none"}
    lines = [
        rec("cache_clear", True, start - 3), rec("init_start", None, start - 2),
        *(rec(k, v, start - 2) for k, v in pre.items()), rec(keys.TARGET, 0.9, start - 2, higher_is_better=True),
        rec("init_stop", None, start - 1),
        rec("run_start", None, start), rec("block_start", None, start, first_epoch_num=1, epoch_count=1,
                                           samples_count=0),
        rec("block_stop", None, stop, first_epoch_num=1, samples_count=samples),
        rec("eval_start", None, stop, epoch_num=1, samples_count=samples),
        rec("eval_accuracy", 0.95, stop, epoch_num=1, samples_count=samples),
        rec("eval_stop", None, stop, epoch_num=1, samples_count=samples),
        rec("run_stop", None, stop, status=status, epoch_num=1, samples_count=samples),
    ]
    path.write_text("\n".join(lines) + "\n")


def _telemetry(folder: Path, gpus_at: list[list[dict]]) -> None:
    with open(folder / "telemetry.jsonl", "w") as f:
        for i, gpus in enumerate(gpus_at):
            f.write(json.dumps({"time": T0 + i, "run": folder.name, "gpus": gpus}) + "\n")


def _report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["report", str(tmp_path / "logdir"), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["runs"][0]


def test_energy_to_train_integrates_power_when_there_is_no_counter(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "logdir" / "mlp.r0"
    run.mkdir(parents=True)
    # GPU 0 draws 100 + 10 t W, GPU 1 a steady 50 W, sampled at t = 0..10 s; run_start 2.5 s, run_stop 7.5 s
    _telemetry(run, [[{"index": 0, "uuid": "GPU-a", "power_w": 100.0 + 10 * i},
                      {"index": 1, "uuid": "GPU-b", "power_w": 50.0}] for i in range(11)])
    _mllog(run / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=10_000)
    row = _report(tmp_path, capsys)
    # by hand: ∫_{2.5}^{7.5} (100 + 10 t) dt = 100·5 + 5·(7.5² − 2.5²) = 500 + 250 = 750 J; plus 50 W · 5 s = 250 J
    assert row["energy_to_train_kj"] == pytest.approx(1.0)
    assert row["samples_per_j"] == pytest.approx(10_000 / 1000.0)
    assert row["energy_method"] == POWER and "no energy counter" in POWER
    # the whole recording, 0..10 s: 100·10 + 5·100 = 1500 J and 50·10 = 500 J
    assert row["energy_run_kj"] == pytest.approx(2.0)
    assert row["gpus"] == [0, 1]
    assert main(["report", str(tmp_path / "logdir")]) == 0
    table = capsys.readouterr().out
    assert "kJ" in table.splitlines()[1] and "1.00" in table
    assert "kJ of mlp.r0: GPU energy from run_start to run_stop, ∫power, estimated" in table  # and how


def test_energy_to_train_uses_the_counter_between_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "logdir" / "mlp.r0"
    run.mkdir(parents=True)
    # counter i² J at t = i (in mJ); the power readings (a flat 999 W) must be ignored when a counter is there
    _telemetry(run, [[{"index": 0, "power_w": 999.0, "energy_mj": i * i * 1000}] for i in range(11)])
    _mllog(run / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=500)
    row = _report(tmp_path, capsys)
    # by hand: at 2.5 s the counter is between 4 J and 9 J -> 6.5 J; at 7.5 s between 49 J and 64 J -> 56.5 J
    assert row["energy_to_train_kj"] == pytest.approx(0.050)
    assert row["samples_per_j"] == pytest.approx(500 / 50.0)
    assert row["energy_method"] == COUNTER
    assert main(["report", str(tmp_path / "logdir")]) == 0
    assert "kJ of mlp.r0: GPU energy from run_start to run_stop, NVML counter" in capsys.readouterr().out


def test_a_counter_that_goes_backwards_falls_back_to_power() -> None:
    records = [{"time": T0 + i, "gpus": [{"index": 0, "power_w": 200.0, "energy_mj": [5000, 9000, 100, 900][i]}]}
               for i in range(4)]
    e = gpu_energy(records)
    assert e is not None and e.method == POWER and e.joules == pytest.approx(600.0)  # 200 W x 3 s
    assert gpu_energy([{"time": T0, "gpus": [{"index": 0, "power_w": 5.0}]}]) is None  # one reading: no energy


def test_compare_shows_energy_to_train_where_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side, watts in (("a", 400.0), ("b", 100.0)):
        for r in range(3):
            run = tmp_path / side / f"mlp.r{r}"
            run.mkdir(parents=True)
            _telemetry(run, [[{"index": 0, "power_w": watts}] for _ in range(11)])
            _mllog(run / "mllog.txt", T0 + 1, T0 + 6 + r, samples=1000)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    # medians: 5, 6, 7 s -> 6 s; A 400 W x 6 s = 2.4 kJ, B 100 W x 6 s = 0.6 kJ
    assert "GPU energy-to-train (median): A 2.4 kJ, B 0.6 kJ: B uses 0.25× the energy of A" in out


def test_records_out_of_time_order_and_a_file_that_grows_give_the_same_energy(tmp_path: Path) -> None:
    from perfwatch.core.measure.energy import EnergyFollower

    order = [0, 2, 1, 4, 3]  # written out of time order (two samplers, a clock step)
    power = [{"time": T0 + i, "gpus": [{"index": 0, "power_w": 100.0 * (i + 1)}]} for i in order]
    # by hand: trapezoids between 100, 200, 300, 400, 500 W one second apart: 150 + 250 + 350 + 450 = 1200 J
    e = gpu_energy(power)
    assert e is not None and e.method == POWER and e.joules == pytest.approx(1200.0)
    counter = [{"time": T0 + i, "gpus": [{"index": 0, "energy_mj": 1000 * i}]} for i in order]
    e = gpu_energy(counter)  # sorted, the counter never goes backwards: 4000 mJ from t = 0 to 4 s
    assert e is not None and e.method == COUNTER and e.joules == pytest.approx(4.0)
    # the live view's reader, fed the same records as the file grows, gives the same numbers
    path = tmp_path / "telemetry.jsonl"
    follower = EnergyFollower(path)
    with open(path, "w") as f:
        for rec in power[:2]:
            f.write(json.dumps(rec) + "\n")
    assert follower.poll()
    with open(path, "a") as f:
        for rec in power[2:]:
            f.write(json.dumps(rec) + "\n")
    assert follower.poll() and not follower.poll()
    run = tmp_path / "run"
    run.mkdir()
    _mllog(run / "mllog.txt", T0 + 0.5, T0 + 3.5, samples=600)
    from perfwatch.core.model.book import load

    (view,) = load(run).views()
    live = follower.energy(view)
    assert live.whole is not None and live.whole.joules == pytest.approx(1200.0)
    # run_start 0.5 s (150 W) -> run_stop 3.5 s (450 W): 0.5·(150+200)/2 + 250 + 350 + 0.5·(400+450)/2 = 900 J
    assert live.to_train is not None and live.to_train.energy.joules == pytest.approx(900.0)
    assert live.to_train.samples_per_joule == pytest.approx(600 / 900)
    assert live == run_energy(view, power)  # the report's computation, the same number exactly


def test_gpus_of_two_nodes_with_the_same_index_and_no_uuid_are_two_gpus(tmp_path: Path) -> None:
    from perfwatch.core.layout import node_telemetry_name
    from perfwatch.core.measure.energy import EnergyFollower

    run = tmp_path / "run"
    run.mkdir()
    for node, watts in (("n1", 100.0), ("n2", 300.0)):  # each node's GPU 0, no uuid recorded
        with open(run / node_telemetry_name(node), "w") as f:
            for i in range(5):
                f.write(json.dumps({"time": T0 + i, "node": node, "gpus": [{"index": 0, "power_w": watts}]}) + "\n")
    # by hand: 100 W x 4 s + 300 W x 4 s = 1600 J, from two GPUs
    e = gpu_energy(read_telemetry(run))
    assert e is not None and e.gpus == 2 and e.joules == pytest.approx(1600.0)
    follower = EnergyFollower(run / "telemetry.jsonl")  # the live view's reader, every node's file
    assert follower.poll()
    _mllog(run / "mllog.txt", T0 + 1, T0 + 3, samples=800)
    from perfwatch.core.model.book import load

    (view,) = load(run).views()
    live = follower.energy(view)
    assert live == run_energy(view, read_telemetry(run))
    assert live.whole is not None and live.whole.joules == pytest.approx(1600.0)
    nodes = follower.node_energy(view)
    assert {n: e.whole.joules for n, e in nodes.items() if e.whole} == {"n1": pytest.approx(400.0),
                                                                         "n2": pytest.approx(1200.0)}
    from perfwatch.core.measure.columns import LiveTelemetry

    metrics = LiveTelemetry(str(run / "telemetry.jsonl"))  # the metrics endpoint's reader
    assert metrics.poll() and metrics.columns.columns(view)["energy_run_kj"] == pytest.approx(1.6)
    # a restart keeps the attempt's files aside (`.attempt-1.*`): the live readers forget n2's readings
    (run / node_telemetry_name("n2")).rename(run / f".attempt-1.{node_telemetry_name('n2')}")
    assert follower.poll() and set(follower.node_energy(view)) == {"n1"}
    whole = follower.energy(view).whole
    assert whole is not None and whole.joules == pytest.approx(400.0)
    assert metrics.poll() and metrics.columns.columns(view)["energy_run_kj"] == pytest.approx(0.4)
    follower.close()
    metrics.close()


# ---- per-run GPU truth, through the real sampling code over a scripted NVML --------------------------------
@pytest.fixture
def two_sleepers():  # type: ignore[no-untyped-def]
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_two_runs_sharing_a_gpu_are_told_apart(tmp_path: Path, two_sleepers: list[int]) -> None:
    a, b = two_sleepers
    gpu = FakeGpu(compute_procs=[(a, 10 * GIB), (b, 30 * GIB), (999_999, 1 * GIB)], mem_used=41 * GIB)
    runs = {"a": RunResources((a,), (0,), tmp_path / "a"), "b": RunResources((b,), (0,), tmp_path / "b")}
    tt = TelemetryThread(MultiSampler(HostSampler(), FakeSampler([gpu])), runs=lambda: runs)
    tt.tick()
    (ra,), (rb,) = read_telemetry(tmp_path / "a"), read_telemetry(tmp_path / "b")
    assert (ra["gpus"][0]["run_pids"], ra["gpus"][0]["run_mem"], ra["gpus"][0]["other_procs"]) == ([a], 10 * GIB, 2)
    assert (rb["gpus"][0]["run_pids"], rb["gpus"][0]["run_mem"], rb["gpus"][0]["other_procs"]) == ([b], 30 * GIB, 2)
    assert ra["gpus"][0]["mem_used"] == rb["gpus"][0]["mem_used"] == 41 * GIB  # the whole GPU, for both
    sa = summarize_telemetry(read_telemetry(tmp_path / "a"))
    assert sa.run_mem_max == 10 * GIB and sa.shared_max == 2


def test_a_multi_gpu_run_records_every_gpu_energy_and_clock_events(tmp_path: Path) -> None:
    import os

    g0 = FakeGpu(power_mw=600_000, energy_mj=1_000_000, throttle_mask=0x4)  # sw_power_cap
    g1 = FakeGpu(bus_id="00000000:2A:00.0", power_mw=300_000, energy_mj=5_000_000, throttle_mask=0x0)
    now = [T0]
    sampler = FakeSampler([g0, g1], clock=lambda: now[0])
    runs = {"ddp": RunResources((os.getpid(),), (0, 1), tmp_path / "ddp")}
    tt = TelemetryThread(sampler, runs=lambda: runs)
    tt.tick()
    g0.energy_mj += 600_000  # 600 J on GPU 0 and
    g1.energy_mj += 300_000  # 300 J on GPU 1 since the first sample
    g1.throttle_mask = 0x40 | 0x1  # hw_thermal_slowdown (and idle, which is not a slowdown)
    now[0] += 2.0
    tt.tick()
    records = read_telemetry(tmp_path / "ddp")
    assert [[g["index"] for g in r["gpus"]] for r in records] == [[0, 1], [0, 1]]
    e = gpu_energy(records)
    assert e is not None and e.method == COUNTER and e.gpus == 2 and e.joules == pytest.approx(900.0)
    s = summarize_telemetry(records)
    assert s.gpu_indices == (0, 1) and s.power_mean_w == pytest.approx(900.0)
    assert s.throttle == {"gpu_idle": 0.5, "hw_thermal_slowdown": 0.5, "sw_power_cap": 1.0}


def test_a_gpu_without_the_energy_counter_says_why(tmp_path: Path) -> None:
    import os

    sampler = FakeSampler([FakeGpu()])
    sampler.fail("energy_mj", "NotSupported")
    runs = {"r": RunResources((os.getpid(),), (0,), tmp_path / "r")}
    TelemetryThread(sampler, runs=lambda: runs).tick()
    (rec,) = read_telemetry(tmp_path / "r")
    assert "energy_mj" not in rec["gpus"][0]
    assert rec["gpus"][0]["na"]["energy_mj"] == "not supported by this GPU or driver"


# ---- the live view: runs table, detail pane and --headless show the energy the report shows ---------------------
def energy_logdir(root: Path) -> Path:
    """Three finished run folders: a GPU with the energy counter, a GPU without it, a CPU-only run."""
    logdir = root / "logdir"
    for name in ("gpu.r0", "pow.r0", "cpu.r0"):
        (logdir / name).mkdir(parents=True)
    # counter 1000 J + 250 J/s (in mJ) at t = 0..10 s; the power readings (a flat 999 W) must not be used
    _telemetry(logdir / "gpu.r0", [[{"index": 0, "power_w": 999.0, "energy_mj": 1_000_000 + 250_000 * i}]
                                   for i in range(11)])
    _mllog(logdir / "gpu.r0" / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=5000)
    # no counter: 100 + 10 t W at t = 0..10 s
    _telemetry(logdir / "pow.r0", [[{"index": 0, "power_w": 100.0 + 10 * i}] for i in range(11)])
    _mllog(logdir / "pow.r0" / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=1500)
    # a CPU-only run: its telemetry has the process tree but no GPU
    with open(logdir / "cpu.r0" / "telemetry.jsonl", "w") as f:
        for i in range(11):
            f.write(json.dumps({"time": T0 + i, "run": "cpu.r0", "cpu_percent": 100.0, "rss": 1 << 30,
                                "gpus": []}) + "\n")
    _mllog(logdir / "cpu.r0" / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=800)
    return logdir


# by hand, from the numbers written above:
# gpu.r0: counter at 2.5 s = 1000 + 625 J, at 7.5 s = 1000 + 1875 J -> 1250 J = 1.25 kJ; 5000 samples / 1250 J = 4;
#         whole recording 0..10 s: 2500 J = 2.50 kJ
# pow.r0: ∫_{2.5}^{7.5} (100 + 10 t) dt = 500 + 5·(56.25 − 6.25) = 750 J = 0.75 kJ; 1500 / 750 = 2 samples/J;
#         whole recording: 100·10 + 5·100 = 1500 J = 1.50 kJ
GPU_LINE = "energy-to-train 1.25 kJ (NVML counter) · 4 samples/J · whole run 2.50 kJ"
POW_LINE = "energy-to-train 0.75 kJ (∫power, estimated) · 2 samples/J · whole run 1.50 kJ"


@pytest.fixture
def _config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.usefixtures("_config_home")
async def test_runs_table_and_detail_show_energy_to_train_and_how_it_was_measured(tmp_path: Path) -> None:
    from ui_helpers import attach_app, screen_text, table, until

    app = attach_app(energy_logdir(tmp_path), theme="dark")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 3, "3 runs")
        await until(pilot, lambda: table(app)._rows["pow.r0"].cells["energy"] == "0.75 kJ", "pow.r0's energy")
        rows = table(app)._rows
        assert rows["gpu.r0"].cells["energy"] == "1.25 kJ"
        assert rows["cpu.r0"].cells["energy"] == "–"  # no GPU: no energy, none invented
        header = screen_text(app).splitlines()[1]
        assert "energy" in header and "ttt/elapsed" in header
        for rid, line in (("gpu.r0", GPU_LINE), ("pow.r0", POW_LINE)):
            table(app).select(rid)
            await until(pilot, lambda line=line: line in screen_text(app), f"{rid}'s energy line")
        table(app).select("cpu.r0")
        await until(pilot, lambda: "cpu.r0   state" in screen_text(app), "cpu.r0's detail")
        assert "energy-to-train" not in screen_text(app)
        # the compare screen (every run marked, `c`) puts the same numbers side by side
        table(app).select("cpu.r0")
        await pilot.press("space", "down", "space", "down", "space", "c")
        await until(pilot, lambda: "energy-to-train" in screen_text(app), "the compare screen's energy column")
        from textual.widgets import DataTable

        compare = app.screen.query_one(DataTable)
        assert {compare.get_row(rid)[0].plain[2:]: compare.get_row(rid)[-1] for rid in ("cpu.r0", "gpu.r0", "pow.r0")} == {
            "cpu.r0": "–", "gpu.r0": "1.25 kJ", "pow.r0": "0.75 kJ"}


@pytest.mark.usefixtures("_config_home")
async def test_the_energy_column_is_hidden_while_no_run_has_energy(tmp_path: Path) -> None:
    from ui_helpers import attach_app, screen_text, table, until

    logdir = energy_logdir(tmp_path)
    for name in ("gpu.r0", "pow.r0"):
        for f in (logdir / name).iterdir():
            f.unlink()
        (logdir / name).rmdir()
    app = attach_app(logdir, theme="dark")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["cpu.r0"], "the CPU run")
        await until(pilot, lambda: app.main.settled, "every row painted")
        header = screen_text(app).splitlines()[1]
        assert "ttt/elapsed" in header and "energy" not in header


@pytest.mark.usefixtures("_config_home")
async def test_at_80x24_the_table_keeps_its_columns_and_the_detail_pane_has_the_energy(tmp_path: Path) -> None:
    from ui_helpers import attach_app, screen_text, table, until

    app = attach_app(energy_logdir(tmp_path), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 3, "3 runs")
        table(app).select("gpu.r0")
        await until(pilot, lambda: "energy-to-train 1.25 kJ (NVML counter)" in screen_text(app), "the detail line")
        lines = screen_text(app).splitlines()
        assert lines[1].split() == ["run", "▲", "state", "progress", "samp/s", "eval/target", "ttt/elapsed"]
        assert lines[3].split()[:3] == ["gpu.r0", "✓", "done"]


def test_headless_prints_energy_to_train_live_and_at_the_end(tmp_path: Path) -> None:
    from launch_helpers import kill_groups, wait_for
    from test_attach import perfwatch

    logdir = energy_logdir(tmp_path)
    # a run still training: its run_stop is appended once perfwatch follows it
    (logdir / "live.r0").mkdir()
    _mllog(logdir / "live.r0" / "mllog.txt", T0 + 2.5, T0 + 7.5, samples=100)
    lines = (logdir / "live.r0" / "mllog.txt").read_text().splitlines(keepends=True)
    (logdir / "live.r0" / "mllog.txt").write_text("".join(lines[:-1]))
    out = tmp_path / "attach.out"
    at = perfwatch("attach", str(logdir), "--headless", out=out)
    try:
        # while following: a line per run once its energy-to-train is final
        assert wait_for(lambda: "pow.r0                   energy    energy-to-train 0.750 kJ (∫power, estimated)"
                        "  2 samples/J" in out.read_text(), timeout=60), out.read_text()
        assert "gpu.r0                   energy    energy-to-train 1.250 kJ (NVML counter)  4 samples/J" in \
            out.read_text()
        assert at.poll() is None
        with open(logdir / "live.r0" / "mllog.txt", "a") as f:
            f.write(lines[-1])
        assert wait_for(lambda: at.poll() is not None, timeout=60), out.read_text()
        text = out.read_text()
        assert at.returncode == 0, text
        final = {ln.split("]", 1)[1].split()[0]: ln for ln in text.splitlines() if "done      reached" in ln}
        assert final["gpu.r0"].endswith("energy-to-train 1.250 kJ (NVML counter)  4 samples/J")
        assert final["pow.r0"].endswith("energy-to-train 0.750 kJ (∫power, estimated)  2 samples/J")
        assert "energy" not in final["cpu.r0"]
    finally:
        kill_groups({at.pid})


def test_the_final_headless_table_has_each_runs_energy_to_train(tmp_path: Path) -> None:
    import io

    from perfwatch.core.control.controller import ProcInfo, RunState
    from perfwatch.core.model.book import load
    from perfwatch.text.headless import summary

    logdir = energy_logdir(tmp_path)
    procs = {rid: ProcInfo(rid, rid[:3], RunState.SUCCEEDED, None, None, 1, 0, T0, T0 + 8, (), (), logdir / rid, (),
                           False, None) for rid in ("cpu.r0", "gpu.r0", "pow.r0")}
    out = io.StringIO()
    assert summary(procs, load(logdir), out)
    header, _rule, *rows, counts, last = out.getvalue().splitlines()
    column = header.split().index("energy")  # the "energy kJ" column (a run's cells hold no space)
    kj = {row.split()[0]: row.split()[column] for row in rows}
    assert last == "all runs succeeded" and counts == "3 done; target: 3 reached; 0 failed"
    assert kj == {"cpu.r0": "-", "gpu.r0": "1.250", "pow.r0": "0.750"}  # by hand: see energy_logdir


def test_a_launched_cpu_run_shows_no_energy_and_a_gpu_run_its_energy_on_the_process_line(tmp_path: Path) -> None:
    from perfwatch.core.control.controller import ProcInfo, RunState
    from perfwatch.core.model.book import load
    from perfwatch.core.telemetry.jsonl import read_telemetry
    from perfwatch.ui.widgets.detail import summary_text

    logdir = energy_logdir(tmp_path)
    views = {v.run_id: v for v in load(logdir).views()}

    def proc(rid: str, devices: tuple[int, ...]) -> ProcInfo:
        return ProcInfo(rid, rid[:3], RunState.RUNNING, 4242, 4242, 1, None, T0, None, devices, (), logdir / rid, (),
                        False, None)

    cpu = summary_text(views["cpu.r0"], proc("cpu.r0", ()), energy=None).plain
    assert "pid 4242  attempt 1  energy –" in cpu  # no GPU: nothing measured, nothing invented
    gpu = run_energy(views["gpu.r0"], read_telemetry(logdir / "gpu.r0"))
    text = summary_text(views["gpu.r0"], proc("gpu.r0", (0,)), energy=gpu).plain
    assert "pid 4242  attempt 1  gpu 0  " + GPU_LINE in text
