"""The backend keys of a campaign's `scheduler:` block, validated on YAML nodes (file:line: field).

    scheduler: {backend: slurm, partition: gpu, account: mlperf, time_limit: 2h, qos: normal,
                sbatch_args: [--exclusive], container_image: nvcr.io#nvidia/pytorch:24.04-py3,
                container_mounts: [/data:/data], poll_interval: 10s}
"""

from __future__ import annotations

import re

from perfwatch.core.control.backends import BACKENDS, BackendConfig
from perfwatch.core.control.yaml_nodes import CampaignError, LocatedNode

BACKEND_KEYS = ("backend", "partition", "account", "time_limit", "qos", "sbatch_args", "container_image",
                "container_mounts", "poll_interval")
MIN_POLL = 1.0  # s: the fastest batched status query a campaign may ask of a shared controller
SLURM_ONLY = BACKEND_KEYS[1:]
# Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_SLURM_TIME = re.compile(r"^(\d+-\d+(:\d+(:\d+)?)?|\d+(:\d+(:\d+)?)?|UNLIMITED|INFINITE)$", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,-]*$")
_MOUNT = re.compile(r"^[^,\s]+$")


def _name(y: LocatedNode) -> str:
    text = y.string()
    if not _NAME.match(text):
        raise y.error(f"expected a Slurm name (letters, digits, _ . , -), got {text!r}")
    return text


def _time_limit(y: LocatedNode) -> str:
    """Slurm's own time format, or perfwatch's durations (90m, 2h) converted to whole minutes."""
    text = y.text() or ""
    if _SLURM_TIME.match(text):
        return text
    try:
        seconds = y.duration()
    except CampaignError:
        seconds = None
    if seconds is None:
        raise y.error(f"expected a time limit like 2h, 90m or Slurm's 1-00:00:00, got {text!r}")
    return str(max(1, -(-int(seconds) // 60)))


def backend_config(sm: dict[str, LocatedNode], override: str | None = None) -> BackendConfig:
    """The backend part of a validated `scheduler:` mapping; `override` is `launch --backend`."""
    backend = "local"
    if "backend" in sm:
        backend = sm["backend"].string()
        if backend not in BACKENDS:
            raise sm["backend"].error(f"expected one of {', '.join(BACKENDS)}, got {backend!r}")
    backend = override or backend
    if backend != "slurm":
        extra = [k for k in SLURM_ONLY if k in sm]
        if extra and override is None:
            raise sm[extra[0]].error("only applies to backend: slurm (add `backend: slurm`)")
        return BackendConfig(backend=backend)
    args: list[str] = []
    if "sbatch_args" in sm:
        for item in sm["sbatch_args"].seq():
            text = item.string()
            if not text.startswith("-"):
                raise item.error(f"sbatch arguments are options starting with - (got {text!r}); one list item each")
            args.append(text)
    mounts: list[str] = []
    if "container_mounts" in sm:
        node = sm["container_mounts"]
        items = node.seq() if node.shape == "list" else [node]
        for item in items:
            text = item.string()
            if not _MOUNT.match(text):
                raise item.error(f"expected SRC[:DST[:FLAGS]] without commas or spaces, got {text!r}")
            mounts.append(text)
    poll = None
    if "poll_interval" in sm:
        poll = sm["poll_interval"].duration()
        if poll is None or poll < MIN_POLL:
            raise sm["poll_interval"].error(f"expected a duration of at least {MIN_POLL:g}s (like 10s or 1m)")
    image = sm["container_image"].string() if "container_image" in sm else None
    if image is not None and not image.strip():
        raise sm["container_image"].error("empty container image")
    return BackendConfig(
        backend="slurm",
        partition=_name(sm["partition"]) if "partition" in sm else None,
        account=_name(sm["account"]) if "account" in sm else None,
        time_limit=_time_limit(sm["time_limit"]) if "time_limit" in sm else None,
        qos=_name(sm["qos"]) if "qos" in sm else None,
        sbatch_args=tuple(args), container_image=image, container_mounts=tuple(mounts), poll_interval=poll,
    )
