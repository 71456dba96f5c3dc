"""Is this perfwatch.json one this user wrote on this host? Only then may `attach` run its plan.

A LOGDIR can come from anywhere (a colleague's tarball, a shared folder), and its
`perfwatch.json` lists argv lists that taking the campaign over would start. So the
launching perfwatch *signs* the plan: `trust` in perfwatch.json records the user id, the
host and the plan's SHA-256, and an HMAC of those three made with a key that only this user
can read (`$XDG_STATE_HOME/perfwatch/trust.key`, mode 0600, made on first use; a key that other
users can read or write is refused, with the fix, never used). Anyone can
copy the uid, the host name and recompute a plain hash; nobody without the key can make a
matching HMAC. A registry that fails any check is only watched, unless the user explicitly
confirms the plan it would run (`attach --take-over`), after which this user signs it.

The plan is everything that decides what runs and how: each run's id, argv, environment,
working directory, cache clear, devices, limits, launcher, and the campaign's concurrency.
Process facts (state, pid, exit codes) change as the campaign goes and are not signed;
a planted pid is harmless because adoption also requires the create time to match.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

KEY_BYTES = 32
# run-record keys that decide what is started and how (RunSpec's fields as perfwatch.json names them)
PLAN_RUN_KEYS = (
    "run_id", "job", "group", "benchmark", "index", "seed", "argv", "env", "cwd", "gpus_per_run", "threads",
    "precision", "timeout", "stall_after", "grace", "target", "exit_at_target", "isolate", "flops_per_sample",
    "launcher", "grid", "cache_clear_cmd", "cache_clear_timeout",
)
# signed only when set, so that plans written before the key existed keep their digest; `mlperf` can
# give a run its target (the benchmark's), and with it when `exit_at_target` stops it
PLAN_RUN_KEYS_IF_SET = ("mlperf",)
PLAN_TOP_KEYS = ("max_parallel", "gpus", "backend")  # backend: where and how runs execute (sbatch options)


def key_path() -> Path:
    """Where this user's signing key lives (outside any LOGDIR, readable only by the user)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "perfwatch" / "trust.key"


class UnsafeKey(RuntimeError):
    """The signing key can be read or written by other users: a copy of it could sign any plan."""


def _unsafe(path: Path, st: os.stat_result) -> str | None:
    if st.st_uid != os.getuid():
        return f"your perfwatch key {path} belongs to user id {st.st_uid}, not to you ({os.getuid()})"
    if st.st_mode & 0o077:
        return (f"your perfwatch key {path} can be read or written by other users (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): a plan signed with a copy of it proves nothing; "
                f"fix: chmod 600 {path} (or delete it: a new key is made, and your LOGDIRs ask once to be "
                "taken over again)")
    return None


def _key(create: bool) -> bytes | None:
    """This user's key; None when there is none (and `create` is false). UnsafeKey when others can read
    or write it: it is never used to verify, and never silently replaced either (the user decides)."""
    path = key_path()
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            why = _unsafe(path, st)
            if why is not None:
                raise UnsafeKey(why)
            key = fh.read(KEY_BYTES + 1)
        if len(key) == KEY_BYTES:
            return key
        if not create:
            return None
    except OSError:
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = os.urandom(KEY_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return key


def plan(data: dict[str, Any]) -> dict[str, Any]:
    """The signed part of a registry: what would be started, and how."""
    runs = data.get("runs")
    if not isinstance(runs, list):
        runs = []
    return {
        **{k: data.get(k) for k in PLAN_TOP_KEYS},
        "runs": [{**{k: r.get(k) for k in PLAN_RUN_KEYS}, **{k: r[k] for k in PLAN_RUN_KEYS_IF_SET
                                                               if r.get(k) is not None}}
                 if isinstance(r, dict) else r for r in runs],
    }


def plan_digest(data: dict[str, Any]) -> str:
    """SHA-256 of the plan in canonical JSON; its first 16 hex digits confirm a take-over."""
    text = json.dumps(plan(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def short_digest(data: dict[str, Any]) -> str:
    return plan_digest(data)[:16]


def _mac(key: bytes, uid: int, host: str, digest: str) -> str:
    return hmac.new(key, f"{uid}\0{host}\0{digest}".encode(), hashlib.sha256).hexdigest()


def sign(data: dict[str, Any]) -> None:
    """Mark `data` as this user's plan on this host (call when creating or confirming it)."""
    key = _key(create=True)
    assert key is not None
    uid, host, digest = os.getuid(), socket.gethostname(), plan_digest(data)
    data["trust"] = {"uid": uid, "host": host, "plan_sha256": digest, "hmac": _mac(key, uid, host, digest)}


def untrusted_reason(data: dict[str, Any]) -> str | None:
    """None if this user signed this exact plan on this host; else why not, in words."""
    mark = data.get("trust")
    if not isinstance(mark, dict):
        return "it has no owner record (not written by a perfwatch launch of yours)"
    uid, host = mark.get("uid"), mark.get("host")
    if uid != os.getuid():
        return f"it was launched by user id {uid}, not by you ({os.getuid()})"
    if host != socket.gethostname():
        return f"it was launched on host {host!r}, not on this host ({socket.gethostname()!r})"
    digest = plan_digest(data)
    if mark.get("plan_sha256") != digest:
        return "its plan (commands, environment, folders) was changed after it was launched"
    try:
        key = _key(create=False)
    except UnsafeKey as exc:
        return str(exc)
    if key is None or not hmac.compare_digest(str(mark.get("hmac", "")), _mac(key, os.getuid(), host, digest)):
        return "its owner signature does not match your perfwatch key (launched by another account or copy)"
    return None
