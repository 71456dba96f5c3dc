"""Typed messages that background threads post to the app, and the inbox that coalesces them.

Threads never touch widgets or the run model: the watcher's sink puts line batches in
an `Inbox` and posts one `LinesReady` only when the inbox goes from empty to non-empty,
so however fast lines arrive the app's queue holds at most one such message. The app
drains the inbox on its own thread.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

from textual.message import Message

T = TypeVar("T")


class Inbox(Generic[T]):
    """Thread-safe buffer; `put` returns True when the consumer needs waking."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[T] = []

    def put(self, items: list[T]) -> bool:
        with self._lock:
            was_empty = not self._items
            self._items.extend(items)
            return was_empty and bool(items)

    def drain(self) -> list[T]:
        with self._lock:
            items, self._items = self._items, []
            return items


class LinesReady(Message):
    """New log lines wait in the app's inbox."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LinesReady)


class TelemetryReady(Message):
    """A telemetry snapshot (`perfwatch.core.telemetry.types.Snapshot`); a newer one replaces an older."""

    def __init__(self, snapshot: Any) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TelemetryReady)
