"""Typed messages from background threads to the app.

The `LiveEngine` (core/engine.py) calls back on its own thread when a new update waits,
at most once until the app has taken it; the app turns that call into one `EngineUpdated`
message, which a queued older one would be replaced by (`can_replace`), so however fast
lines arrive the app's queue holds at most one. Widgets are only touched by the handler,
on the app's thread.
"""

from __future__ import annotations

from textual.message import Message


class EngineUpdated(Message):
    """The engine has a new snapshot; take it with `LiveEngine.take()`."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EngineUpdated)
