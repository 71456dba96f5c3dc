"""`devices: auto` and GPU assignment: validation against the machine's GPUs, the plan, queuing.

The machine's GPUs come from `process.detect_gpus()` (NVML). CI has no NVIDIA GPU, so a fake
inventory is injected through that same function (or `load_campaign(gpus=...)`); the runs are
real processes either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_helpers import FAKE, ROOT, campaign_file, scheduler, wait_for

from perfwatch.cli import main
from perfwatch.core.control import process
from perfwatch.core.control.campaign import CampaignError, load_campaign
from perfwatch.core.control.controller import RunState
from perfwatch.core.control.scheduler import Scheduler

UUIDS = ["GPU-0a1b2c3d-aaaa", "GPU-0a1b9999-bbbb", "GPU-77777777-cccc"]


# ---- which GPUs perfwatch may hand out --------------------------------------------------------------
@pytest.mark.parametrize(("value", "expected"), [
    (None, (0, 1, 2)),  # unset: every GPU NVML sees
    ("", ()),  # set but empty: none (CPU only)
    ("2,0", (2, 0)),
    ("1, 2", (1, 2)),
    ("0,7,1", (0,)),  # CUDA stops at the first entry that names no GPU
    ("GPU-77777777", (2,)),  # a UUID prefix
    ("GPU-0a1b", ()),  # ambiguous prefix names no GPU
    ("GPU-0a1b9,0", (1, 0)),
    ("MIG-4f2a/1/0", ()),  # a MIG slice is not a whole GPU to hand out
    ("1,1", (1,)),
])
def test_cuda_visible_devices_in_perfwatchs_environment_limits_the_gpus(value: str | None, expected: tuple) -> None:
    assert process.visible_gpus(UUIDS, value) == expected


# ---- validation: auto, explicit counts, file:line errors -------------------------------------------
def _load(tmp_path: Path, body: str, gpus: tuple[int, ...]):
    return load_campaign(campaign_file(tmp_path, body), base=ROOT, gpus=gpus)


JOBS = f"""
    jobs:
      - {{name: one, repeat: 2, cmd: [python, {FAKE}]}}
      - {{name: ddp, launcher: {{type: torchrun, nproc_per_node: 2}}, cmd: [python, {FAKE}]}}
      - {{name: cpu, devices: 0, cmd: [python, {FAKE}]}}
    """


def test_auto_is_the_default_and_means_the_cpu_on_a_machine_without_gpus(tmp_path: Path) -> None:
    c = _load(tmp_path, JOBS, gpus=())
    assert {r.run_id: r.devices for r in c.runs} == {"one.r0": 0, "one.r1": 0, "ddp.r0": 0, "cpu.r0": 0}
    assert c.runs[0].devices_note == "auto: no GPU" and c.gpus == ()


def test_auto_gives_one_gpu_per_run_and_one_per_torchrun_rank(tmp_path: Path) -> None:
    c = _load(tmp_path, JOBS, gpus=(0, 1))
    assert {r.run_id: r.devices for r in c.runs} == {"one.r0": 1, "one.r1": 1, "ddp.r0": 2, "cpu.r0": 0}
    one = _load(tmp_path, JOBS, gpus=(0,))  # too few GPUs for the torchrun job: it trains on the CPU
    ddp = next(r for r in one.runs if r.job == "ddp")
    assert ddp.devices == 0 and ddp.devices_note == "auto: 2 ranks need 2 GPUs, 1 visible to perfwatch"


@pytest.mark.parametrize(("extra", "gpus", "line", "field", "message"), [
    ("    devices: 2\n", (0,), 4, "jobs[0].devices", "needs 2 GPU(s) per run; this machine has 1 visible to perfwatch"),
    ("    devices: 1\n", (), 4, "jobs[0].devices", "this machine has none visible to perfwatch"),
    ("    devices: 1\n    launcher: {type: torchrun, nproc_per_node: 2}\n", (0, 1), 4, "jobs[0].devices",
     "torchrun starts 2 ranks per node, one GPU each: devices must be >= 2"),
    ("    devices: all\n", (0,), 4, "jobs[0].devices", "expected 'auto' or a number of GPUs per run (0 = CPU)"),
])
def test_a_job_needing_gpus_the_machine_lacks_is_refused_with_file_line(
        tmp_path: Path, extra: str, gpus: tuple[int, ...], line: int, field: str, message: str) -> None:
    body = f"jobs:\n  - name: big\n    cmd: [python, {FAKE}]\n" + extra
    with pytest.raises(CampaignError) as err:
        _load(tmp_path, body, gpus=gpus)
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'campaign.yaml'}:{line}: {field}: "), text
    assert message in text


def test_scheduler_gpus_must_exist(tmp_path: Path) -> None:
    body = f"scheduler: {{gpus: [0, 3]}}\njobs:\n  - {{name: a, cmd: [python, {FAKE}]}}\n"
    with pytest.raises(CampaignError, match=r":1: scheduler\.gpus\[1\]: no GPU 3 here \(GPUs visible to perfwatch: 0, 1\)"):
        _load(tmp_path, body, gpus=(0, 1))
    assert _load(tmp_path, body.replace("0, 3", "1"), gpus=(0, 1)).gpus == (1,)


def test_launch_refuses_before_starting_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(process, "detect_gpus", lambda: ())
    path = campaign_file(tmp_path, f"jobs:\n  - name: big\n    devices: 4\n    cmd: [python, {FAKE}]\n")
    logdir = tmp_path / "logdir"
    rc = main(["launch", str(path), "--headless", "--logdir", str(logdir)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}:3: jobs[0].devices: needs 4 GPU(s) per run" in err
    assert not logdir.exists()


def test_dry_run_plan_says_which_gpu_each_run_gets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(process, "detect_gpus", lambda: (0, 1))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = campaign_file(tmp_path, JOBS.replace("repeat: 2", "repeat: 3"))
    assert main(["launch", str(path), "--dry-run", "--logdir", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "GPUs: 0, 1;" in out
    plan = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()[0][-3:-1] == ".r"}
    assert plan["one.r0"].endswith("seed 0, gpu 0") and plan["one.r1"].endswith("seed 1, gpu 1")
    assert plan["one.r2"].endswith("gpu: first free of 0,1")
    assert plan["ddp.r0"].endswith("gpu: first 2 free of 0,1")
    assert plan["cpu.r0"].endswith("seed 0, cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(process, "detect_gpus", lambda: ())
    assert main(["launch", str(path), "--dry-run", "--logdir", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "GPUs: none visible (limited by CUDA_VISIBLE_DEVICES='')" in out and "cpu (auto: no GPU)" in out


# ---- the scheduler hands out GPUs: one per run, queued while none is free -------------------------
def _env(s: Scheduler, run_id: str) -> dict:
    runs = json.loads((s.logdir / "perfwatch.json").read_text())["runs"]
    return next(r for r in runs if r["run_id"] == run_id)["env_delta"]


def test_runs_queue_for_free_gpus_and_a_torchrun_run_gets_one_per_rank(
        tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: g, repeat: 3, cmd: [python, {FAKE}, --mode, hang]}}
          - {{name: c, devices: 0, cmd: [python, {FAKE}, --epochs, 1]}}
        """, gpus=(0, 1))
    owned.append(s)
    s.poll()
    p = s.procs()
    assert (p["g.r0"].devices, p["g.r1"].devices) == ((0,), (1,))
    assert p["g.r2"].state is RunState.QUEUED and p["g.r2"].devices == ()
    assert p["c.r0"].state.alive, "a CPU run does not wait behind GPU runs"
    assert _env(s, "g.r0")["CUDA_VISIBLE_DEVICES"] == "0" and _env(s, "g.r1")["CUDA_VISIBLE_DEVICES"] == "1"
    assert _env(s, "g.r1")["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and _env(s, "c.r0")["CUDA_VISIBLE_DEVICES"] == ""
    s.stop("g.r1")
    assert wait_for(lambda: s.procs()["g.r2"].state is RunState.RUNNING, tick=s.poll)
    assert s.procs()["g.r2"].devices == (1,) and _env(s, "g.r2")["CUDA_VISIBLE_DEVICES"] == "1"
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)


def test_a_torchrun_run_gets_a_gpu_per_rank(tmp_path: Path, owned: list[Scheduler]) -> None:
    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: ddp, launcher: {{type: torchrun, nproc_per_node: 2}}, cmd: [python, {FAKE}, --mode, hang]}}
          - {{name: one, cmd: [python, {FAKE}, --mode, hang]}}
        """, gpus=(0, 1, 2))
    owned.append(s)
    s.poll()
    p = s.procs()
    assert p["ddp.r0"].devices == (0, 1) and _env(s, "ddp.r0")["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert p["one.r0"].devices == (2,)
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)


# ---- the shipped GPU campaign -------------------------------------------------------------------------
def test_gpu_campaign_plans_one_gpu_per_run_and_is_refused_without_one(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(process, "detect_gpus", lambda: (0,))  # an H100 machine: one GPU
    assert main(["launch", "workloads/gpu.yaml", "--dry-run", "--logdir", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    plan = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and ".r" in line.split()[0]}
    assert len(plan) == 10
    assert plan["mlp-fp32.r0"].rstrip().endswith("gpu 0, timeout 300s, stall 120s, exit at eval_accuracy ≥ 0.9")
    assert all("gpu: first free of 0" in plan[r] for r in plan if r != "mlp-fp32.r0")  # the rest queue for it
    assert "--preset gpu --device cuda --precision fp32" in out and "--preset gpu --device cuda --precision bf16" in out
    c = load_campaign(ROOT / "workloads" / "gpu.yaml", gpus=(0,))
    assert c.baseline == "mlp-fp32" and {r.devices for r in c.runs} == {1}
    assert {r.seed for r in c.runs if r.job.startswith("mlp")} == {0, 1, 2}
    assert {r.seed for r in c.runs if r.job == "mlm-bf16"} == {0, 1}  # the transformer of DESIGN.md's P7
    assert "mlm.py --preset gpu --device cuda --precision bf16" in out
    monkeypatch.setattr(process, "detect_gpus", lambda: ())  # CI: no GPU
    assert main(["launch", "workloads/gpu.yaml", "--dry-run"]) == 2
    assert "workloads/gpu.yaml:20: defaults.devices: needs 1 GPU(s) per run; this machine has none" in capsys.readouterr().err


def test_the_live_views_run_detail_names_the_gpus_a_run_got(tmp_path: Path, owned: list[Scheduler]) -> None:
    from perfwatch.ui.widgets.detail import summary_text

    s = scheduler(tmp_path, f"""
        jobs:
          - {{name: ddp, launcher: {{type: torchrun, nproc_per_node: 2}}, cmd: [python, {FAKE}, --mode, hang]}}
          - {{name: cpu, devices: 0, cmd: [python, {FAKE}, --mode, hang]}}
        """, gpus=(0, 1))
    owned.append(s)
    s.poll()
    p = s.procs()
    assert "attempt 1  gpu 0,1" in summary_text(None, p["ddp.r0"]).plain
    assert "gpu" not in summary_text(None, p["cpu.r0"]).plain
    s.stop_all()
    assert wait_for(lambda: s.done, tick=s.poll)
