"""The telemetry sampler that runs beside a Slurm job on each of its compute nodes.

    python -m perfwatch.core.telemetry.node RUN_DIR [--interval 1]

The in-job runner (control/backends/slurm_job.py) starts it as one extra `srun --overlap` step
with one task per node. Each task samples its node as the local backend samples its host (the
same samplers: psutil for the host and the job's processes, NVML for the GPUs; without a GPU or
NVML the records say why and carry host figures only) and appends one record per interval to
RUN_DIR/telemetry.<node>.jsonl on the shared LOGDIR (layout.node_telemetry_name), with
`"node": "<node>"`. The job's processes on this node are those whose environment names this job
and this node (SLURM_JOB_ID, SLURMD_NODENAME), except the sampler itself; its GPUs are those
they use. It stops when Slurm ends the step with the job (or on SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import psutil

from perfwatch.core.layout import node_telemetry_name
from perfwatch.core.telemetry.jsonl import append_record, run_record
from perfwatch.core.telemetry.types import RunResources, Sampler


def job_roots(job_id: str, node: str, skip: set[int]) -> tuple[int, ...]:
    """The tops of this job's process trees on this node (processes whose parent is not the job's)."""
    mine: dict[int, int] = {}
    for proc in psutil.process_iter(["pid", "ppid"]):
        pid = proc.info["pid"]
        if pid in skip:
            continue
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("SLURM_JOB_ID") == job_id and env.get("SLURMD_NODENAME", node) == node:
            mine[pid] = proc.info["ppid"]
    return tuple(sorted(pid for pid, ppid in mine.items() if ppid not in mine))


def record_sample(sampler: Sampler, run_dir: Path, node: str, roots: tuple[int, ...]) -> dict[str, Any] | None:
    """One sample of this node's share of the run (the processes under `roots`), appended to
    RUN_DIR/telemetry.<node>.jsonl; None when there was nothing to record. Raises OSError/ValueError
    when the file cannot be written."""
    run_id = run_dir.name
    snap = sampler.sample({run_id: roots} if roots else None)
    record = run_record(snap, run_id, RunResources(roots, None, run_dir))
    if record is not None:
        record["node"] = node
        append_record(run_dir, record, node_telemetry_name(node))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfwatch.core.telemetry.node",
                                description="sample this compute node for a Slurm job's run folder")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    args = p.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    job_id = os.environ.get("SLURM_JOB_ID", "")
    me = os.getpid()
    skip = {me, os.getppid()}

    from perfwatch.core.telemetry.sampling import default_sampler  # NVML is loaded only here

    sampler = default_sampler()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.is_set():
            roots = job_roots(job_id, node, skip) if job_id else ()
            try:
                record_sample(sampler, args.run_dir, node, roots)
            except (OSError, ValueError) as exc:
                print(f"perfwatch telemetry on {node}: cannot write {node_telemetry_name(node)}: {exc}", flush=True)
                return 1
            done.wait(args.interval)
    finally:
        sampler.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
