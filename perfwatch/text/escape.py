"""Terminal-safe text for the commands: every text output escapes what it did not put there itself.

The rules live in core/ingest/sanitize.py (control characters, undecodable bytes in names, newlines in cells,
CSV formulas, strict JSON); here are the ways commands print with them: `EscapingWriter` passes a
stream through `printable`, so a renderer can keep printing as it does, and `echo` is print() escaped.
Every text renderer (report, check, compare, attach/launch headless, the plan `--take-over` shows)
goes through them.
"""

from __future__ import annotations

from typing import TextIO

from perfwatch.core.ingest.sanitize import csv_cell, json_text, one_line, printable, scrub

__all__ = ["EscapingWriter", "csv_cell", "echo", "json_text", "one_line", "printable", "scrub"]


class EscapingWriter:
    """A text stream that passes everything written through `printable`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()

    def fileno(self) -> int:
        return self._out.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._out, "encoding", "utf-8")


def echo(text: str, out: TextIO | None = None) -> None:
    """print(), escaped: the one way commands print text that holds data read from files."""
    import sys

    print(printable(text), file=out if out is not None else sys.stdout)
