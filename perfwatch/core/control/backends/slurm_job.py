"""Inside a Slurm job: turn the run's JSON instructions into the supervisor's argv and exec it.

`python -m perfwatch.core.control.backends.slurm_job JOB_JSON` is what the constant batch
script runs. On one node without a container the workload runs directly under the supervisor,
as a local run does. A multi-node torchrun job, or any job with a Pyxis container image, runs
its workload as one `srun` step with one task per node (`--container-image`/`--container-mounts`
passed to that step); torchrun's rendezvous is taken from the allocation: c10d on the first
node of `SLURM_JOB_NODELIST`, the job id as the rendezvous id.

Before that, the runner starts perfwatch's telemetry sampler on every node of the allocation as
one extra step (`srun --overlap`, one task per node, outside any container): each node writes
telemetry.<node>.jsonl into the run's folder (telemetry/node.py). Slurm ends that step with the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

RDZV_PORT = 29500  # + job id modulo RDZV_PORTS: two jobs sharing a first node do not collide
RDZV_PORTS = 1000
SAMPLER_STEP = "perfwatch-telemetry"  # the telemetry step's name, as `squeue --steps` shows it
_RDZV_FLAGS = ("--standalone", "--node-rank", "--node_rank", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id",
               "--rdzv_id", "--rdzv-backend", "--rdzv_backend", "--master-addr", "--master_addr",
               "--master-port", "--master_port")


def first_node(nodelist: str) -> str:
    """The address of the allocation's first node (`scontrol show hostnames` expands `node[01-04]`;
    its NodeAddr is what the other nodes can reach, usually the host name itself)."""
    done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          check=False, timeout=30)
    names = done.stdout.split()
    name = names[0] if done.returncode == 0 and names else nodelist.split(",")[0]
    node = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True, text=True,
                          check=False, timeout=30)
    addr = next((f.split("=", 1)[1] for f in node.stdout.split() if f.startswith("NodeAddr=")), "")
    return addr or name


def torchrun_for_allocation(argv: list[str], nnodes: int, endpoint: str, rdzv_id: str) -> list[str]:
    """A `python -m torch.distributed.run ...` argv with its rendezvous replaced by the allocation's."""
    try:
        start = argv.index("torch.distributed.run") + 1
    except ValueError:
        return argv
    out = argv[:start]
    i = start
    while i < len(argv) and argv[i].startswith("-"):
        flag = argv[i].split("=", 1)[0]
        if flag in _RDZV_FLAGS or flag == "--nnodes":
            takes_value = "=" not in argv[i] and flag != "--standalone"
            i += 2 if takes_value else 1
            continue
        out.append(argv[i])
        i += 1
    out += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}"]
    return out + argv[i:]


def container_mounts(job: dict[str, Any]) -> list[str]:
    """Pyxis mounts: the campaign's, plus the LOGDIR (the mllog path and output are there) and the
    workload's working folder (its scripts, `--container-workdir`), each at the same path inside,
    unless a mount of the campaign already covers that path."""
    mounts = list(job.get("container_mounts") or [])
    inside = [m.split(":")[1] if ":" in m else m for m in mounts]
    for folder in (job.get("logdir"), job.get("cwd")):
        if folder and not any(folder == d or folder.startswith(d.rstrip("/") + "/") for d in inside):
            mounts.append(folder)
            inside.append(folder)
    return mounts


def workload_argv(job: dict[str, Any], environ: dict[str, str], master: str | None = None) -> list[str]:
    """What the supervisor starts for this job on this allocation (`master`: the first node's address,
    looked up in the allocation when not given; `--dry-run` gives a placeholder)."""
    argv = list(job["argv"])
    nnodes = int(job.get("nnodes") or 1)
    image = job.get("container_image")
    if job.get("launcher") == "torchrun" and nnodes > 1:
        master = master or first_node(environ.get("SLURM_JOB_NODELIST", "localhost"))
        job_id = environ.get("SLURM_JOB_ID", "0")
        port = RDZV_PORT + (int(job_id) if job_id.isdigit() else 0) % RDZV_PORTS
        argv = torchrun_for_allocation(argv, nnodes, f"{master}:{port}", f"slurm-{job_id}")
    if nnodes <= 1 and not image:
        return argv
    if image and argv and argv[0] == job.get("planned_python"):
        argv[0] = "python"  # the container has its own interpreter
    step = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if image:
        step.append(f"--container-image={image}")
        step.append(f"--container-mounts={','.join(container_mounts(job))}")
        step.append(f"--container-workdir={job['cwd']}")
    return [*step, *argv]


def sampler_argv(job: dict[str, Any]) -> list[str]:
    """The telemetry step: one sampler per node of the allocation, sharing the job's CPUs (--overlap)."""
    nnodes = int(job.get("nnodes") or 1)
    return ["srun", "--overlap", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--quiet",
            f"--job-name={SAMPLER_STEP}", sys.executable, "-m", "perfwatch.core.telemetry.node", job["run_dir"]]


def start_sampler(job: dict[str, Any], env: dict[str, str]) -> None:
    """Start the telemetry step in the background; a job without it still runs (the reason is in output.log)."""
    if not job.get("run_dir"):
        return
    try:
        subprocess.Popen(sampler_argv(job), env=env, stdin=subprocess.DEVNULL)  # noqa: S603 - an argv list
    except OSError as exc:
        print(f"perfwatch: no telemetry from the nodes: {exc}", flush=True)


def supervisor_argv(job: dict[str, Any], workload: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "perfwatch.core.control.supervisor", "--exit-file", job["exit_file"]]
    if job.get("cache_clear"):
        cmd += ["--cache-clear", json.dumps(job["cache_clear"]),
                "--cache-clear-timeout", str(job.get("cache_clear_timeout") or 0)]
    return [*cmd, "--", *workload]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m perfwatch.core.control.backends.slurm_job JOB_JSON", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    env = {**os.environ, **{str(k): str(v) for k, v in job.get("env", {}).items()}}
    cmd = supervisor_argv(job, workload_argv(job, env))
    os.chdir(job["cwd"])
    print(f"perfwatch: Slurm job {env.get('SLURM_JOB_ID', '?')} on {env.get('SLURM_JOB_NODELIST', '?')}",
          flush=True)
    start_sampler(job, env)
    os.execve(cmd[0], cmd, env)
    return 127  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
