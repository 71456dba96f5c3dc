"""The selected run's own telemetry (process-tree CPU and RSS, its GPUs) as one-line sparklines.

The campaign owner appends one record a second to LOGDIR/<run>/telemetry.jsonl (see
`perfwatch.core.telemetry.jsonl`). This widget follows that file for the selected run only:
it reads what was appended since the last look, at most once a second, on the app's thread
(a few hundred bytes a second; a long history is skipped, only the last `TAIL_BYTES` are read
when a run is first selected). Runs without such a file (attached MLPerf result logs) say so.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from perfwatch.core.layout import RUN_LOGS, TELEMETRY_FILE

TAIL_BYTES = 256 << 10  # on selection: read at most this much of an old file's end
KEEP = 600  # records kept (10 minutes at 1 Hz); a sparkline shows the last ones that fit
POLL_S = 1.0
_BARS = "▁▂▃▄▅▆▇█"
NONE_TEXT = "no telemetry recorded for this run"


def telemetry_path(run: Any | None, proc: Any | None) -> Path | None:
    """LOGDIR/<run>/telemetry.jsonl for a launched run or a run folder; None for plain result logs."""
    folder = getattr(proc, "folder", None)
    if folder is not None:
        return Path(folder) / TELEMETRY_FILE
    path = getattr(run, "path", None)
    if path is not None and Path(path).name in RUN_LOGS:
        return Path(path).parent / TELEMETRY_FILE
    return None


class TelemetryFollower:
    """Incremental reader of one telemetry.jsonl; tolerant of partial, garbled, truncated or replaced files."""

    def __init__(self, path: Path | None, keep: int = KEEP) -> None:
        self.path = path
        self.records: deque[dict[str, Any]] = deque(maxlen=keep)
        self._ino: int | None = None
        self._offset = 0
        self._partial = b""
        self._skip_first = False

    def poll(self) -> bool:
        """Read what was appended since the last call; True when new records arrived."""
        if self.path is None:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        if st.st_ino != self._ino or st.st_size < self._offset:  # first look, or replaced/truncated
            self.records.clear()
            self._ino, self._partial = st.st_ino, b""
            self._offset = max(0, st.st_size - TAIL_BYTES)
            self._skip_first = self._offset > 0  # started mid-file: the first line is a fragment
        if st.st_size == self._offset:
            return False
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(st.st_size - self._offset)
        except OSError:
            return False
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if self._skip_first and lines:
            lines.pop(0)
            self._skip_first = False
        before = len(self.records)
        for raw in lines:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # a line cut short by a crash: skipped, never fatal
            if isinstance(obj, dict):
                self.records.append(obj)
        return len(self.records) != before or bool(lines)


def sparkline(values: Sequence[float | None], width: int, lo: float | None = None, hi: float | None = None) -> str:
    """The last `width` values as block characters (blank where unknown), scaled to lo..hi."""
    vals = list(values)[-width:] if width > 0 else []
    known = [v for v in vals if v is not None]
    if not known:
        return " " * max(width, 0)
    lo = min(known) if lo is None else lo
    hi = max(known) if hi is None else max(hi, max(known))
    span = (hi - lo) or 1.0
    top = len(_BARS) - 1
    chars = [" " if v is None else _BARS[min(max(int((v - lo) / span * top + 0.5), 0), top)] for v in vals]
    return "".join(chars).rjust(width)


def _num(rec: dict[str, Any], key: str) -> float | None:
    v = rec.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, div in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}B"


def _gpu_series(records: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any] | None]]:
    """Per GPU index, its record in each sample (None where that sample lacks it)."""
    indices: list[int] = []
    for rec in records:
        for g in rec.get("gpus") or ():
            if isinstance(g, dict) and isinstance(g.get("index"), int) and g["index"] not in indices:
                indices.append(g["index"])
    out: dict[int, list[dict[str, Any] | None]] = {i: [] for i in sorted(indices)}
    for rec in records:
        by_index = {g.get("index"): g for g in rec.get("gpus") or () if isinstance(g, dict)}
        for i in out:
            out[i].append(by_index.get(i))
    return out


Cell = tuple[str, str, list[float | None], float | None, float | None]  # label, now, series, lo, hi


def telemetry_cells(records: Sequence[dict[str, Any]]) -> list[list[Cell]]:
    """Lines of cells: the process tree (CPU, RSS), then one line per GPU (util, memory, power)."""
    if not records:
        return []
    last = records[-1]
    cpu = [_num(r, "cpu_percent") for r in records]
    rss = [_num(r, "rss") for r in records]
    cpu_now = _num(last, "cpu_percent")
    lines: list[list[Cell]] = [[
        ("cpu", "–" if cpu_now is None else f"{cpu_now:.0f}%", cpu, 0.0, 100.0),
        ("rss", _bytes(_num(last, "rss")), rss, 0.0, None),
    ]]
    for index, samples in _gpu_series(records).items():
        def field(key: str, samples: list[dict[str, Any] | None] = samples) -> list[float | None]:
            return [_num(g, key) if g is not None else None for g in samples]

        util, mem, power = field("util_sm"), field("mem_used"), field("power_w")
        now = samples[-1] or {}
        total = _num(now, "mem_total")
        lines.append([
            (f"GPU{index} util", "–" if util[-1] is None else f"{util[-1]:.0f}%", util, 0.0, 100.0),
            ("mem", _bytes(mem[-1]), mem, 0.0, total),
            ("power", "–" if power[-1] is None else f"{power[-1]:.0f}W", power, 0.0, None),
        ])
    return lines


class RunTelemetry(Widget):
    """One line for the run's process tree (CPU %, RSS), one per GPU (util, memory, power)."""

    COMPONENT_CLASSES = {"run-telemetry--label", "run-telemetry--spark", "run-telemetry--none"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._follower = TelemetryFollower(None)
        self._rows: list[Strip] | None = None
        self._rows_width = -1
        self._lines: list[list[Cell]] = []
        self._height = 1
        self._own_clock = True
        self._timer: Timer | None = None

    def use_own_clock(self, own: bool) -> None:
        """Poll on a 1 s timer of its own (True), or only when `poll()` is called (the app calls it
        on each 1 Hz telemetry sample, so the app wakes up once a second, not twice)."""
        self._own_clock = own
        self._sync_timer()

    def _sync_timer(self) -> None:
        wanted = self._own_clock and self._follower.path is not None
        if wanted and self._timer is None:
            self._timer = self.set_interval(POLL_S, self.poll)
        elif wanted and self._timer is not None:
            self._timer.resume()
        elif self._timer is not None:
            self._timer.pause()  # nothing to follow: no wake-ups

    def follow(self, path: Path | None) -> None:
        """Show this file's telemetry (None: the run has none)."""
        if path == self._follower.path:
            return
        self._follower = TelemetryFollower(path)
        self._follower.poll()
        self._changed()
        self._sync_timer()

    def poll(self) -> None:
        """Read what the followed file gained; repaint only if it did."""
        if self._follower.poll():
            self._changed()

    def _changed(self) -> None:
        self._lines = telemetry_cells(list(self._follower.records))
        height = max(len(self._lines), 1)
        same_height = height == self._height
        self._height, self._rows = height, None
        self.refresh(layout=not same_height)

    @property
    def text(self) -> str:
        """What the widget shows, as plain text."""
        return "\n".join(strip.text.rstrip() for strip in self._build(max(self.size.width, 60)))

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return self._height

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows = None

    def render_line(self, y: int) -> Strip:
        rows = self._build(self.size.width)
        return rows[y] if y < len(rows) else Strip.blank(self.size.width, self.rich_style)

    def _build(self, width: int) -> list[Strip]:
        if self._rows is not None and self._rows_width == width:
            return self._rows
        base = self.rich_style
        label: Style = base + self.get_component_rich_style("run-telemetry--label")
        spark: Style = base + self.get_component_rich_style("run-telemetry--spark")
        lines = self._lines
        if not lines:
            none = base + self.get_component_rich_style("run-telemetry--none")
            rows = [Strip([Segment(NONE_TEXT, none)]).crop_extend(0, width, base)]
        else:
            rows = []
            for cells in lines:
                slot = max(width // max(len(cells), 1), 12)
                segments: list[Segment] = []
                for name, now, series, lo, hi in cells:
                    head = f"{name} {now} "
                    segments.append(Segment(head, label))
                    segments.append(Segment(sparkline(series, max(slot - len(head) - 2, 1), lo, hi), spark))
                    segments.append(Segment("  ", base))
                rows.append(Strip(segments).crop_extend(0, width, base))
        self._rows, self._rows_width = rows, width
        return rows
