"""What a Slurm run submits and runs inside its allocation (no cluster needed: argv lists only)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from test_launch_helpers import ROOT, campaign_file

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
