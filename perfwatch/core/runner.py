"""The tiny supervisor every launched run goes through: `python -m perfwatch.core.runner`.

It is the leader of the run's own session and process group, applies the per-run CPU
and memory limits to itself (so the workload inherits them without a `preexec_fn` in a
threaded perfwatch), starts the workload argv (never a shell), waits for it and writes
`exit.json` atomically. That file is how an exit status survives perfwatch's own death:
a perfwatch that re-adopts the run later cannot `waitpid` a process it did not start.

SIGTERM/SIGINT/SIGHUP sent to the group reach the workload directly; the supervisor
only notes them and keeps waiting, so the exit status is still recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_FILE = "exit.json"


def write_json_atomic(path: Path, data: object) -> None:
    """Temp file in the same folder + fsync + rename: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _cgroup_limit(mem_bytes: int) -> bool:
    """Put this process in its own cgroup v2 with memory.max; False when not writable."""
    root = Path("/sys/fs/cgroup")
    if not (root / "cgroup.controllers").exists():
        return False
    try:
        with open("/proc/self/cgroup") as fh:
            rel = next(line[3:].strip() for line in fh if line.startswith("0::"))
        group = root / rel.lstrip("/") / f"perfwatch-{os.getpid()}"
        group.mkdir()
        (group / "memory.max").write_text(str(mem_bytes))
        (group / "cgroup.procs").write_text(str(os.getpid()))
        return True
    except (OSError, StopIteration):
        return False


def apply_limits(cpus: list[int] | None, mem_bytes: int | None) -> str:
    """Pin to `cpus` and cap memory; returns how memory was capped ("cgroup", "rlimit", "")."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if not mem_bytes:
        return ""
    if _cgroup_limit(mem_bytes):
        return "cgroup"
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mem_bytes if hard == resource.RLIM_INFINITY else min(mem_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return "rlimit"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfwatch.core.runner")
    parser.add_argument("--exit-file", required=True, type=Path)
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids for affinity")
    parser.add_argument("--mem-bytes", type=int, default=0)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command after --")
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # a handler (not SIG_IGN): the workload gets default dispositions back at exec
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    started = time.time()
    record: dict[str, object] = {"started_at": started, "argv": cmd, "runner_pid": os.getpid()}
    try:
        record["memory_limit"] = apply_limits([int(c) for c in args.cpus.split(",") if c], args.mem_bytes)
        child = subprocess.Popen(cmd)
    except OSError as exc:
        print(f"perfwatch: cannot start {cmd[0]!r}: {exc}", file=sys.stderr, flush=True)
        record.update(exit_code=127, signal=None, ended_at=time.time(), error=str(exc))
        write_json_atomic(args.exit_file, record)
        return 127
    record["child_pid"] = child.pid
    code = child.wait()
    record.update(
        exit_code=code if code >= 0 else None,
        signal=signal.Signals(-code).name if code < 0 else None,
        ended_at=time.time(),
        signals_received=[signal.Signals(s).name for s in received],
    )
    write_json_atomic(args.exit_file, record)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
