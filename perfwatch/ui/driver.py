"""Textual's Linux/macOS terminal driver with an input thread that sleeps while nobody types.

Textual's input thread wakes ten times a second, to see whether it should stop and whether a lone
ESC has waited long enough to be the Escape key rather than the start of a sequence. On a screen
nobody touches those wake-ups were a fifth of perfwatch's idle CPU (DESIGN P3: ≤ 0.5 % of a core).
This thread keeps Textual's 0.1 s tick only while input is recent (so Escape is recognised exactly
as before) and otherwise blocks until a key arrives or the driver, stopping, writes to a pipe it
also waits on. Everything else — terminal modes, mouse, resize, the writer thread — is Textual's.
Used only where Textual itself would pick `LinuxDriver` (not on Windows, not under textual-serve).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual.drivers.linux_driver import LinuxDriver

__all__ = ["QuietLinuxDriver"]

TICK = 0.1  # Textual's poll: how long a lone ESC waits before it counts as the Escape key
QUIET_AFTER = 1.0  # seconds without input after which the thread blocks instead of ticking


class QuietLinuxDriver(LinuxDriver):
    """`LinuxDriver` whose input thread blocks while idle (module docstring)."""

    _wake_w: int | None = None
    _stopping = False
    _wake_lock = threading.Lock()  # the pipe is never written after the input thread closed it

    def run_input_thread(self) -> None:
        try:
            from textual._xterm_parser import XTermParser

            parser = XTermParser(self._debug)
        except (ImportError, TypeError, AttributeError):  # a Textual whose parser moved: its own loop
            super().run_input_thread()
            return
        self._stopping = False
        wake_r, wake_w = os.pipe()
        self._wake_w = wake_w
        selector = selectors.SelectSelector()  # as Textual: kqueue/epoll can refuse a macOS tty
        selector.register(self.fileno, selectors.EVENT_READ, "tty")
        selector.register(wake_r, selectors.EVENT_READ, "wake")
        decode = getincrementaldecoder("utf-8")().decode
        last_input = time.monotonic()
        try:
            while not (self._stopping or self.exit_event.is_set()):
                recent = time.monotonic() - last_input < QUIET_AFTER
                for key, _mask in selector.select(TICK if recent else None):
                    if key.data == "wake":
                        os.read(wake_r, 64)
                        continue
                    data = os.read(self.fileno, 4096)
                    if not data:  # end of input (a pipe): stop selecting it rather than spin
                        selector.unregister(self.fileno)
                        continue
                    last_input = time.monotonic()
                    self._dispatch(parser.feed(decode(data)))
                self._dispatch(parser.tick())
        finally:
            with self._wake_lock:
                self._wake_w = None
                for fd in (wake_r, wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
            selector.close()
            with contextlib.suppress(Exception):  # as Textual: whatever is half-parsed is dropped
                for _ in parser.feed(""):
                    pass

    def _dispatch(self, events: Any) -> None:
        for event in events:
            self.process_message(event)

    def disable_input(self) -> None:
        """Wake the input thread so that it sees it must stop (Textual then joins it)."""
        self._stopping = True
        with self._wake_lock:
            if self._wake_w is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
        super().disable_input()
