"""The tiny supervisor every launched run goes through: `python -m perfwatch.core.control.supervisor`.

It is the leader of the run's own session and process group, applies the per-run CPU
and memory limits to itself (so the workload inherits them without a `preexec_fn` in a
threaded perfwatch), starts the workload argv (never a shell), waits for it and writes
`exit.json` atomically. That file is how an exit status survives perfwatch's own death:
a perfwatch that re-adopts the run later cannot `waitpid` a process it did not start.

SIGTERM/SIGINT/SIGHUP sent to the group reach the workload directly; the supervisor
only notes them and keeps waiting, so the exit status is still recorded.

With `--cache-clear ARGV_JSON` the supervisor first runs that command (MLPerf's "clear the
caches before each run"), in the run's process group with its output in output.log, under
`--cache-clear-timeout`. Its result is `cache_clear` in exit.json; if it fails, times out or
the run is stopped meanwhile, the workload is never started.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from perfwatch.core.layout import write_json_atomic


def signal_name(num: int) -> str:
    """`SIGTERM` for the signals Python's enum names; `SIGRTMIN+6` for real-time ones; `SIG99` otherwise.
    A workload can die of any signal number, and its record must never crash the supervisor."""
    try:
        return signal.Signals(num).name
    except ValueError:
        rtmin, rtmax = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
        if rtmin <= num <= rtmax:
            return f"SIGRTMIN+{num - rtmin}"
        return f"SIG{num}"


def signal_number(name: object) -> int | None:
    """The number `signal_name` wrote (None for anything else: exit.json can be edited by anyone)."""
    if not isinstance(name, str):
        return None
    if name in signal.Signals.__members__:
        return int(signal.Signals[name])
    if name.startswith("SIGRTMIN+") and name[9:].isdigit() and hasattr(signal, "SIGRTMIN"):
        num = signal.SIGRTMIN + int(name[9:])
        return num if num <= signal.SIGRTMAX else None
    if name.startswith("SIG") and name[3:].isdigit() and 0 < int(name[3:]) < 256:
        return int(name[3:])
    return None


def _record(exit_file: Path, record: dict[str, object]) -> None:
    """Write exit.json; a full disk must not turn the workload's exit status into a traceback.

    The supervisor's own exit status still mirrors the workload's, so a perfwatch that started
    the run knows it; one that re-adopts it later finds no exit.json and shows `unknown`.
    """
    try:
        write_json_atomic(exit_file, record)
    except OSError as exc:
        with contextlib.suppress(OSError):
            print(f"perfwatch: cannot write {exit_file.name}: {exc.strerror or exc}", file=sys.stderr, flush=True)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans of the run (a daemon that double-forked and called setsid) reparent to this supervisor,
    not to init, so the whole tree stays findable below it (Linux prctl; False elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc: this module imports only the standard library)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def signal_tree(sig: int, *, escaped_only: bool) -> None:
    """Send `sig` to this run's descendants (only those that left the process group, if asked)."""
    me, group = os.getpid(), os.getpgrp()
    for pid in descendants(me):
        with contextlib.suppress(OSError):
            if not escaped_only or os.getpgid(pid) != group:
                os.kill(pid, sig)


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


def clear_cache(argv: list[str], timeout: float | None) -> dict[str, object]:
    """Run the cache-clear argv (never a shell); the record says how it went, `ok` and `reason`."""
    print(f"perfwatch: cache_clear_cmd: {shlex.join(argv)}", flush=True)
    started = time.time()
    info: dict[str, object] = {"argv": argv, "started_at": started, "timeout": timeout, "timed_out": False}
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        info.update(exit_code=127, signal=None, ended_at=time.time(), ok=False,
                    reason=f"cache_clear_cmd cannot start: {exc}; workload not started")
        return info
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # anything it left in the group is killed with the group when the run ends
        code = proc.wait()
        info["timed_out"] = True
    info.update(exit_code=code if code >= 0 else None, signal=signal_name(-code) if code < 0 else None,
                ended_at=time.time(), ok=code == 0 and not info["timed_out"])
    if info["timed_out"]:
        what = f"timed out after {timeout:g}s"
    else:
        what = f"exit {code}" if code >= 0 else f"killed by {info['signal']}"
    info["reason"] = None if info["ok"] else f"cache_clear_cmd failed: {what}; workload not started"
    print(f"perfwatch: cache_clear_cmd {what} in {time.time() - started:.2f}s", flush=True)
    return info


def _not_started(record: dict[str, object], exit_file: Path, received: list[int]) -> int:
    """The cache clear failed or the run was stopped during it: record why, start nothing."""
    clear = record["cache_clear"]
    assert isinstance(clear, dict)
    if received:  # stopped by the user (or perfwatch) before the workload started
        name = signal_name(received[0])
        record.update(exit_code=None, signal=name, ended_at=time.time(), workload_started=False)
        _record(exit_file, record)
        return 128 + received[0]
    # timeout(1)'s 124 for a timeout, 128+N for a signal, else the command's own status
    code = 124 if clear["timed_out"] else clear["exit_code"]
    if not isinstance(code, int):
        code = 128 + (signal_number(clear["signal"]) or 0)
    print(f"perfwatch: {clear['reason']}", file=sys.stderr, flush=True)
    record.update(exit_code=code, signal=None, ended_at=time.time(), workload_started=False)
    _record(exit_file, record)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfwatch.core.control.supervisor")
    parser.add_argument("--exit-file", required=True, type=Path)
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids for affinity")
    parser.add_argument("--mem-bytes", type=int, default=0)
    parser.add_argument("--cache-clear", default="", help="JSON argv list to run before the workload")
    parser.add_argument("--cache-clear-timeout", type=float, default=0.0, help="seconds; 0 = no limit")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command after --")
    received: list[int] = []

    def note(signum: int, _frame: object) -> None:
        received.append(signum)
        signal_tree(signum, escaped_only=True)  # the group got it from killpg; setsid()'d ones did not

    become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # a handler (not SIG_IGN): the workload gets default dispositions back at exec
        signal.signal(sig, note)
    started = time.time()
    record: dict[str, object] = {"started_at": started, "argv": cmd, "runner_pid": os.getpid()}
    try:
        record["memory_limit"] = apply_limits([int(c) for c in args.cpus.split(",") if c], args.mem_bytes)
        if args.cache_clear:
            record["cache_clear"] = clear = clear_cache(json.loads(args.cache_clear), args.cache_clear_timeout or None)
            if not clear["ok"] or received:
                return _not_started(record, args.exit_file, received)
        child = subprocess.Popen(cmd)
    except OSError as exc:
        print(f"perfwatch: cannot start {cmd[0]!r}: {exc}", file=sys.stderr, flush=True)
        record.update(exit_code=127, signal=None, ended_at=time.time(), error=str(exc))
        _record(args.exit_file, record)
        return 127
    record["child_pid"] = child.pid
    code = child.wait()
    signal_tree(signal.SIGKILL, escaped_only=False)  # the run is over: nothing it started outlives it
    record.update(
        exit_code=code if code >= 0 else None,
        signal=signal_name(-code) if code < 0 else None,
        signal_number=-code if code < 0 else None,
        ended_at=time.time(),
        signals_received=[signal_name(s) for s in received],
    )
    _record(args.exit_file, record)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
