"""What the metrics endpoint reads at scrape time: one immutable `LiveSnapshot` of a session.

`SessionSource` is the adapter over today's `core.engine.Session` (run book + controller +
the owner's telemetry thread). The collector only knows `Source.snapshot()`, so when the
live engine publishes its own immutable snapshots this adapter is the only piece to swap.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfwatch.core.engine import Session
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import group_of, status_of
from perfwatch.core.telemetry.types import Snapshot


@dataclass(frozen=True, slots=True)
class LiveRun:
    """One run as the endpoint labels it: the log's view plus what the controller knows."""

    run_id: str
    view: RunView | None  # None until the run's log has a record (queued, starting)
    job: str
    state: str  # the controller's state (queued, running, succeeded, ...) or the log's status word
    devices: tuple[int, ...]  # GPU indices the run was given (empty: none or not known)


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    campaign: str
    root: Path  # paths in report rows are relative to this (as `perfwatch report ROOT` prints them)
    runs: tuple[LiveRun, ...]
    telemetry: Snapshot | None  # the latest host/GPU sample (None before the first one)


class Source(Protocol):
    def snapshot(self) -> LiveSnapshot: ...

    def close(self) -> None: ...


class SessionSource:
    """Snapshots of a `Session`, taken on the scraping thread.

    Run views are immutable and cached by the run itself; reading them while the front end's
    thread applies new lines costs nothing extra and at worst shows the state of a moment ago.
    Telemetry comes from the campaign owner's sampling thread when there is one; otherwise
    (watch-only, client of a detached owner) this source samples host and GPUs on demand.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._sampler: Any = None
        self._lock = threading.Lock()

    def snapshot(self) -> LiveSnapshot:
        s = self.session
        procs: Mapping[str, Any] = {}
        if s.controller is not None:
            try:
                procs = dict(s.controller.procs())
            except (OSError, ValueError, RuntimeError):
                procs = {}
        views = {v.run_id: v for v in _views(s)}
        runs = []
        for rid, info in procs.items():  # the campaign's order, queued runs included
            runs.append(LiveRun(rid, views.pop(rid, None), info.job, info.state.value, tuple(info.devices or ())))
        for view in views.values():  # logs nobody controls
            runs.append(LiveRun(view.run_id, view, group_of(view), status_of(view), ()))
        return LiveSnapshot(s.title, s.book.root, tuple(runs), self._telemetry(procs))

    def _telemetry(self, procs: Mapping[str, Any]) -> Snapshot | None:
        thread = getattr(self.session.controller, "_telemetry", None)  # the owner's TelemetryThread
        if thread is not None:
            return thread.latest
        with self._lock:
            if self._sampler is None:
                from perfwatch.core.telemetry.sampling import default_sampler

                self._sampler = default_sampler()
            roots = {rid: (p.pid,) for rid, p in procs.items() if getattr(p, "pid", None) and p.state.alive}
            return self._sampler.sample(roots)

    def close(self) -> None:
        with self._lock:
            if self._sampler is not None:
                self._sampler.close()
                self._sampler = None


def _views(session: Session) -> list[RunView]:
    """The book's views; retried if the front end adds a run while we iterate."""
    for _ in range(5):
        try:
            return session.book.views()
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return []
