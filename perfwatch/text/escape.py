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

from typing import TextIO

# C0 except \t and \n, DEL, C1, and the Unicode bidi embedding/override/isolate controls. Tables for
# str.translate, not a regex: compiling that character class was ~1 ms of every command's start-up.
_UNSAFE = (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_VISIBLE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSAFE}
_REPLACED = dict.fromkeys(_UNSAFE, "\ufffd")


def printable(text: str) -> str:
    """`text` with every terminal control character shown as an escape (newline and tab kept)."""
    return text.translate(_VISIBLE)


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
    return text.translate(_REPLACED)


def echo(text: str, out: TextIO | None = None) -> None:
    """print(), escaped: the one way commands print text that holds data read from files."""
    import sys

    print(printable(text), file=out if out is not None else sys.stdout)
