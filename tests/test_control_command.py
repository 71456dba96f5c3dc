"""`perfwatch control` on local runs, the `scheduler:` backend keys and a missing `sbatch`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from launch_helpers import FAKE, ROOT, campaign_file, kill_groups, wait_for

from perfwatch.core.control.campaign import CampaignError, load_campaign


def perfwatch(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, **kw)  # type: ignore[call-overload]


def runs(logdir: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads((logdir / "perfwatch.json").read_text())["runs"]}


def group_status(pgid: int) -> set[str]:
    out = set()
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.status())
        except (OSError, psutil.Error):
            continue
    return out


def test_control_each_action_on_local_runs_with_exit_status(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 1}}
        defaults: {{grace: 2s, target: {{value: 0.9}}}}
        jobs:
          - {{name: long, repeat: 3, cmd: [python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]}}
        """)
    logdir = tmp_path / "logdir"
    done = perfwatch("launch", str(path), "--detach", "--logdir", str(logdir))
    assert done.returncode == 0, done.stderr
    seen: set[int] = set()
    try:
        assert wait_for(lambda: runs(logdir)["long.r0"]["state"] == "running")
        pgid = runs(logdir)["long.r0"]["pgid"]
        seen.add(pgid)
        control = lambda run, action: perfwatch("control", str(logdir), run, action)  # noqa: E731

        assert control("long.r0", "pause").returncode == 0
        assert wait_for(lambda: group_status(pgid) == {psutil.STATUS_STOPPED})
        assert control("long.r0", "resume").returncode == 0
        assert wait_for(lambda: psutil.STATUS_STOPPED not in group_status(pgid))

        refused = control("long.r2", "pause")  # queued: nothing to pause
        assert refused.returncode == 2 and "cannot pause a queued run" in refused.stderr
        assert control("nope", "stop").returncode == 2

        assert control("long.r1", "start").returncode == 0  # jumps the queue past max_parallel
        seen.add(runs(logdir)["long.r1"]["pgid"])
        assert runs(logdir)["long.r1"]["state"] == "running"

        stopped = control("long.r0", "stop")
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        assert not group_status(pgid)  # the process group is gone
        assert control("long.r1", "kill").returncode == 0
        assert runs(logdir)["long.r1"]["state"] == "killed"
        assert control("long.r0", "restart").returncode == 0
        assert runs(logdir)["long.r0"]["attempt"] == 2
        assert (logdir / "long.r0" / ".attempt-1.output.log").exists()
    finally:
        perfwatch("control", str(logdir), "long.r2", "stop", "--timeout", "1")
        sched = json.loads((logdir / "perfwatch.json").read_text()).get("scheduler") or {}
        if sched.get("pid"):
            os.kill(sched["pid"], 9)
        kill_groups(seen | {r["pgid"] for r in runs(logdir).values() if r.get("pgid")})


@pytest.mark.parametrize(("block", "line", "message"), [
    ("{backend: pbs}", 1, "expected one of local, slurm, got 'pbs'"),
    ("{partition: gpu}", 1, "only applies to backend: slurm"),
    ("\n  backend: slurm\n  sbatch_args: [--exclusive, exclusive]", 3, "sbatch arguments are options"),
    ("\n  backend: slurm\n  time_limit: soon", 3, "expected a time limit"),
    ("\n  backend: slurm\n  qos: [a]", 3, "expected a string"),
    ("\n  backend: slurm\n  container_mounts: ['/a:/b,/c:/d']", 3, "without commas"),
    ("{backend: slurm, walltime: 1h}", 1, "walltime"),
])
def test_malformed_scheduler_block_is_refused_with_file_line(tmp_path: Path, block: str, line: int,
                                                             message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"scheduler: {block}\njobs:\n  - {{name: a, cmd: [python, {FAKE}]}}\n")
    with pytest.raises(CampaignError) as err:
        load_campaign(path, base=ROOT)
    text = str(err.value)
    assert text.startswith(f"{path}:{line}:") and message in text, text


def test_scheduler_block_for_slurm_is_kept_and_launch_flag_overrides(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        scheduler: {{backend: slurm, partition: gpu, account: mlperf, time_limit: 90m, qos: high,
                     sbatch_args: [--exclusive], container_image: "nvcr.io#nvidia/pytorch:24.04-py3",
                     container_mounts: [/data:/data]}}
        jobs:
          - {{name: a, cmd: [python, {FAKE}], launcher: {{type: torchrun, nnodes: 2, nproc_per_node: 8}}}}
        """)
    c = load_campaign(path, base=ROOT)  # nnodes 2 without rdzv_endpoint: Slurm's allocation gives it
    assert (c.backend.backend, c.backend.partition, c.backend.time_limit) == ("slurm", "gpu", "90")
    assert c.backend.container_mounts == ("/data:/data",) and c.backend.sbatch_args == ("--exclusive",)
    with pytest.raises(CampaignError, match="nnodes > 1 needs rdzv_endpoint"):  # --backend local: no allocation
        load_campaign(path, base=ROOT, backend="local")
    single = campaign_file(tmp_path, f"""
        scheduler: {{backend: slurm, partition: gpu}}
        jobs:
          - {{name: a, cmd: [python, {FAKE}]}}
        """)
    assert load_campaign(single, base=ROOT, backend="local").backend.backend == "local"


def test_missing_sbatch_is_a_clear_error_and_creates_nothing(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        jobs:
          - {{name: a, cmd: [python, {FAKE}]}}
        """)
    logdir = tmp_path / "logdir"
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    done = perfwatch("launch", str(path), "--headless", "--backend", "slurm", "--logdir", str(logdir), env=env)
    assert done.returncode == 2
    assert "sbatch" in done.stderr and "not found on PATH" in done.stderr and "Traceback" not in done.stderr
    assert not logdir.exists()


def test_dry_run_on_slurm_prints_each_sbatch_without_submitting(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, f"""
        scheduler: {{backend: slurm, partition: gpu, time_limit: 2h}}
        jobs:
          - {{name: a, devices: 2, cmd: [python, {FAKE}]}}
        """)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no sbatch needed to plan
    done = perfwatch("launch", str(path), "--dry-run", "--logdir", str(tmp_path / "logdir"), env=env)
    assert done.returncode == 0, done.stderr
    assert "backend: slurm" in done.stdout and "--gres=gpu:2" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("sbatch "))
    assert "--job-name=perfwatch-a.r0" in line and "--partition=gpu" in line and "--time=120" in line
    assert not (tmp_path / "logdir").exists()

