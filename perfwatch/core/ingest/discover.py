"""Which files under a folder are run logs, in a stable order: the walk `report`, `check` and headless share.

Below the run model because the official checker (mlperf/) walks trees too; `model.book`
re-exports `discover` for its readers. The name rule itself is `layout.is_log_name`.
"""

from __future__ import annotations

import os
from pathlib import Path

from perfwatch.core.layout import MLLOG_FILE, OUTPUT_FILE, is_log_name

__all__ = ["discover"]


def discover(root: Path | str) -> list[Path]:
    """Log files under `root` in a stable order (folders sorted, result_N numerically)."""
    root = Path(root)
    if root.is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        names = set(filenames)
        for name in sorted(filenames, key=_natural_key):
            if name == OUTPUT_FILE and MLLOG_FILE in names:
                continue  # read for its tail by the live view; records come from mllog.txt
            path = Path(dirpath) / name
            if is_log_name(path):
                found.append(path)
    return found


def _natural_key(name: str) -> tuple[object, ...]:
    parts: list[object] = []
    num = ""
    text = ""
    for ch in name:
        if ch.isdigit():
            if text:
                parts.append(text)
                text = ""
            num += ch
        else:
            if num:
                parts.append(int(num))
                num = ""
            text += ch
    if num:
        parts.append(int(num))
    if text:
        parts.append(text)
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in parts)
