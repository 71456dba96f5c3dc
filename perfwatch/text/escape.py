"""Terminal-safe text: every text output escapes control characters it did not put there itself.

Log strings (a `submission_benchmark`, a run id, a line of `output.log`, a file name) come
from files anyone can write. Printed raw, an ESC starts a control sequence: OSC 52 writes the
clipboard, CSI 2J clears the screen, OSC 8 hides a link, a bidi override reorders what the
reader sees. `printable` turns every C0/C1 control character except newline and tab (and
the Unicode bidi controls) into a visible escape such as `\\x1b` or `\\u202e`; `EscapingWriter`
does the same for a stream, so a renderer can keep printing as it does. Every text renderer
(report, check, compare, attach/launch headless, the plan `--take-over` shows) goes through it.
"""

from __future__ import annotations

import re
from typing import TextIO

# C0 except \t and \n, DEL, C1, and the Unicode bidi embedding/override/isolate controls
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """`text` with every terminal control character shown as an escape (newline and tab kept)."""
    return _UNSAFE.sub(_visible, text) if _UNSAFE.search(text) else text


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


def scrub(text: str) -> str:
    """Same-length variant for widgets (styled spans keep their offsets): each control character
    becomes U+FFFD. Textual strips only BEL, BS, VT, FF and CR itself, so an ESC from a log would
    otherwise reach the terminal from the live view."""
    return _UNSAFE.sub("\ufffd", text) if _UNSAFE.search(text) else text


def echo(text: str, out: TextIO | None = None) -> None:
    """print(), escaped: the one way commands print text that holds data read from files."""
    import sys

    print(printable(text), file=out if out is not None else sys.stdout)
