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

from perfwatch.core.control.campaign import Campaign, Launcher, RunSpec
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
    return {
        "format": FORMAT, "name": campaign.name, "file": str(Path(campaign.file).resolve()),
        "description": campaign.description, "logdir": str(logdir.resolve()), "created_at": time.time(),
        "config": campaign.config, "system": campaign.system, "baseline": campaign.baseline,
        "max_parallel": campaign.max_parallel, "gpus": list(campaign.gpus) if campaign.gpus is not None else None,
        "host": host_facts(), "scheduler": None,
        "runs": [{**spec_to_dict(s), "state": "queued", "attempt": 1} for s in campaign.runs],
    }


def write(logdir: Path, data: dict[str, Any]) -> None:
    data["updated_at"] = time.time()
    write_json_atomic(logdir / REGISTRY_FILE, data)


def read(logdir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(logdir) / REGISTRY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("runs"), list) else None


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
