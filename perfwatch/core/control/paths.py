"""Paths taken from a registry or a log stay inside the folder they belong to.

A `run_id` in perfwatch.json names the run's folder below LOGDIR, where perfwatch writes
`output.log` and the supervisor writes `exit.json`. A hostile registry (`../escaped/x`,
`/etc/x`, a run folder that is a symlink to somewhere else) must never make perfwatch
write, or start a run, outside LOGDIR: every run folder goes through `run_folder`, which
checks both the name and where it resolves to (symlinks followed) at the moment it is used.
"""

from __future__ import annotations

import re
from pathlib import Path

from perfwatch.core.layout import run_dir

MAX_COMPONENT = 255
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class UnsafePath(ValueError):
    """A path from a registry or a log that would leave its folder."""


def run_id_problem(run_id: object) -> str | None:
    """Why `run_id` cannot name a run folder below LOGDIR, or None if it can."""
    if not isinstance(run_id, str) or not run_id:
        return f"run id {run_id!r} is not a non-empty string"
    parts = run_id.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return f"run id {run_id!r} has an empty, '.' or '..' path component"
        if len(part) > MAX_COMPONENT or not _COMPONENT.fullmatch(part):
            return (f"run id {run_id!r} has a component that is not letters, digits and ._+- "
                    f"(starting with a letter or digit)")
    return None


def inside(root: Path, path: Path) -> bool:
    """Does `path`, with every symlink resolved, lie within `root` (also resolved)?"""
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def run_folder(logdir: Path, run_id: str) -> Path:
    """LOGDIR/<run_id>, or UnsafePath if the id or a symlink on the way leads outside LOGDIR."""
    problem = run_id_problem(run_id)
    if problem:
        raise UnsafePath(problem)
    folder = run_dir(logdir, run_id)
    if not inside(logdir, folder):
        raise UnsafePath(f"run folder {folder} resolves outside {logdir} (a symlink?)")
    return folder
