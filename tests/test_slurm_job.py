"""What a Slurm run submits and runs inside its allocation (no cluster needed: argv lists only)."""

from __future__ import annotations

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
        "--container-image=nvcr.io#nvidia/pytorch:24.04-py3", "--container-mounts=/data:/data,/logs",
        "--container-workdir=/work", "python", "train.py", "--lr", "0.1",
    ]
    plain = {**job, "container_image": None}
    assert workload_argv(plain, {}) == ["/venv/bin/python", "train.py", "--lr", "0.1"]
