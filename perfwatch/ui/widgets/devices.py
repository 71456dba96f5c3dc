"""The device panel: one line per GPU (or why there is none) and the host's CPU and memory."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from perfwatch.core.telemetry.types import Snapshot


def _gib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**30:.1f}"


def _num(v: float | None, unit: str, fmt: str = ".0f") -> str:
    return "–" if v is None else f"{v:{fmt}}{unit}"


def device_text(snapshot: Snapshot | None) -> Text:
    """Render a telemetry `Snapshot` (or None before the first sample)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if snapshot is None:
        t.append("devices: waiting for the first sample")
        return t
    gpu = snapshot.gpu
    if gpu is None:
        t.append("GPU: not sampled")
    elif not gpu.available:
        t.append(f"no NVIDIA GPU: {gpu.reason or 'unknown reason'}")
    else:
        for i, g in enumerate(gpu.gpus):
            if i:
                t.append("\n")
            t.append(f"GPU{g.index} {g.name or '?'}  util {_num(g.util_sm, '%')}")
            t.append(f"  mem {_gib(g.mem_used)}/{_gib(g.mem_total)}G  {_num(g.power_w, 'W')}")
            t.append(f"  {_num(g.temp_c, '°C')}  {_num(g.sm_clock, 'MHz')}/{_num(g.mem_clock, 'MHz')}")
    host = snapshot.host
    t.append("\n")
    if host is None:
        t.append("host: not sampled")
    else:
        t.append(f"host CPU {_num(host.cpu_percent, '%')}  RAM {_gib(host.mem_used)}/{_gib(host.mem_total)}G")
        if host.mem_percent is not None:
            t.append(f" ({host.mem_percent:.0f}%)")
    return t


class DevicePanel(Static):
    """Shows the latest snapshot; repaints only when its text changes."""

    DEFAULT_CSS = """
    DevicePanel {
        height: auto;
        max-height: 5;
        padding: 0 1;
        background: $panel;
        color: $foreground;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """
    _last: str | None = None

    def show(self, snapshot: Snapshot | None) -> None:
        text = device_text(snapshot)
        last = self._last
        if text.plain != last:
            same_height = last is not None and last.count("\n") == text.plain.count("\n")
            self._last = text.plain
            self.update(text, layout=not same_height)
