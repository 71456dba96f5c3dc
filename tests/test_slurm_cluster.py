"""The local Slurm the Slurm-backend tests run against: a batch job really runs on it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from launch_helpers import wait_for


def test_sbatch_runs_a_job_on_the_local_cluster(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out.txt"
    done = subprocess.run(["sbatch", "--parsable", "-o", str(out), "--wrap", "echo hello from slurm"],
                          capture_output=True, text=True, check=True)
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit()
    wait_for(lambda: out.exists() and "hello from slurm" in out.read_text())
    state = lambda: subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],  # noqa: E731
                                   capture_output=True, text=True).stdout.strip()
    wait_for(lambda: state() == "COMPLETED")
