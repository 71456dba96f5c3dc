"""MFU as a user sees it in `perfwatch report`: THE peak resolver, the campaign's overrides, the log's own device.

Expected values are worked out by hand from NVIDIA's datasheets (dense, i.e. the sheets' sparsity
figures halved): H100 SXM bf16 989.5 TFLOP/s, H100 PCIe bf16 756.5 TFLOP/s.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from launch_helpers import ROOT, campaign_file

from perfwatch.cli import main
from perfwatch.core.control.campaign import CampaignError, load_campaign

H100_SXM_BF16 = 989.5e12
H100_PCIE_BF16 = 756.5e12
RATE = 1000.0  # samples/s the synthetic runs log

# A real workload process: logs its device, precision and FLOPs per sample the way perfwatch.instrument
# does (literal keys on purpose: the on-disk contract), a steady 1000 samples/s, and prints its
# CUDA_DEVICE_ORDER to output.log.
WORKLOAD = textwrap.dedent("""
    import json, os, sys
    device, fps = sys.argv[1], float(sys.argv[2])
    print("CUDA_DEVICE_ORDER=" + os.environ.get("CUDA_DEVICE_ORDER", "<unset>"), flush=True)
    t = 1_700_000_000_000
    def emit(fh, key, value=None, time_ms=t, **meta):
        rec = {"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
               "value": value, "metadata": meta}
        fh.write(":::MLLOG " + json.dumps(rec) + "\\n")
    with open(os.environ["PERFWATCH_MLLOG"], "a") as fh:
        emit(fh, "submission_benchmark", "fake")
        emit(fh, "perfwatch_device", device)
        emit(fh, "perfwatch_precision", "bf16")
        emit(fh, "perfwatch_world_size", 1)
        emit(fh, "perfwatch_flops_per_sample", fps)
        emit(fh, "run_start")
        for i in range(1, 8):
            emit(fh, "tracked_stats", {"throughput": 1000.0}, time_ms=t + 1000 * i, step=i)
        emit(fh, "run_stop", time_ms=t + 8000, status="success")
""")


def log_lines(device: str, flops_per_sample: float) -> str:
    t = 1_700_000_000_000

    def rec(key: str, value: object = None, time_ms: int = t, **meta: object) -> str:
        return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME",
                                          "key": key, "value": value, "metadata": meta}) + "\n"

    out = [rec("perfwatch_device", device), rec("perfwatch_precision", "bf16"), rec("perfwatch_world_size", 2),
           rec("perfwatch_device_count", 2), rec("perfwatch_flops_per_sample", flops_per_sample), rec("run_start")]
    out += [rec("tracked_stats", {"throughput": RATE}, t + 1000 * i, step=i) for i in range(1, 8)]
    return "".join(out)


def report(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["report", str(path), "--format", "json", "--no-cpu-peak"]) == 0
    return {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}


def test_mfu_from_a_log_that_names_an_h100_without_any_telemetry(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "bert.r0"
    run.mkdir()
    # 2 GPUs x 1000 samples/s in all x 4.9475e11 FLOPs = 4.9475e14 FLOP/s = half of 2 x 989.5 TFLOP/s
    (run / "mllog.txt").write_text(log_lines("NVIDIA H100 80GB HBM3", 4.9475e11))
    row = report(tmp_path, capsys)["bert.r0"]
    assert row["mfu"] == pytest.approx(4.9475e14 / (2 * H100_SXM_BF16))
    assert row["mfu"] == pytest.approx(0.25)
    assert row["peak_device"] == "H100 SXM"
    assert row["peak_used"].startswith("H100 SXM bf16 dense, datasheet") and "log" in row["peak_used"]
    assert main(["report", str(tmp_path), "--no-cpu-peak"]) == 0  # the table says which peak, too
    assert "MFU of bert.r0 against H100 SXM bf16 dense, datasheet" in capsys.readouterr().out


def test_telemetry_refines_what_the_log_name_leaves_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r0"
    run.mkdir()
    (run / "mllog.txt").write_text(log_lines("NVIDIA H100", 7.565e11))  # no form factor in the name
    row = report(tmp_path, capsys)["r0"]
    assert row["mfu"] is None and "form factor unknown" in row["mfu_reason"]
    gpu = {"index": 0, "name": "NVIDIA H100", "mem_total": 80 * 1024**3, "power_default_limit_w": 350.0}
    (run / "telemetry.jsonl").write_text(json.dumps({"time": 1.0, "run": "r0", "gpus": [gpu]}) + "\n")
    row = report(tmp_path, capsys)["r0"]
    assert row["peak_device"] == "H100 PCIe"  # a 350 W board is the PCIe card
    assert row["mfu"] == pytest.approx(1000 * 7.565e11 / (2 * H100_PCIE_BF16))
    assert "telemetry" in row["peak_used"]


def test_campaign_flops_per_sample_and_peak_flops_change_the_reported_mfu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # the user's own setting must not reach the runs
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    h100 = "NVIDIA H100 80GB HBM3"
    path = campaign_file(tmp_path, f"""
        defaults: {{devices: 0}}
        jobs:
          - {{name: logged, cmd: [python, {script}, "{h100}", 4.9475e11]}}
          - {{name: flops, flops_per_sample: 9.895e+11, cmd: [python, {script}, "{h100}", 4.9475e11]}}
          - {{name: peak, peak_flops: 100 TFLOPS, cmd: [python, {script}, "{h100}", 4.9475e11]}}
          - name: newgpu
            peak_flops: {{"B300": {{bf16: "2.5 PFLOPS"}}, fp32: 50e+12}}
            cmd: [python, {script}, "NVIDIA B300 SXM6 AC", 4.9475e11]
          - {{name: unknown, cmd: [python, {script}, "NVIDIA B300 SXM6 AC", 4.9475e11]}}
        """)
    logdir = tmp_path / "logdir"
    assert main(["launch", str(path), "--headless", "--logdir", str(logdir)]) == 0
    rows = report(logdir, capsys)
    achieved = RATE * 4.9475e11
    assert rows["logged.r0"]["mfu"] == pytest.approx(achieved / H100_SXM_BF16)  # the log's own FLOPs: 50 %
    assert rows["flops.r0"]["mfu"] == pytest.approx(RATE * 9.895e11 / H100_SXM_BF16)  # the campaign's: 100 %
    assert rows["flops.r0"]["flops_source"] == "campaign"
    assert rows["peak.r0"]["mfu"] == pytest.approx(achieved / 100e12)
    assert rows["peak.r0"]["peak_used"].startswith("campaign peak_flops")
    assert rows["newgpu.r0"]["mfu"] == pytest.approx(achieved / 2.5e15)  # its device's entry, bf16
    assert "B300" in rows["newgpu.r0"]["peak_used"]
    assert rows["unknown.r0"]["mfu"] is None
    assert "set peak_flops in the campaign" in rows["unknown.r0"]["mfu_reason"]
    # every run's environment carries CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML and CUDA number GPUs alike)
    for run in ("logged.r0", "flops.r0", "peak.r0", "newgpu.r0", "unknown.r0"):
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in (logdir / run / "output.log").read_text().splitlines()


@pytest.mark.parametrize(("value", "message"), [
    ("fast", "cannot read 'fast' as FLOP/s"),
    ("-5", "must be a positive number"),
    ("{H100: {bf61: 1e12}}", "unknown key; did you mean 'bf16'?"),
    ("{H100: {bf16: []}}", "expected FLOP/s per device"),
])
def test_a_bad_peak_flops_is_a_file_line_error(tmp_path: Path, value: str, message: str) -> None:
    path = campaign_file(tmp_path, f"""
        jobs:
          - name: a
            peak_flops: {value}
            cmd: [python, x.py]
        """)
    with pytest.raises(CampaignError) as info:
        load_campaign(path, base=ROOT, gpus=())
    text = str(info.value)
    assert text.startswith(f"{path}:3:") and "peak_flops" in text and message in text


def test_the_live_view_shows_the_mfu_report_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfwatch.core.engine import run_figures
    from perfwatch.core.measure.mfu import Overrides
    from perfwatch.core.model import book

    run = tmp_path / "bert.r0"
    run.mkdir()
    (run / "mllog.txt").write_text(log_lines("NVIDIA H100 80GB HBM3", 4.9475e11))
    view = book.load(tmp_path).views()[0]
    assert run_figures(view).mfu.value == pytest.approx(report(tmp_path, capsys)["bert.r0"]["mfu"])
    # the campaign's FLOPs per sample (what the TUI reads from perfwatch.json) win there too
    assert run_figures(view, overrides=Overrides(flops_per_sample=9.895e11)).mfu.value == pytest.approx(
        RATE * 9.895e11 / (2 * H100_SXM_BF16))


def test_a_cpu_run_says_which_stored_peak_it_used(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from perfwatch.core.measure import host_peak
    from perfwatch.core.measure.mfu import forget_cached_cpu_peaks

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    forget_cached_cpu_peaks()
    host_peak.cpu_peak("fp32", threads=2, measure_with=lambda _d, _t: 2e11)  # as `perfwatch peak --measure` stores it
    run = tmp_path / "logs" / "mlp.r0"
    run.mkdir(parents=True)
    text = log_lines("cpu", 1e8).replace('"perfwatch_precision", "value": "bf16"', '"perfwatch_precision", "value": "fp32"')
    text = text.replace('"perfwatch_device_count", "value": 2', '"perfwatch_threads", "value": 2')
    (run / "mllog.txt").write_text(text)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "logs"), "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["peak_used"].startswith("measured CPU peak, 2 threads, fp32, cached 20")
    # 1000 samples/s x 1e8 FLOPs over 2 processes x 200 GFLOP/s
    assert row["mfu"] == pytest.approx(1000 * 1e8 / (2 * 2e11))
    forget_cached_cpu_peaks()
