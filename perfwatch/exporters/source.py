"""What the metrics endpoint reads at scrape time: one immutable `ExportSnapshot` of a session.

`SessionSource` reads the snapshot the session's live engine (core/engine.py) last published:
the same run views, states, counts, throughput, MFU, ETAs and energy the TUI and `--headless`
show, taken on the scraping thread without touching the engine's own state. Before the engine's
first snapshot (and in the one front end without an engine, `attach --once`) it lists no run. Device telemetry comes from the
engine's sampler when the front end runs one (the TUI), else from the campaign owner's
sampling thread, else it is sampled on demand at scrape time.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfwatch.core.engine import RunFigures, Session
from perfwatch.core.measure.energy import RunEnergy
from perfwatch.core.measure.eta import Eta
from perfwatch.core.model.status import Counts, count
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import group_of
from perfwatch.core.telemetry.ranks import RankReport
from perfwatch.core.telemetry.types import Snapshot


@dataclass(frozen=True, slots=True)
class LiveRun:
    """One run as the endpoint labels it: the log's view plus what the controller knows."""

    run_id: str
    view: RunView | None  # None until the run's log has a record (queued, starting)
    job: str
    state: str  # the engine's state word (core/model/status.py: queued, running, done, killed, crashed, ...)
    devices: tuple[int, ...]  # GPU indices the run was given (empty: none or not known)
    eta: Eta | None = None  # the engine's ETA to target (core/measure/eta.py)
    alive: bool = False  # its process lives (or its log goes on)
    ranks: RankReport | None = None  # a distributed run's ranks (core/telemetry/ranks.py)
    # the engine's numbers, as the TUI and --headless show them: throughput now/avg and MFU (engine.RunFigures),
    # GPU energy (core/measure/energy.py); None: not known (no log yet, no GPU energy recorded)
    figures: RunFigures | None = None
    energy: RunEnergy | None = None


@dataclass(frozen=True, slots=True)
class ExportSnapshot:
    campaign: str
    root: Path  # paths in report rows are relative to this (as `perfwatch report ROOT` prints them)
    runs: tuple[LiveRun, ...]
    telemetry: Snapshot | None  # the latest host/GPU sample (None before the first one)
    logdir: str = ""  # the LOGDIR's absolute path: tells two launches of one campaign apart
    hostname: str = ""  # the host this endpoint and its telemetry run on
    counts: Counts = count(())  # the engine's counts: states, reached / not reached / no target, failed


class Source(Protocol):
    def snapshot(self) -> ExportSnapshot: ...

    def close(self) -> None: ...


class SessionSource:
    """Snapshots of a `Session` as its live engine published them (nothing before the engine starts)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._sampler: Any = None
        self._lock = threading.Lock()

    def snapshot(self) -> ExportSnapshot:
        s = self.session
        snap = s.engine.snapshot if s.engine is not None else None
        logdir, host = str(Path(s.logdir).resolve()), socket.gethostname()
        if snap is None:
            return ExportSnapshot(s.title, s.book.root, (), None, logdir, host)
        runs = []
        for rid in snap.run_ids():  # the logs' order, then runs with no log yet (queued)
            view, info, eta, status = snap.views.get(rid), snap.procs.get(rid), snap.etas.get(rid), snap.statuses.get(rid)
            if status is None:
                continue
            ranks, figures, energy = snap.ranks.get(rid), snap.figures.get(rid), snap.energy.get(rid)
            if info is not None:
                runs.append(LiveRun(rid, view, info.job, status.word, tuple(info.devices or ()), eta, status.state.alive,
                                    ranks, figures, energy))
            elif view is not None:  # logs nobody controls
                runs.append(LiveRun(rid, view, group_of(view), status.word, (), eta, status.state.alive, ranks,
                                    figures, energy))
        return ExportSnapshot(s.title, s.book.root, tuple(runs), snap.devices or self._telemetry(snap.procs), logdir,
                            host, snap.counts)

    def _telemetry(self, procs: Mapping[str, Any]) -> Snapshot | None:
        owner = getattr(self.session.controller, "_telemetry", None)  # the campaign owner's TelemetryThread
        if owner is not None:
            return owner.latest
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
