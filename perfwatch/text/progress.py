"""A progress line on stderr while a command reads a big tree (a whole MLPerf round: thousands of files).

Shown only on a terminal, only once the read has taken a second, refreshed at most four times a second
and wiped when the read is done: a quick report prints nothing, a report piped to a file stays clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

SHOW_AFTER_S = 1.0
EVERY_S = 0.25


class ReadProgress:
    """`progress(done, total)` for `model.book.load`: "reading 1,234/5,454 files" on stderr."""

    def __init__(self, what: str = "reading", stream: TextIO | None = None, *, force: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.what = what
        self.enabled = force or self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < SHOW_AFTER_S or (now - self.last < EVERY_S and done < total):
            return
        self.last = now
        self.stream.write(f"\r{self.what} {done:,}/{total:,} files ({now - self.started:.0f} s)\033[K")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        """Wipe the line (the report follows on stdout)."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
