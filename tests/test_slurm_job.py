"""What a Slurm run submits and runs inside its allocation (no cluster needed: argv lists only)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import ROOT, campaign_file

from perfwatch.core.control.backends.slurm import sbatch_argv
from perfwatch.core.control.backends.slurm_job import torchrun_for_allocation, workload_argv
from perfwatch.core.control.campaign import load_campaign


def test_sbatch_options_for_a_multi_node_gpu_run(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, """
        scheduler: {backend: slurm, partition: gpu, account: mlperf, time_limit: 2h, qos: high,
                    sbatch_args: [--exclusive, --constraint=h100]}
        jobs:
          - {name: bert, devices: 8, threads: 4, cmd: [python, workloads/mlp.py],
             launcher: {type: torchrun, nnodes: 2, nproc_per_node: 8}}
        """)
    c = load_campaign(path, base=ROOT)
    spec = c.runs[0]
    assert sbatch_argv(c.backend, spec, Path("/logs/bert.r0")) == [
        "sbatch", "--parsable", "--job-name=perfwatch-bert.r0", "--output=/logs/bert.r0/output.log",
        "--open-mode=append", f"--chdir={ROOT}", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=32",
        "--gres=gpu:8", "--partition=gpu", "--account=mlperf", "--time=120", "--qos=high",
        "--exclusive", "--constraint=h100",
    ]


def test_torchrun_rendezvous_comes_from_the_allocation() -> None:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--nnodes=2", "--standalone",
            "train.py", "--standalone-looking-arg", "--nnodes=5"]
    assert torchrun_for_allocation(argv, 2, "node01:29500", "slurm-42") == [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--nnodes=2", "--rdzv-backend=c10d",
        "--rdzv-endpoint=node01:29500", "--rdzv-id=slurm-42", "train.py", "--standalone-looking-arg", "--nnodes=5",
    ]


def test_container_runs_as_one_srun_step_with_pyxis_options() -> None:
    job = {"argv": ["/venv/bin/python", "train.py", "--lr", "0.1"], "nnodes": 1, "launcher": "direct",
           "container_image": "nvcr.io#nvidia/pytorch:24.04-py3", "container_mounts": ["/data:/data", "/logs"],
           "cwd": "/work", "planned_python": "/venv/bin/python"}
    assert workload_argv(job, {}) == [
        "srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "--container-image=nvcr.io#nvidia/pytorch:24.04-py3", "--container-mounts=/data:/data,/logs,/work",
        "--container-workdir=/work", "python", "train.py", "--lr", "0.1",
    ]  # the working folder is mounted too: --container-workdir must exist inside
    plain = {**job, "container_image": None}
    assert workload_argv(plain, {}) == ["/venv/bin/python", "train.py", "--lr", "0.1"]


def test_dry_run_shows_the_pyxis_step_with_logdir_and_workdir_mounted(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, """
        relative_to: current_dir
        scheduler: {backend: slurm, container_image: "nvcr.io#nvidia/pytorch:24.04-py3",
                    container_mounts: [/data:/data, /scratch]}
        jobs:
          - {name: bert, cmd: [python, workloads/mlp.py, --lr, "0.1"],
             launcher: {type: torchrun, nnodes: 2, nproc_per_node: 1}}
        """)
    logdir = tmp_path / "logs"
    done = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(path), "--dry-run", "--logdir", str(logdir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert not logdir.exists()  # a dry run writes nothing
    step = next(line for line in done.stdout.splitlines() if "in the job: srun" in line)
    argv = shlex.split(step.split("in the job: ", 1)[1])
    mounts = next(a for a in argv if a.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    assert mounts == ["/data:/data", "/scratch", str(logdir.resolve()), str(ROOT)]  # LOGDIR: mllog.txt, output
    assert f"--container-workdir={ROOT}" in argv and "--container-image=nvcr.io#nvidia/pytorch:24.04-py3" in argv
    assert argv[argv.index(f"--container-workdir={ROOT}") + 1] == "python"  # the container's own interpreter
    assert "--rdzv-endpoint=FIRST_NODE:29500" in argv and "--nnodes=2" in argv


def test_per_node_telemetry_files_are_read_as_one_run_with_totals_and_nodes(tmp_path: Path) -> None:
    from perfwatch.core.engine import telemetry_path
    from perfwatch.core.layout import node_telemetry_name, telemetry_node
    from perfwatch.core.telemetry.jsonl import read_telemetry, summarize_telemetry

    assert node_telemetry_name("gpu-node01") == "telemetry.gpu-node01.jsonl"
    assert node_telemetry_name("../x") == "telemetry.___x.jsonl"  # never a path
    assert telemetry_node("telemetry.gpu-node01.jsonl") == "gpu-node01" and telemetry_node("telemetry.jsonl") == ""
    assert telemetry_node("telemetry.a.b.jsonl") is None and telemetry_node("mllog.txt") is None
    run = tmp_path / "bert.r0"
    run.mkdir()
    (run / "mllog.txt").write_text("")
    lines = {
        "n1": ['{"time": 1, "node": "n1", "cpu_percent": 100, "rss": 1000, "gpus": [{"index": 0, "uuid": "A",'
               ' "util_sm": 90, "power_w": 300}]}',
               '{"time": 2, "node": "n1", "cpu_percent": 50, "rss": 3000, "gpus": [{"index": 0, "uuid": "A",'
               ' "util_sm": 70, "power_w": 100}]}'],
        "n2": ['{"time": 1.5, "node": "n2", "cpu_percent": 20, "rss": 500, "gpus": [{"index": 0, "uuid": "B",'
               ' "util_sm": 10, "power_w": 50}, {"index": 1, "uuid": "C", "util_sm": 30, "power_w": 50}]}'],
    }
    for node, text in lines.items():
        (run / node_telemetry_name(node)).write_text("\n".join(text) + "\n")
    records = read_telemetry(run)
    assert len(records) == 3
    total = summarize_telemetry(records)
    assert total.nodes is not None and set(total.nodes) == {"n1", "n2"}
    assert total.nodes["n1"].cpu_mean == 75 and total.nodes["n2"].cpu_mean == 20
    assert total.cpu_mean == 95  # both nodes' processes together
    assert total.power_mean_w == 200 + 100  # n1 averages 200 W, n2 draws 100 W
    assert total.gpus == 3 and total.rss_max == 3500
    assert total.gpu_util_mean == (80 * 1 + 20 * 2) / 3  # per-GPU mean over all three GPUs
    # the live view follows every node's file of the run (tests/test_ui_telemetry.py: per node and total)
    from types import SimpleNamespace

    from perfwatch.core.telemetry.follow import RunTelemetryFollower

    proc = SimpleNamespace(folder=run)  # a launched run's ProcInfo, as far as telemetry_path reads it
    path = telemetry_path(None, proc)  # type: ignore[arg-type]
    assert path == run / "telemetry.jsonl"
    follower = RunTelemetryFollower(path)
    assert follower.poll() and {node: len(recs) for node, recs in follower.records.items()} == {"n1": 2, "n2": 1}
    # the metrics endpoint: the run's totals, and one series per node
    from perfwatch.core.measure.columns import report_extra
    from perfwatch.core.model.run import Run
    from perfwatch.exporters.metrics import families
    from perfwatch.exporters.source import ExportSnapshot, LiveRun

    view = Run("bert.r0", str(run / "mllog.txt")).view()
    rows = {"bert.r0": report_extra(view, cpu="off")}
    snap = ExportSnapshot("c", tmp_path, (LiveRun("bert.r0", view, "bert", "running", ()),), None)
    got = {(s.name, s.labels.get("node")): s.value for fam in families(snap, rows) for s in fam.samples
           if s.labels.get("run") == "bert.r0"}
    assert got[("perfwatch_run_node_cpu_mean_ratio", "n1")] == 0.75  # 1 = one core busy
    assert got[("perfwatch_run_node_cpu_mean_ratio", "n2")] == 0.2
    assert got[("perfwatch_run_node_power_mean_watts", "n2")] == 100
    assert got[("perfwatch_run_cpu_mean_ratio", None)] == 0.95 and got[("perfwatch_run_power_mean_watts", None)] == 300
    # the live engine's energy (the TUI's, the endpoint's) reads every node's file, as `report` does
    from perfwatch.core.measure.energy import EnergyFollower

    energy = EnergyFollower(run / "telemetry.jsonl")
    assert energy.poll()
    whole = energy.energy(view).whole
    assert whole is not None and whole.joules == pytest.approx(200.0)  # by hand: n1's GPU, 300 W then 100 W, 1 s
    assert rows["bert.r0"]["energy_run_kj"] == pytest.approx(0.2)
    energy.close()

    # the endpoint follows every node's file as it grows, reading only what was appended
    from perfwatch.core.measure.columns import LiveTelemetry

    live = LiveTelemetry(str(run / "telemetry.jsonl"))
    assert live.poll() and live.columns.samples == 3
    with open(run / node_telemetry_name("n2"), "a") as fh:
        fh.write('{"time": 2.5, "node": "n2", "cpu_percent": 40, "gpus": []}\n')
    assert live.poll() and live.columns.samples == 4
    nodes = live.columns.summary.summary().nodes
    assert nodes is not None and nodes["n2"].cpu_mean == 30 and nodes["n1"].cpu_mean == 75
    assert not live.poll()  # nothing new
    live.close()
    assert follower.poll() and [r["time"] for r in follower.records["n2"]] == [1.5, 2.5]  # n2's new record
    follower.close()
