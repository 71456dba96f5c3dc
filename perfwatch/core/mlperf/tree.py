"""Where an MLPerf results tree states facts about a system: `<org>/systems/<system>.json`.

A submission is laid out `<org>/results/<system>/<benchmark>/result_*.txt`, and its system description
`<org>/systems/<system>.json`. MLCommons' result summarizer and package checker take the division (and
the submitter, the system's name and size) from that file, not from the logs; perfwatch does the same
where the tree has it, and falls back on the logs' `submission_division` otherwise.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import msgspec

RESULTS_DIR = "results"
SYSTEMS_DIR = "systems"


def system_file(benchmark_folder: Path | str) -> Path | None:
    """`<org>/systems/<system>.json` for `<org>/results/<system>/<benchmark>` (None: not such a tree)."""
    folder = Path(benchmark_folder)
    system = folder.parent
    if system.parent.name != RESULTS_DIR or not system.name:
        return None
    path = system.parent.parent / SYSTEMS_DIR / f"{system.name}.json"
    return path if path.is_file() else None


@functools.lru_cache(maxsize=1024)
def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def system_description(benchmark_folder: Path | str) -> dict[str, Any] | None:
    """The system description of a results folder's system, as read (None: absent or not a JSON object)."""
    path = system_file(benchmark_folder)
    return _read(str(path)) if path is not None else None


class Division(msgspec.Struct, frozen=True):
    """A folder's division and where it was read: `systems/<system>.json`, the logs, or neither."""

    division: str | None
    source: str


def division_of(benchmark_folder: Path | str | None, log_division: str | None) -> Division:
    """The system description's `division` where the tree has one, else the logs' `submission_division`."""
    if benchmark_folder is not None:
        path = system_file(benchmark_folder)
        described = _read(str(path)) if path is not None else None
        value = described.get("division") if described is not None else None
        if isinstance(value, str) and value:
            said = f"{SYSTEMS_DIR}/{path.name if path else ''}"
            if log_division and log_division != value:
                said += f" (the logs say {log_division})"
            return Division(value, said)
    if log_division:
        return Division(log_division, "the logs' submission_division")
    return Division(None, "neither a system description nor the logs say")
