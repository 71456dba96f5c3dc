"""Which files under a folder are run logs, in a stable order: the walk `report`, `check` and headless share.

Below the run model because the official checker (mlperf/) walks trees too; `model.book`
re-exports `discover` for its readers. The name rule itself is `layout.is_log_name`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from perfwatch.core.layout import MLLOG_FILE, OUTPUT_FILE, is_log_name

__all__ = ["NotRegular", "discover", "is_regular", "open_regular"]


class NotRegular(OSError):
    """A log name that is a FIFO, a device, a socket or a folder (or a symlink to one): never read."""


def is_regular(path: Path | str) -> bool:
    """A regular file (symlinks followed): a FIFO named `x.txt` would block a read forever, and a
    symlink to /dev/zero would never end."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def open_regular(path: Path | str) -> BinaryIO:
    """Open a log for reading only if it is a regular file; NotRegular otherwise.

    Opened with O_NONBLOCK, so opening a FIFO that no writer holds cannot block, then checked with
    fstat on the open descriptor (no race with a swap after a stat), then made blocking again.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(f"{path}: not a regular file")
        os.set_blocking(fd, True)  # F_SETFL without O_NONBLOCK (no fcntl module to load)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def discover(root: Path | str) -> list[Path]:
    """Log files under `root` in a stable order (folders sorted, result_N numerically)."""
    root = Path(root)
    if root.is_file():  # is_file() follows symlinks and is False for FIFOs and devices
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        names = set(filenames)
        for name in sorted(filenames, key=_natural_key):
            if name == OUTPUT_FILE and MLLOG_FILE in names:
                continue  # read for its tail by the live view; records come from mllog.txt
            path = Path(dirpath) / name
            if is_log_name(path) and is_regular(path):
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
