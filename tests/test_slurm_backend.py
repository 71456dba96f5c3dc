"""Campaigns on a real single-node Slurm (tests/slurm_cluster.py): submit, state, control, re-adopt.

Every claim is checked against Slurm itself (squeue, scontrol show job, scontrol listpids) and
the processes' own state (psutil), never against perfwatch's view alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from launch_helpers import FAKE, ROOT, campaign_file, scheduler, wait_for

from perfwatch.core.control.backends.slurm import POLL_ENV
from perfwatch.core.control.controller import RunState

HANG = f"[python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about what happens, not how often Slurm is asked: squeue every second."""
    monkeypatch.setenv(POLL_ENV, "1")


def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def job_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else ""


def job_pids(job_id: str) -> list[int]:
    out = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]


def statuses(pids: list[int]) -> set[str]:
    out = set()
    for pid in pids:
        try:
            out.add(psutil.Process(pid).status())
        except psutil.Error:
            continue
    return out


def registry(logdir: Path) -> dict:
    return json.loads((logdir / "perfwatch.json").read_text())


def record(logdir: Path, run_id: str) -> dict:
    return next(r for r in registry(logdir)["runs"] if r["run_id"] == run_id)


def perfwatch(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, check=False, **kw)  # type: ignore[call-overload]


def test_slurm_runs_pause_resume_stop_kill_restart_start_now(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    s = scheduler(tmp_path, f"""
        scheduler: {{backend: slurm}}
        defaults: {{grace: 3s}}
        jobs:
          - {{name: long, repeat: 2, cmd: {HANG}}}
          - {{name: deaf, cmd: [python, {FAKE}, --mode, ignore_term, --epochs, 5, --step, 0.05]}}
          - {{name: later, cmd: [python, {FAKE}, --epochs, 3, --step, 0.05]}}
        """)
    try:
        long = ("long.r0", "long.r1")  # submitted first: they get the node's 2 CPUs, deaf.r0 and later.r0 wait
        assert wait_for(lambda: all(s.runs[r].state is RunState.RUNNING for r in long), timeout=60, tick=s.poll)
        ids = {rid: str(s.runs[rid].record.slurm_job_id) for rid in s.runs}
        assert len(set(ids.values())) == 4 and all(squeue_state(ids[r]) == "RUNNING" for r in long)
        assert squeue_state(ids["deaf.r0"]) == "PENDING"
        assert s.runs["deaf.r0"].state is RunState.STARTING
        assert (s.runs["deaf.r0"].reason or "").startswith("pending in Slurm")
        s.start_now("later.r0")  # scontrol top: later.r0 now goes before deaf.r0
        assert int(job_field(ids["later.r0"], "Priority")) > int(job_field(ids["deaf.r0"], "Priority"))
        first = ids["long.r0"]
        assert wait_for(lambda: (tmp_path / "logdir/long.r0/output.log").exists()
                        and "waiting forever" in (tmp_path / "logdir/long.r0/output.log").read_text())

        s.pause("long.r0")
        assert s.runs["long.r0"].state is RunState.PAUSED
        assert squeue_state(first) == "SUSPENDED"
        assert job_pids(first)
        assert wait_for(lambda: statuses(job_pids(first)) == {psutil.STATUS_STOPPED})  # slurmd sends SIGSTOP
        s.resume("long.r0")
        assert wait_for(lambda: squeue_state(first) == "RUNNING")
        assert wait_for(lambda: psutil.STATUS_STOPPED not in statuses(job_pids(first)))  # slurmd sends SIGCONT
        s.poll()
        assert s.runs["long.r0"].state is RunState.RUNNING

        s.stop("long.r0")
        assert wait_for(lambda: s.runs["long.r0"].state.terminal, timeout=30, tick=s.poll)
        assert s.runs["long.r0"].state is RunState.STOPPED
        assert "SIGTERM" in (s.runs["long.r0"].reason or "")  # the workload got TERM, not the KILL after grace
        assert wait_for(lambda: squeue_state(first) not in ("RUNNING", "SUSPENDED", "COMPLETING"))
        assert wait_for(lambda: squeue_state(ids["later.r0"]) != "PENDING", timeout=30)  # the freed CPU: later first
        deaf_start = job_field(ids["deaf.r0"], "StartTime")  # later.r0 is short: deaf.r0 may follow at once
        assert squeue_state(ids["deaf.r0"]) == "PENDING" or deaf_start >= job_field(ids["later.r0"], "StartTime")

        s.kill("long.r1")
        assert wait_for(lambda: s.runs["long.r1"].state.terminal, timeout=30, tick=s.poll)
        assert s.runs["long.r1"].state is RunState.KILLED
        assert wait_for(lambda: squeue_state(ids["long.r1"]) not in ("RUNNING", "COMPLETING"))

        deaf_out = tmp_path / "logdir/deaf.r0/output.log"
        assert wait_for(lambda: deaf_out.exists() and "waiting forever" in deaf_out.read_text(), timeout=60, tick=s.poll)
        # squeue is asked every poll interval (1 s here): the run shows running by the next query
        assert wait_for(lambda: s.runs["deaf.r0"].state is RunState.RUNNING, timeout=10, tick=s.poll)
        s.stop("deaf.r0")  # ignores SIGTERM: after the 3 s grace, scancel --signal=KILL
        assert wait_for(lambda: s.runs["deaf.r0"].state.terminal, timeout=40, tick=s.poll)
        assert s.runs["deaf.r0"].state is RunState.STOPPED
        assert "no exit 3s after SIGTERM: SIGKILL" in (s.runs["deaf.r0"].reason or "")
        assert wait_for(lambda: squeue_state(ids["deaf.r0"]) not in ("RUNNING", "COMPLETING"))

        s.restart("long.r0")
        assert wait_for(lambda: s.runs["long.r0"].state is RunState.RUNNING, timeout=60, tick=s.poll)
        again = s.runs["long.r0"].record.slurm_job_id
        assert again != first and squeue_state(again) == "RUNNING"
        assert s.runs["long.r0"].record.attempts[0]["slurm_job_id"] == first  # earlier attempt kept
        assert (tmp_path / "logdir/long.r0/.attempt-1.output.log").exists()
        s.kill("long.r0")
        assert wait_for(lambda: s.done, timeout=30, tick=s.poll)
        assert s.runs["later.r0"].state is RunState.SUCCEEDED
    finally:
        s.close(stop_runs=True)


def job_field(job_id: str, name: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    m = re.search(rf"\b{name}=(\S+)", out)
    return m.group(1) if m else ""


def best_accuracy(mllog: Path) -> float:
    values = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in mllog.read_text().splitlines()
              if ":::MLLOG " in line]
    return max((float(v["value"]) for v in values if v["key"] == "eval_accuracy"), default=0.0)


def test_launch_demo_with_backend_slurm_every_run_a_slurm_job(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`perfwatch launch workloads/demo.yaml --headless --backend slurm`, the shipped demo unchanged: its
    baseline group (two 1-CPU runs) and its 2-process torchrun job (2 CPUs)."""
    logdir = tmp_path / "logdir"
    done = perfwatch("launch", "workloads/demo.yaml", "--only", "mlp.bs32", "--only", "mlp-ddp", "--headless",
                     "--backend", "slurm", "--logdir", str(logdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all runs succeeded" in done.stdout
    # CI's 2 CPUs: the 2-CPU job waits for the others
    assert re.search(r"starting +pending in Slurm: (Resources|Priority)", done.stdout), done.stdout
    runs = registry(logdir)["runs"]
    assert sorted(r["run_id"] for r in runs) == ["mlp-ddp.r0", "mlp.bs32.r0", "mlp.bs32.r1"]
    assert len({r["slurm_job_id"] for r in runs}) == 3
    for run in runs:
        job = run["slurm_job_id"]
        assert run["state"] == "succeeded"
        assert job_field(job, "JobName") == f"perfwatch-{run['run_id']}"  # Slurm ran it, under its name
        assert job_field(job, "JobState") in ("COMPLETED", "CANCELLED")  # CANCELLED: stopped by perfwatch at target
        assert f"Slurm job {job} on" in (logdir / run["run_id"] / "output.log").read_text()
        assert best_accuracy(logdir / run["run_id"] / "mllog.txt") >= 0.90  # the demo's target, from the log
    assert job_field(next(r for r in runs if r["run_id"] == "mlp-ddp.r0")["slurm_job_id"], "NumCPUs") == "2"
    report = perfwatch("report", str(logdir))
    assert report.returncode == 0 and "mlp-ddp.r0" in report.stdout


def test_sigkill_perfwatch_then_control_and_attach_readopt_slurm_jobs(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gate, marker = tmp_path / "gate", tmp_path / "cleared.jsonl"
    path = campaign_file(tmp_path, f"""
        scheduler: {{backend: slurm, time_limit: 10m}}
        cache_clear_cmd: [python, {ROOT}/tests/workloads_fake/clear_cache.py, --marker, {marker}]
        defaults: {{target: {{value: 0.9}}}}
        jobs:
          - {{name: job, repeat: 2, cmd: [python, {FAKE}, --epochs, 10, --step, 0.05, --gate, {gate}]}}
        """)
    logdir = tmp_path / "logdir"
    with open(tmp_path / "launch.out", "wb") as out:
        pw = subprocess.Popen([sys.executable, "-m", "perfwatch", "launch", str(path), "--headless", "--logdir",
                               str(logdir)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and
                        all(r["state"] == "running" for r in registry(logdir)["runs"]), timeout=60)
        os.killpg(pw.pid, signal.SIGKILL)
        pw.wait()
        ids = {r["run_id"]: r["slurm_job_id"] for r in registry(logdir)["runs"]}
        assert all(squeue_state(j) == "RUNNING" for j in ids.values())  # the jobs outlive perfwatch

        done = perfwatch("control", str(logdir), "job.r0", "pause")
        assert done.returncode == 0, done.stderr
        assert squeue_state(ids["job.r0"]) == "SUSPENDED"
        assert wait_for(lambda: statuses(job_pids(ids["job.r0"])) == {psutil.STATUS_STOPPED})
        done = perfwatch("control", str(logdir), "job.r0", "resume")
        assert done.returncode == 0, done.stderr
        assert squeue_state(ids["job.r0"]) == "RUNNING"
        assert perfwatch("control", str(logdir), "job.r0", "start").returncode == 2  # not queued: refused

        assert perfwatch("control", str(logdir), "job.r1", "kill").returncode == 0
        assert record(logdir, "job.r1")["state"] == "killed"
        assert wait_for(lambda: squeue_state(ids["job.r1"]) not in ("RUNNING", "COMPLETING"))
        assert perfwatch("control", str(logdir), "job.r1", "restart").returncode == 0
        assert record(logdir, "job.r1")["state"] == "queued"  # nobody owns the campaign: it waits
        done = perfwatch("control", str(logdir), "job.r1", "start")
        assert done.returncode == 0, done.stderr
        new = record(logdir, "job.r1")["slurm_job_id"]
        assert new != ids["job.r1"]
        assert wait_for(lambda: squeue_state(new) == "RUNNING", timeout=60)

        with open(tmp_path / "attach.out", "wb") as out:
            at = subprocess.Popen([sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless"],
                                  cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        assert wait_for(lambda: (registry(logdir).get("scheduler") or {}).get("pid") == at.pid)
        gate.touch()
        assert wait_for(lambda: at.poll() is not None, timeout=90)
        text = (tmp_path / "attach.out").read_text()
        assert at.returncode == 0, text
        assert "all runs succeeded" in text
        final = {r["run_id"]: r for r in registry(logdir)["runs"]}
        assert final["job.r0"]["slurm_job_id"] == ids["job.r0"]  # re-adopted, not submitted again
        assert final["job.r1"]["slurm_job_id"] == new and final["job.r1"]["attempt"] == 2
        assert job_state(ids["job.r0"]) == "COMPLETED" and job_state(new) == "COMPLETED"
        cleared = [json.loads(line)["run_id"] for line in marker.read_text().splitlines()]
        assert sorted(cleared) == ["job.r0", "job.r1", "job.r1"]  # before every attempt, inside its job
        assert final["job.r1"]["cache_clear"]["ok"] is True
    finally:
        gate.touch()
        if pw.poll() is None:
            os.killpg(pw.pid, signal.SIGKILL)
        known = [str(r.get("slurm_job_id")) for r in registry(logdir)["runs"] if r.get("slurm_job_id")]
        if known:
            subprocess.run(["scancel", *known], check=False)


def test_two_node_torchrun_job_rendezvous_from_the_allocation(slurm_two_nodes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A torchrun job with nnodes 2: one sbatch --nodes=2, one srun task per node, c10d at the first node."""
    env = {**os.environ, **slurm_two_nodes.env()}
    path = campaign_file(tmp_path, """
        name: twonode
        relative_to: current_dir
        scheduler: {backend: slurm}
        defaults: {threads: 1, timeout: 5m, target: {key: eval_accuracy, value: 0.90}}
        jobs:
          - name: ddp
            benchmark: mlp_regression
            launcher: {type: torchrun, nnodes: 2, nproc_per_node: 1}
            cmd: [python, workloads/mlp.py]
            args: {--batch-size: 64, --lr: 0.003, --seed: "{seed}", --target: 0.90, --max-epochs: 40,
                   --in-features: 32, --hidden: 128, --depth: 2, --train-samples: 4096, --eval-samples: 1024}
        """)
    logdir = tmp_path / "logdir"
    done = perfwatch("launch", str(path), "--headless", "--logdir", str(logdir), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    job = registry(logdir)["runs"][0]["slurm_job_id"]
    show = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env).stdout
    assert "NumNodes=2 " in show and "NodeList=n[1-2]" in show and "JobState=COMPLETED" in show
    mllog = (logdir / "ddp.r0" / "mllog.txt").read_text()
    sizes = [json.loads(x.split(":::MLLOG ", 1)[1])["value"] for x in mllog.splitlines()
             if '"key": "perfwatch_world_size"' in x]
    assert sizes == [2]  # one rank per node, joined into one process group
    assert best_accuracy(logdir / "ddp.r0" / "mllog.txt") >= 0.90

    # telemetry sampled on each node of the allocation, one file per node, the job's own processes in it
    folder = logdir / "ddp.r0"
    assert sorted(p.name for p in folder.glob("telemetry.*.jsonl")) == ["telemetry.n1.jsonl", "telemetry.n2.jsonl"]
    cpu_means = {}
    for node in ("n1", "n2"):
        records = [json.loads(line) for line in (folder / f"telemetry.{node}.jsonl").read_text().splitlines()]
        assert records and all(r["node"] == node for r in records)
        cpus = [r["cpu_percent"] for r in records if "cpu_percent" in r]
        assert cpus and max(r.get("nprocs", 0) for r in records) >= 2  # torchrun and its rank, on this node
        assert all("host_cpu_percent" in r for r in records) and all("gpu_unavailable" in r for r in records)
        cpu_means[node] = sum(cpus) / len(cpus)
    report = perfwatch("report", str(logdir), env=env)
    assert report.returncode == 0, report.stderr
    line = next(x for x in report.stdout.splitlines() if x.startswith("telemetry of ddp.r0 by node"))
    assert "n1: CPU" in line and "n2: CPU" in line
    row = json.loads(perfwatch("report", str(logdir), "--format", "json", env=env).stdout)["runs"][0]
    assert set(row["telemetry_nodes"]) == {"n1", "n2"}
    for node, mean in cpu_means.items():
        assert abs(row["telemetry_nodes"][node]["cpu_mean"] - mean) < 1e-6
    assert abs(row["cpu_mean"] - sum(cpu_means.values())) < 1e-6  # the run's total: both nodes added

    # the live view: the engine follows both nodes' files, each node's newest figures and their total
    from perfwatch.core.engine import LiveEngine, attach_session

    engine = LiveEngine(attach_session(logdir, control=False), follow_interval=0.0).start(threaded=False)
    try:
        engine.select("ddp.r0")
        assert wait_for(lambda: (s := engine.snapshot) is not None and s.selected.by_node is not None
                        and len(s.selected.by_node.nodes) == 2, timeout=20, tick=engine.step)
        snap = engine.snapshot
    finally:
        engine.stop()
    assert snap is not None and snap.selected.by_node is not None
    nodes, total = snap.selected.by_node.nodes, snap.selected.by_node.total
    newest = {node: json.loads((folder / f"telemetry.{node}.jsonl").read_text().splitlines()[-1]) for node in cpu_means}
    cpus = [newest[node].get("cpu_percent") for node in ("n1", "n2")]
    assert [(n.node, n.cpu_percent, n.gpus) for n in nodes] == [("n1", cpus[0], 0), ("n2", cpus[1], 0)]  # no GPU here
    known = [c for c in cpus if c is not None]
    assert total.cpu_percent == (sum(known) if known else None) and total.gpus == 0


def test_a_hung_rank_of_a_two_node_job_is_found_with_every_ranks_stacks(slurm_two_nodes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The hang watchdog on a 2-node Slurm job: rank 1 (node n2) stops before its collective; the run turns
    stalled, both ranks' stacks are captured through a step on their nodes, and `on_stall: stop` ends it."""
    import shutil

    if shutil.which("py-spy") is None:
        pytest.skip('py-spy is not installed (pip install "perfwatch[diagnose]")')
    env = {**os.environ, **slurm_two_nodes.env()}
    path = campaign_file(tmp_path, """
        name: hang
        relative_to: current_dir
        scheduler: {backend: slurm}
        defaults: {threads: 1, timeout: 4m, stall_after: 5s, stall_factor: 5, on_stall: stop, grace: 5s}
        jobs:
          - name: ddp
            benchmark: mlp_regression
            launcher: {type: torchrun, nnodes: 2, nproc_per_node: 1}
            cmd: [python, workloads/mlp.py, --no-flops]
            args: {--batch-size: 64, --hidden: 64, --depth: 2, --train-samples: 4096, --eval-samples: 512,
                   --log-interval: 0.5, --target: 2, --max-epochs: 50, --hang-rank: "1:40"}
        """)
    logdir = tmp_path / "logdir"
    done = perfwatch("launch", str(path), "--headless", "--logdir", str(logdir), env=env)
    out = done.stdout + done.stderr
    assert "stalled" in out and "stopped by the hang watchdog (on_stall: stop)" in out, out[-3000:]
    (capture,) = sorted((logdir / "ddp.r0" / "stacks").glob("*.json"))
    record = json.loads(capture.read_text())
    assert record["stuck_ranks"] == [1] and record["waiting_ranks"] == [0], record
    by_rank = {r["rank"]: r for r in record["ranks"]}
    assert {r["node"] for r in by_rank.values()} == {"n1", "n2"}  # Slurm's node names, not the host's
    for r in by_rank.values():
        assert not r.get("error") and r["threads"], r  # captured through a step on the rank's own node
    assert any(f.startswith("drill_batches") for t in by_rank[1]["threads"] for f in t["frames"])
