"""Start one run as a real process and signal it safely.

Every run is `python -m perfwatch.core.control.supervisor --exit-file ... -- ARGV` started with
`start_new_session=True`: the supervisor leads a new session and process group that
holds the workload and everything it spawns (torchrun's workers included), with stdout
and stderr going to `output.log` (a file, never a pipe to perfwatch, so perfwatch dying
cannot block or kill a run). Signals go to the whole group with `killpg`, and only after
checking that the group leader is still the process we started (pid *and* create time),
so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from perfwatch.core.control.supervisor import signal_name, signal_number
from perfwatch.core.ingest.discover import open_regular
from perfwatch.core.layout import (
    EXIT_FILE,
    MLLOG_FILE,
    OUTPUT_FILE,
    RUN_FILES,
    RUN_LOGS,
    archived_name,
    node_telemetry_files,
)

_SAME_START = 0.05  # seconds: psutil create_time resolution is one clock tick (10 ms)


def detect_gpus() -> tuple[int, ...]:
    """NVML indices of the GPUs perfwatch may hand out; none when NVML or a driver is missing.

    All GPUs NVML sees, limited by a CUDA_VISIBLE_DEVICES already set in perfwatch's own
    environment (see `visible_gpus`). NVML numbers GPUs in PCI bus order, which is why every
    run also gets CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML means no GPUs to hand out
        return ()
    try:
        uuids = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            try:
                raw = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                uuids.append(raw.decode() if isinstance(raw, bytes) else str(raw))
            except Exception:  # noqa: BLE001 - an unusable GPU keeps its index, loses its UUID
                uuids.append("")
    except Exception:  # noqa: BLE001
        return ()
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return visible_gpus(uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_gpus(uuids: Sequence[str], cuda_visible: str | None) -> tuple[int, ...]:
    """The NVML indices (PCI order) that a CUDA_VISIBLE_DEVICES value leaves visible.

    `uuids[i]` is NVML GPU i's UUID. As CUDA reads the variable: unset = all; empty = none;
    comma-separated indices or (prefixes of) `GPU-...` UUIDs; the list ends at the first entry
    that names no GPU (CUDA ignores everything after an invalid one). MIG instances are not
    whole GPUs perfwatch can hand out, so a `MIG-` entry ends the list too.
    """
    if cuda_visible is None:
        return tuple(range(len(uuids)))
    out: list[int] = []
    for token in cuda_visible.split(","):
        token = token.strip()
        index: int | None = None
        if token.isdigit():
            index = int(token) if int(token) < len(uuids) else None
        elif token.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids) if u and u.startswith(token)]
            index = hits[0] if len(hits) == 1 else None
        if index is None or index in out:
            break
        out.append(index)
    return tuple(out)


def cpu_share(slot: int, slots: int) -> tuple[list[int], int]:
    """Mila's per-device split: slot `slot` of `slots` gets NPROC/N of our CPUs and MEM/N memory."""
    cpus = sorted(os.sched_getaffinity(0))
    per = max(1, len(cpus) // max(1, slots))
    mine = cpus[(slot * per) % len(cpus):][:per] or cpus[:per]
    return mine, psutil.virtual_memory().total // max(1, slots)


def same_process(pid: int, create_time: float) -> bool:
    """True if `pid` is still the process that was started at `create_time` (never pid 0 or 1)."""
    if not isinstance(pid, int) or pid <= 1:
        return False
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < _SAME_START and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def group_alive(pgid: int) -> bool:
    """Any process left in the group? (Used to make sure stop/kill leaves nothing behind.)"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_pgid(p) == pgid for p in psutil.process_iter(["pid"]) if p.info["pid"] != pgid) or \
        _leader_running(pgid)


def _pgid(proc: psutil.Process) -> int | None:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return os.getpgid(proc.pid)
    except (OSError, psutil.Error):
        return None


def _leader_running(pgid: int) -> bool:
    try:
        return psutil.Process(pgid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_exit(code: int) -> str:
    """`exit 3`, `killed by SIGKILL`: how a run's process ended, for humans."""
    if code >= 0:
        return f"exit {code}"
    return f"killed by {signal_name(-code)}"


def activity(run_dir: Path) -> tuple[float, ...]:
    """Size and mtime of a run's mllog.txt and output.log: changes whenever the run writes."""
    out: list[float] = []
    for name in RUN_LOGS:
        try:
            st = os.stat(run_dir / name)
            out += [st.st_size, st.st_mtime]
        except OSError:
            out += [-1, -1]
    return tuple(out)


def archive_attempt(run_dir: Path, attempt: int) -> list[str]:
    """Keep an earlier attempt's files and folders as `.attempt-N.<name>` (hidden: not read as a new run)."""
    kept = []
    for name in (*RUN_FILES, *(p.name for p in node_telemetry_files(run_dir))):  # and the Slurm nodes' telemetry
        src = run_dir / name
        if src.exists():
            dst = run_dir / archived_name(attempt, name)
            os.replace(src, dst)
            kept.append(dst.name)
    return kept


def read_exit(run_dir: Path) -> dict | None:
    """The supervisor's exit record, or None if it never wrote one (it was SIGKILLed)."""
    try:
        with open_regular(run_dir / EXIT_FILE) as fh:  # never a FIFO or a device
            data = json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class Proc:
    """A run's process group: started here (`popen` set) or re-adopted from perfwatch.json."""

    pid: int
    create_time: float
    run_dir: Path
    popen: subprocess.Popen[bytes] | None = None
    returncode: int | None = field(default=None)
    exit_record: dict | None = None  # exit.json as read when the run ended
    unknown: bool = False  # ended, but neither waitpid nor exit.json can say how
    # every process seen below the supervisor (pid -> create time), kept while the run lives: a
    # grandchild that setsid()s and outlives its parents is still found and signalled
    known: dict[int, float] = field(default_factory=dict)

    @property
    def pgid(self) -> int:
        return self.pid  # the supervisor leads its own session: pgid == pid

    def is_ours(self) -> bool:
        return same_process(self.pid, self.create_time)

    def _leader_is_ours(self) -> bool:
        return self.is_ours() or (self.popen is not None and self.popen.poll() is None)

    def track(self) -> bool:
        """Record the run's current descendants (call while it lives); True if the set changed.

        Only below a leader verified as this run's supervisor (pid and create time): the tree below a
        reused or forged pid (pid 1!) is never walked, so it can never be signalled.
        """
        if self.pid <= 1 or not self._leader_is_ours():
            return False
        before = set(self.known)
        try:
            for p in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.known.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass
        self.known = {pid: t for pid, t in self.known.items() if same_process(pid, t)}
        return set(self.known) != before

    def escaped(self) -> list[psutil.Process]:
        """The run's processes outside its process group (setsid/setpgid), current and recorded.

        A recorded process is signalled only if it still is what was recorded (pid + create time)
        and it either is below the verified supervisor right now or carries this run's environment
        (PERFWATCH_MLLOG); never pid 0/1, perfwatch itself or one of its ancestors.
        """
        self.track()
        below: set[int] = set()
        if self.pid > 1 and self._leader_is_ours():
            with contextlib.suppress(psutil.Error):
                below = {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        protected = {0, 1, os.getpid(), *(p.pid for p in _ancestors())}
        out = []
        for pid, created in self.known.items():
            if pid in protected:
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(pid) != self.pgid and same_process(pid, created) and \
                        (pid in below or runs_for(pid, self.run_dir)):
                    out.append(psutil.Process(pid))
        return out

    def signal_escaped(self, sig: int, procs: list[psutil.Process] | None = None) -> None:
        for p in self.escaped() if procs is None else procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)  # psutil checks the pid still names the same process

    def signal(self, sig: int) -> bool:
        """Send `sig` to the group and to the run's processes that left it, if the leader is still ours.

        False if the leader is gone or its pid was reused (then nothing is signalled).
        """
        if self.pid <= 1 or not self._leader_is_ours():
            return False  # killpg(0) would hit perfwatch's own group, killpg(1) init's
        escaped = self.escaped()  # before the group dies: a SIGKILLed supervisor no longer holds them
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        self.signal_escaped(sig, escaped)
        return True

    def poll(self) -> int | None:
        """Exit status once the run ended: 0.., or -SIG when killed by a signal; else None."""
        if self.returncode is not None:
            return self.returncode
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return None
        elif self.is_ours():
            return None
        else:
            code = None
        record = read_exit(self.run_dir)
        if record is not None and record.get("runner_pid") in (None, self.pid):
            self.exit_record = record
            sig = signal_number(record.get("signal")) if record.get("signal") else None
            if sig is not None:
                code = -sig
            elif record.get("exit_code") is not None:
                code = int(record["exit_code"])
        if code is None:  # re-adopted, gone, no exit.json (not written: full disk; or the supervisor was killed)
            self.unknown = True
            code = -int(signal.SIGKILL)
        if code > 128 and record is None:
            code = -(code - 128)
        self.returncode = code
        return code

    def status(self) -> str:
        """psutil's status of the workload side ('running', 'sleeping', 'stopped', ...)."""
        try:
            return str(psutil.Process(self.pid).status())
        except (psutil.Error, ValueError):
            return "gone"

    def group_pids(self) -> list[int]:
        out = []
        for p in psutil.process_iter(["pid"]):
            if _pgid(p) == self.pgid:
                out.append(p.info["pid"])
        return out


def start(
    argv: list[str] | tuple[str, ...],
    run_dir: Path,
    *,
    env: dict[str, str],
    cwd: str | Path,
    cpus: list[int] | None = None,
    mem_bytes: int | None = None,
    cache_clear: list[str] | tuple[str, ...] | None = None,
    cache_clear_timeout: float | None = None,
) -> Proc:
    """Start `argv` under the supervisor in a new session; output appended to output.log.

    `cache_clear` (an argv list) is run by the supervisor first; the workload starts only if it
    exits 0 within `cache_clear_timeout` seconds (None: no limit).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / EXIT_FILE).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "perfwatch.core.control.supervisor", "--exit-file", str(run_dir / EXIT_FILE)]
    if cpus:
        cmd += ["--cpus", ",".join(map(str, cpus))]
    if mem_bytes:
        cmd += ["--mem-bytes", str(mem_bytes)]
    if cache_clear:
        cmd += ["--cache-clear", json.dumps(list(cache_clear)), "--cache-clear-timeout", str(cache_clear_timeout or 0)]
    cmd += ["--", *argv]
    full_env = {**os.environ, **env}
    # O_NONBLOCK: a FIFO planted as output.log fails at once (ENXIO) instead of blocking perfwatch
    fd = os.open(run_dir / OUTPUT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{run_dir / OUTPUT_FILE} is not a regular file")
    with os.fdopen(fd, "ab") as out:
        popen = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=str(cwd),
            env=full_env, start_new_session=True, close_fds=True,
        )
    try:
        created = psutil.Process(popen.pid).create_time()
    except psutil.Error:
        created = time.time()
    return Proc(popen.pid, created, run_dir, popen)


def find_supervisor(run_dir: Path) -> tuple[int, float] | None:
    """The live supervisor started for `run_dir` (found by its --exit-file argument): (pid, create time)."""
    target = str(run_dir / EXIT_FILE)
    for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmd = p.info.get("cmdline") or []
        if "perfwatch.core.control.supervisor" in cmd and target in cmd:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    return p.info["pid"], p.info["create_time"]
            except psutil.Error:
                continue
    return None


def _ancestors() -> list[psutil.Process]:
    try:
        return psutil.Process().parents()
    except psutil.Error:
        return []


def runs_for(pid: int, run_dir: Path) -> bool:
    """Is `pid` a perfwatch supervisor started for `run_dir`, or a process of that run (its environment
    names the run's mllog)? A registry's pids are not signed: never adopt or signal any other process."""
    try:
        proc = psutil.Process(pid)
        cmd = proc.cmdline()
        if "perfwatch.core.control.supervisor" in cmd and str(run_dir / EXIT_FILE) in cmd:
            return True
        return proc.environ().get("PERFWATCH_MLLOG") == str(run_dir / MLLOG_FILE)
    except (psutil.Error, OSError, ValueError):
        return False


def adopt(pid: int, create_time: float, run_dir: Path) -> Proc:
    """A handle on a run some earlier perfwatch started; `poll()` reads exit.json."""
    return Proc(pid, create_time, run_dir, None)
