"""Follow a run's telemetry (`telemetry.jsonl`, and one file per compute node for a Slurm run) as it
grows, reading only what was appended.

The campaign owner appends one JSON record a second per run (see `jsonl.py`). `RecordFollower`
hands over the records appended since its last poll (the metrics endpoint summarises a run's
telemetry with it, measure/columns.py `LiveTelemetry`, instead of re-reading the whole file per
scrape). A live view shows the selected run's recent history, so `TelemetryFollower` keeps only the
newest records and parses only what it keeps; `RunTelemetryFollower` does so for every file of the
run, one per node, and picks up a node's file that appears later. Reading goes through the one file tailer
(`ingest.tail.FileTail`), so a truncated or replaced file starts over and a line cut short by a
crash is skipped.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from perfwatch.core.ingest.tail import FileTail
from perfwatch.core.layout import telemetry_node
from perfwatch.core.telemetry.jsonl import TelemetryFiles

KEEP = 600  # records kept (10 minutes at 1 Hz); a sparkline shows the last ones that fit


class RecordFollower:
    """Every record appended to one telemetry.jsonl since the last `poll()`, parsed; one thread only.
    The descriptor is released between polls (following every run of a campaign holds no file open)."""

    def __init__(self, path: str | Path) -> None:
        self._tail = FileTail(path)

    def poll(self) -> list[tuple[bool, list[dict[str, Any]]]]:
        """(reset, records) per batch read: `reset` when the file was replaced or truncated (start over)."""
        out = []
        while (batch := self._tail.read()) is not None:
            records = []
            for raw in batch.lines:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # a line cut short by a crash: skipped, never fatal
                if isinstance(obj, dict):
                    records.append(obj)
            out.append((batch.reset, records))
        self._tail.release()
        return out

    def close(self) -> None:
        self._tail.close()


class TelemetryFollower:
    """Incremental reader of one telemetry.jsonl; `poll()` on one thread only."""

    def __init__(self, path: Path | None, keep: int = KEEP) -> None:
        self.path = path
        self.records: deque[dict[str, Any]] = deque(maxlen=keep)
        self._tail = FileTail(path) if path is not None else None

    def poll(self) -> bool:
        """Read what was appended since the last call; True when the records changed.

        Raises `OSError` when the file exists but cannot be read (the caller reports it)."""
        tail = self._tail
        if tail is None:
            return False
        changed = False
        while (batch := tail.read()) is not None:
            if batch.reset:
                self.records.clear()
                changed = True
            for raw in batch.lines[-(self.records.maxlen or 1):]:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # a line cut short by a crash: skipped, never fatal
                if isinstance(obj, dict):
                    self.records.append(obj)
                    changed = True
        if not changed and not tail.is_open and self.path is not None:
            _check_readable(self.path)
        return changed

    def close(self) -> None:
        if self._tail is not None:
            self._tail.close()


class RunTelemetryFollower:
    """The newest records of each of a run's telemetry files, for the live view (one thread only).

    `path` is the run's telemetry.jsonl; the files followed are it and the per-node files beside it
    (`jsonl.TelemetryFiles`, asked at every poll: the nodes of a job start writing at different times).
    `records` maps the source to its newest records: "" for telemetry.jsonl (sampled where perfwatch
    runs), else the node's name (layout.telemetry_node)."""

    def __init__(self, path: Path, keep: int = KEEP) -> None:
        self.path = path
        self.keep = keep
        self._files = TelemetryFiles(path)
        self._followers: dict[str, TelemetryFollower] = {}
        # files that exist but cannot be read, from the last poll (the caller reports them)
        self.problems: list[OSError] = []

    def poll(self) -> bool:
        """Read what every file gained; True when some file's records changed."""
        changed = False
        self.problems = []
        files = {telemetry_node(path.name) or "": path for path in self._files.files()}
        for gone in [source for source in self._followers if source not in files]:  # kept aside by a restart
            self._followers.pop(gone).close()
            changed = True
        for source, path in files.items():
            follower = self._followers.get(source)
            if follower is None:
                follower = self._followers[source] = TelemetryFollower(path, self.keep)
            try:
                changed = follower.poll() or changed
            except OSError as exc:
                self.problems.append(exc)
        return changed

    @property
    def records(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """Per source ("" or the node), its newest records, oldest first; sources without any left out."""
        return {source: tuple(f.records) for source, f in sorted(self._followers.items()) if f.records}

    def close(self) -> None:
        for follower in self._followers.values():
            follower.close()


def _check_readable(path: Path) -> None:
    """The tailer skips files it cannot open; say why, when the file is there but unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # not written yet: nothing to say
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.close(fd)
