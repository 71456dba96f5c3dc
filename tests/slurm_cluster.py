"""A real single-node Slurm (Debian's slurm-wlm + munge) in a temporary folder, for tests.

Everything lives under one folder: the munge key and socket, slurm.conf, state, spool, logs
and pid files; the daemons listen on free ports, so several test sessions on one machine do
not meet. Client commands find this cluster through `SLURM_CONF` (see `env()`).

Used by the `slurm` pytest fixture (tests/conftest.py) and by hand:

    python tests/slurm_cluster.py start /tmp/myslurm [NODES]  # prints: export SLURM_CONF=...
    python tests/slurm_cluster.py stop /tmp/myslurm

With NODES > 1 the cluster has that many compute nodes `n1`, `n2`, ... on this one host (one
slurmd each, `slurmd -N nI`, own port, spool, pid and log), each with all of the host's CPUs:
enough for real multi-node jobs (srun one task per node, torchrun across the allocation).
`reap` (used by the fixture) stops the cluster once a given process has ended, so a test
session killed before its teardown leaves no daemons behind.

Needs root (slurmd and munged run as root / the munge user) and the packages' binaries;
`unavailable()` says why not, for a clear skip.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CRED_EXPIRE = 10  # s; also how long a requeued job waits before it may start again (Slurm's default: 120)
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
ACCOUNTING_BINARIES = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb")
_SBIN = ("/usr/sbin", "/sbin")


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def unavailable() -> str | None:
    """Why a local Slurm cannot be started here, or None if it can."""
    if os.geteuid() != 0:
        return "a local Slurm needs root (slurmd, munged); not root"
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return f"Slurm/munge not installed (missing {', '.join(missing)}); apt-get install slurm-wlm munge"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    return None


def accounting_unavailable() -> str | None:
    """Why a local Slurm with accounting (slurmdbd on MariaDB) cannot be started here, or None."""
    why = unavailable()
    if why:
        return why
    missing = [b for b in ACCOUNTING_BINARIES if _which(b) is None]
    if missing:
        return f"Slurm accounting not installed (missing {', '.join(missing)}); apt-get install slurmdbd mariadb-server"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mem_mb() -> int:
    with open("/proc/meminfo") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
    return max(256, kb // 1024 - 512)


class SlurmCluster:
    """One controller + `nodes` compute nodes on this host; `start()`, then `stop()`."""

    def __init__(self, root: Path, nodes: int = 1, accounting: bool = False) -> None:
        self.root = Path(root).resolve()
        self.nodes = nodes
        self.accounting = accounting  # slurmdbd on a MariaDB of its own: sacct answers
        self.dbd_port = 0
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge-run" / "munge.socket"

    def env(self) -> dict[str, str]:
        """Environment for client commands (sbatch, squeue, ...) to reach this cluster."""
        path = os.environ.get("PATH", "")
        extra = [d for d in _SBIN if d not in path.split(os.pathsep)]
        return {"SLURM_CONF": str(self.conf), "PATH": os.pathsep.join([path, *extra]) if extra else path}

    def _run(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**os.environ, **self.env()}, text=True, capture_output=True,
                              timeout=30, check=False, **kw)  # type: ignore[call-overload]

    def _start_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        keydir, rundir = self.root / "munge", self.munge_socket.parent
        for folder, mode in ((keydir, 0o711), (rundir, 0o755)):  # munged insists on these
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, munge.pw_uid, munge.pw_gid)
            os.chmod(folder, mode)
        key = keydir / "munge.key"
        subprocess.run([_which("mungekey") or "mungekey", "-c", "-f", "-k", str(key)], check=True,
                       capture_output=True, timeout=30)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        os.chmod(key, 0o600)
        argv = [_which("munged") or "munged", f"--socket={self.munge_socket}", f"--key-file={key}",
                f"--pid-file={keydir / 'munged.pid'}", f"--log-file={keydir / 'munged.log'}",
                f"--seed-file={keydir / 'munged.seed'}"]
        done = subprocess.run(["runuser", "-u", "munge", "--", *argv], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"munged did not start: {done.stderr.strip()}")

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        r = self.root
        lines = {
            "ClusterName": "perfwatchtest", "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmctldPort": str(_free_port()), "SlurmdPort": str(_free_port()),
            "SlurmUser": "root", "SlurmdUser": "root",
            "AuthType": "auth/munge", "CredType": "cred/munge", "AuthInfo": f"socket={self.munge_socket},cred_expire={CRED_EXPIRE}",
            "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
            "StateSaveLocation": f"{r}/state", "SlurmdSpoolDir": f"{r}/spool",
            "SlurmctldPidFile": f"{r}/slurmctld.pid", "SlurmdPidFile": f"{r}/slurmd.pid",
            "SlurmctldLogFile": f"{r}/log/slurmctld.log", "SlurmdLogFile": f"{r}/log/slurmd.log",
            "JobCompType": "jobcomp/none", "AccountingStorageType": "accounting_storage/none",
            "JobAcctGatherType": "jobacct_gather/none", "MpiDefault": "none", "ReturnToService": "2",
            "SchedulerType": "sched/backfill", "InactiveLimit": "0", "KillWait": "5", "MinJobAge": "600",
            "MessageTimeout": "5",  # clients give up on an unreachable controller sooner (outage tests)
            # preemption by partition: a job in `high` preempts jobs in `low` (cancelled: PREEMPTED) and
            # `lowrq` (requeued); `debug`, the default, is never preempted
            "PreemptType": "preempt/partition_prio", "PreemptMode": "CANCEL",
        }
        if self.accounting:
            lines.update({"AccountingStorageType": "accounting_storage/slurmdbd", "AccountingStorageHost": "localhost",
                          "AccountingStoragePort": str(self.dbd_port),
                          "AccountingStoragePass": str(self.munge_socket)})  # how clients reach slurmdbd's munge
        cpus = os.cpu_count() or 1
        if self.nodes > 1:  # several slurmd on this host: %n (the node name) keeps their files apart
            lines.update(SlurmdSpoolDir=f"{r}/spool-%n", SlurmdPidFile=f"{r}/slurmd-%n.pid",
                         SlurmdLogFile=f"{r}/log/slurmd-%n.log")
            del lines["SlurmdPort"]
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        if self.nodes == 1:
            text += f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_mem_mb()} State=UNKNOWN\n"
        for name in self.node_names() if self.nodes > 1 else ():
            text += (f"NodeName={name} NodeHostname={self.node} NodeAddr=127.0.0.1 Port={_free_port()} "
                     f"CPUs={cpus} RealMemory={_mem_mb() // self.nodes} State=UNKNOWN\n")
        text += "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF\n"
        text += "PartitionName=low Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL\n"
        text += "PartitionName=lowrq Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE\n"
        text += "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF\n"
        self.conf.write_text(text)

    def _start_accounting(self, timeout: float = 30.0) -> None:
        """A throw-away MariaDB (an empty data folder, no grant tables, on 127.0.0.1 at a free port) and
        slurmdbd on it, answering at `dbd_port`; the cluster registered. About 2 s."""
        data, db = self.root / "mariadb", self.root / "mariadb-data"
        data.mkdir(parents=True, exist_ok=True)
        db.mkdir(parents=True, exist_ok=True)
        db_port = _free_port()
        argv = [_which("mariadbd") or "mariadbd", "--no-defaults", f"--datadir={db}", "--user=root",
                f"--port={db_port}", "--bind-address=127.0.0.1", f"--socket={data / 'mariadb.sock'}",
                f"--pid-file={data / 'mariadb.pid'}", f"--log-error={self.root / 'log' / 'mariadb.log'}",
                "--skip-grant-tables", "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=4M", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
                "--innodb-flush-method=nosync"]
        _detached(argv)
        dbd = {
            "AuthType": "auth/munge", "AuthInfo": f"socket={self.munge_socket}", "DbdHost": "localhost",
            "DbdAddr": "127.0.0.1", "DbdPort": str(self.dbd_port), "SlurmUser": "root",
            "StorageType": "accounting_storage/mysql", "StorageHost": "127.0.0.1", "StoragePort": str(db_port),
            "StorageUser": "slurm", "StoragePass": "unused", "StorageLoc": "slurm_acct_db",
            "PidFile": f"{self.root}/slurmdbd.pid", "LogFile": f"{self.root}/log/slurmdbd.log",
        }
        conf = self.root / "slurmdbd.conf"  # slurmdbd reads it beside $SLURM_CONF; it must be 0600
        conf.write_text("".join(f"{k}={v}\n" for k, v in dbd.items()))
        os.chmod(conf, 0o600)
        deadline = time.monotonic() + timeout
        while not self._port_open(db_port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"MariaDB did not start (log in {self.root}/log/mariadb.log)")
            time.sleep(0.1)
        done = self._run([_which("slurmdbd") or "slurmdbd"])
        if done.returncode != 0:
            raise RuntimeError(f"slurmdbd did not start: {done.stderr.strip()} (logs in {self.root}/log)")
        while True:  # the first start creates the database's tables; then the cluster can be added
            added = self._run(["sacctmgr", "-i", "add", "cluster", "perfwatchtest"])
            if added.returncode == 0 or "already exists" in added.stdout + added.stderr:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurmdbd does not answer: {added.stderr.strip()} (logs in {self.root}/log)")
            time.sleep(0.2)

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket() as s:
            s.settimeout(1.0)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def node_names(self) -> list[str]:
        return [self.node] if self.nodes == 1 else [f"n{i}" for i in range(1, self.nodes + 1)]

    def start(self, timeout: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; return once every node is idle."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # munged needs every folder above its socket searchable
        self._start_munge()
        if self.accounting:
            self.dbd_port = _free_port()
        self._write_conf()
        if self.accounting:
            self._start_accounting()
        slurmds = [["slurmd"]] if self.nodes == 1 else [["slurmd", "-N", n] for n in self.node_names()]
        for daemon in (["slurmctld", "-i"], *slurmds):
            done = self._run([_which(daemon[0]) or daemon[0], *daemon[1:]])
            if done.returncode != 0:
                raise RuntimeError(f"{daemon[0]} did not start: {done.stderr.strip()} (logs in {self.root}/log)")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self._run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%T"]).stdout.strip()  # each node once
            if state and set(state.split()) <= {"idle", "mixed", "allocated"} and len(state.split()) == self.nodes:
                return
            time.sleep(0.3)
        raise RuntimeError(f"node never became idle (last sinfo: {state!r}; logs in {self.root}/log)")

    def stop_controller(self, wait: float = 10.0) -> None:
        """Stop slurmctld alone (an outage: jobs keep running on the nodes, clients cannot reach it);
        SIGKILL after `wait` s."""
        _terminate([self.root / "slurmctld.pid"], wait=wait)

    def start_controller(self, timeout: float = 30.0, forget: bool = False) -> None:
        """Start slurmctld again on the saved state; return once it answers. `forget`: with its job
        state cleared (`slurmctld -c`): it no longer knows any job, as after MinJobAge (sacct still does)."""
        done = self._run([_which("slurmctld") or "slurmctld", "-i", *(["-c"] if forget else [])])
        if done.returncode != 0:
            raise RuntimeError(f"slurmctld did not start: {done.stderr.strip()} (logs in {self.root}/log)")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._run(["scontrol", "ping"]).returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"slurmctld does not answer (logs in {self.root}/log)")

    def stop(self) -> None:
        """Cancel every job, then stop slurmd, slurmctld and munged (each by its own pid file), and
        any slurmstepd of this cluster left over."""
        if self.conf.exists():
            self._run(["scancel", "--full", "--signal=KILL", "--user=root"])
            self._run(["scancel", "--user=root"])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self._run(["squeue", "-h", "-o", "%i"]).stdout.strip():
                time.sleep(0.2)
        # every job is gone: a slurmstepd still there is a step of a job whose node was set DOWN, still
        # retrying its completion message (for ever once the controller has stopped), and slurmd waits
        # for it before it exits: end this cluster's own, before and after the daemons
        self._kill_stepds()
        slurmds = ["slurmd.pid"] if self.nodes == 1 else [f"slurmd-{n}.pid" for n in self.node_names()]
        # with accounting, slurmctld takes ~6 s to stop (it flushes to slurmdbd): a throw-away cluster
        # is not kept waiting for that
        _terminate([self.root / f for f in (*slurmds, "slurmctld.pid", "munge/munged.pid", "slurmdbd.pid",
                                            "mariadb/mariadb.pid")], wait=2.0 if self.accounting else 10.0)
        self._kill_stepds()

    def _kill_stepds(self) -> None:
        for pid in self.stepds():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def stepds(self) -> list[int]:
        """The slurmstepd processes of this cluster: their environment names this cluster's slurm.conf."""
        mine = f"SLURM_CONF={self.conf}".encode()
        out = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "comm").read_text().strip() == "slurmstepd" \
                        and mine in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
            except OSError:
                continue
        return out

    def reap_after(self, pid: int) -> subprocess.Popen[bytes]:
        """A detached watcher that stops this cluster (and removes its folder) once `pid` has ended."""
        return subprocess.Popen([sys.executable, __file__, "reap", str(self.root), str(self.nodes), str(pid)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)


def _detached(argv: list[str]) -> None:
    """Start a daemon that stays in the foreground as nobody's child (no zombie left in this process)."""
    spawn = "import subprocess, sys; subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, " \
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)"
    subprocess.run([sys.executable, "-c", spawn, *argv], check=True, timeout=30)


def _reap(root: Path, nodes: int, pid: int) -> int:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(1.0)
    if root.exists():
        SlurmCluster(root, nodes, accounting=(root / "slurmdbd.conf").exists()).stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _terminate(pidfiles: list[Path], wait: float = 10.0) -> None:
    """SIGTERM every daemon at once (each takes ~2 s to exit), wait for all, SIGKILL what is left."""
    pids = []
    for pidfile in pidfiles:
        try:
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + wait
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "reap":
        return _reap(Path(argv[1]), int(argv[2]), int(argv[3]))
    if len(argv) not in (2, 3) or argv[0] not in ("start", "stop") or not all(a.isdigit() for a in argv[2:]):
        print("usage: python tests/slurm_cluster.py start|stop FOLDER [NODES]", file=sys.stderr)
        return 2
    nodes = int(argv[2]) if len(argv) == 3 else 1
    if argv[0] == "stop" and nodes == 1 and any(Path(argv[1]).glob("slurmd-n*.pid")):
        nodes = len(list(Path(argv[1]).glob("slurmd-n*.pid")))
    cluster = SlurmCluster(Path(argv[1]), nodes, accounting=(Path(argv[1]) / "slurmdbd.conf").exists())
    if argv[0] == "stop":
        cluster.stop()
        return 0
    why = unavailable()
    if why:
        print(f"cannot start Slurm: {why}", file=sys.stderr)
        return 1
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
