"""LOGDIR/perfwatch.json: the campaign's resolved plan and every run's process facts.

Written atomically (temp file in the same folder, fsync, rename), so a reader (an
`attach`, a report) always sees a whole file even if perfwatch is SIGKILLed while
writing. Everything needed to re-adopt or continue a campaign is in here: a scheduler
can be rebuilt from this file alone.

Ownership: the process holding the `flock` on `LOGDIR/.scheduler.lock` is the only
writer. The kernel drops the lock when that process dies, which is how `attach` knows
it may take the campaign over.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from perfwatch.core.control import trust
from perfwatch.core.control.campaign import Campaign, Launcher, RunSpec
from perfwatch.core.control.paths import run_id_problem
from perfwatch.core.layout import LOCK_FILE, REGISTRY_FILE, write_json_atomic
from perfwatch.core.mlperf.targets import Target

FORMAT = 1


def host_facts() -> dict[str, Any]:
    """What the numbers were measured on (hostname, CPU, memory, Python, torch)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(), "cpu_model": cpu, "cores": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False), "affinity": sorted(os.sched_getaffinity(0)),
        "memory_bytes": psutil.virtual_memory().total, "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    try:
        from importlib.metadata import version

        facts["torch"] = version("torch")
    except Exception:  # noqa: BLE001 - torch is optional
        facts["torch"] = None
    return facts


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    data = asdict(spec)
    data["argv"] = list(spec.argv)
    data["cache_clear_cmd"] = list(spec.cache_clear_cmd) if spec.cache_clear_cmd else None
    data["target"] = asdict(spec.target) if spec.target else None
    data["gpus_per_run"] = data.pop("devices")
    return data


def spec_from_dict(data: dict[str, Any]) -> RunSpec:
    fields = {k: v for k, v in data.items() if k in RunSpec.__dataclass_fields__}
    fields["devices"] = int(data.get("gpus_per_run", 0))
    fields["argv"] = tuple(data["argv"])
    fields["target"] = Target(**data["target"]) if data.get("target") else None
    fields["launcher"] = Launcher(**(data.get("launcher") or {}))
    fields["env"] = dict(data.get("env") or {})
    fields["grid"] = dict(data.get("grid") or {})
    fields["cache_clear_cmd"] = tuple(data["cache_clear_cmd"]) if data.get("cache_clear_cmd") else None
    return RunSpec(**fields)


def new_registry(campaign: Campaign, logdir: Path) -> dict[str, Any]:
    """The plan of a new campaign, signed as this user's on this host (see `trust`)."""
    data = {
        "format": FORMAT, "name": campaign.name, "file": str(Path(campaign.file).resolve()),
        "description": campaign.description, "logdir": str(logdir.resolve()), "created_at": time.time(),
        "config": campaign.config, "system": campaign.system, "baseline": campaign.baseline,
        "max_parallel": campaign.max_parallel, "gpus": list(campaign.gpus) if campaign.gpus is not None else None,
        "host": host_facts(), "scheduler": None,
        "runs": [{**spec_to_dict(s), "state": "queued", "attempt": 1} for s in campaign.runs],
    }
    trust.sign(data)
    return data


def write(logdir: Path, data: dict[str, Any]) -> None:
    data["updated_at"] = time.time()
    write_json_atomic(logdir / REGISTRY_FILE, data)


def read(logdir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(logdir) / REGISTRY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("runs"), list) else None


class RegistryError(Exception):
    """perfwatch.json exists but cannot be used: unreadable, truncated, or with unsafe content."""


def load(logdir: Path) -> dict[str, Any] | None:
    """perfwatch.json checked for use by a scheduler: None if there is none; RegistryError if it is
    unreadable (truncated, not JSON) or names something unsafe (a run folder outside LOGDIR, an
    argv that is not a list of strings, NUL bytes)."""
    path = Path(logdir) / REGISTRY_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RegistryError(f"{path}: unreadable: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RegistryError(f"{path}: unreadable (truncated or not JSON: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise RegistryError(f"{path}: unreadable: not a perfwatch registry (no runs list)")
    problems = content_problems(data)
    if problems:
        raise RegistryError(f"{path}: refused: " + "; ".join(problems[:5]))
    return data


def _strings(value: object, what: str, out: list[str], *, allow_empty: bool = False) -> None:
    if not isinstance(value, list) or (not value and not allow_empty) or \
            not all(isinstance(v, str) and "\0" not in v for v in value):
        out.append(f"{what} is not a list of strings without NUL bytes")


def content_problems(data: dict[str, Any]) -> list[str]:
    """What in a registry a scheduler must not act on (run ids, argv, env, cwd)."""
    out: list[str] = []
    seen: set[str] = set()
    for i, rec in enumerate(data["runs"]):
        if not isinstance(rec, dict):
            out.append(f"runs[{i}] is not a mapping")
            continue
        rid = rec.get("run_id")
        problem = run_id_problem(rid)
        if problem:
            out.append(f"runs[{i}]: {problem}")
            continue
        assert isinstance(rid, str)
        if rid in seen:
            out.append(f"runs[{i}]: run id {rid!r} appears twice")
        seen.add(rid)
        _strings(rec.get("argv"), f"runs[{i}].argv", out)
        if rec.get("cache_clear_cmd") is not None:
            _strings(rec.get("cache_clear_cmd"), f"runs[{i}].cache_clear_cmd", out)
        env = rec.get("env") or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
                for k, v in env.items()):
            out.append(f"runs[{i}].env is not a mapping of names (no '=', no NUL) to strings")
        if not isinstance(rec.get("cwd"), str) or "\0" in rec["cwd"]:
            out.append(f"runs[{i}].cwd is not a folder name")
    return out


def try_lock(logdir: Path) -> int | None:
    """Become the campaign's owner: an open fd holding the lock, or None if someone else has it."""
    try:
        fd = os.open(logdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None  # a read-only LOGDIR (someone else's): watch it, never own it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def owner_alive(logdir: Path) -> bool:
    """Is some process holding the scheduler lock right now?"""
    fd = try_lock(logdir)
    if fd is None:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return False
