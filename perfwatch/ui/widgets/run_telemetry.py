"""The selected run's own telemetry (process-tree CPU and RSS, its GPUs) as one-line sparklines.

The campaign owner appends one record a second to LOGDIR/<run>/telemetry.jsonl (see
`perfwatch.core.telemetry.jsonl`). The `LiveEngine` follows that file for the selected run
on its own thread and hands the last records out in its snapshot (`SelectedRun.telemetry`);
this widget only draws them. Runs without such a file (attached MLPerf result logs) say so.
A run sampled on more than one compute node (Slurm) is shown as one line per node and a total
line instead, from the figures the engine computed (`SelectedRun.by_node`, core/measure/nodes.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from perfwatch.ui.format import energy_cell

if TYPE_CHECKING:
    from perfwatch.core.measure.nodes import NodeFigures, NodeTelemetry

_BARS = "▁▂▃▄▅▆▇█"
NONE_TEXT = "no telemetry recorded for this run"
WAITING_TEXT = "waiting for the first telemetry record"
Record = Mapping[str, Any]


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


def _num(rec: Record, key: str) -> float | None:
    v = rec.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, div in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}B"


def _gpu_series(records: Sequence[Record]) -> dict[int, list[Record | None]]:
    """Per GPU index, its record in each sample (None where that sample lacks it)."""
    indices: list[int] = []
    for rec in records:
        for g in rec.get("gpus") or ():
            if isinstance(g, dict) and isinstance(g.get("index"), int) and g["index"] not in indices:
                indices.append(g["index"])
    out: dict[int, list[Record | None]] = {i: [] for i in sorted(indices)}
    for rec in records:
        by_index = {g.get("index"): g for g in rec.get("gpus") or () if isinstance(g, dict)}
        for i in out:
            out[i].append(by_index.get(i))
    return out


Cell = tuple[str, str, list[float | None], float | None, float | None]  # label, now, series, lo, hi


def telemetry_cells(records: Sequence[Record]) -> list[list[Cell]]:
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
        def field(key: str, samples: list[Record | None] = samples) -> list[float | None]:
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


MAX_NODE_LINES = 6  # the nodes' lines and the total; beyond, the first nodes, a line saying how many more, the total


def _percent(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}%"


def node_line(name: str, f: NodeFigures, width: int) -> str:
    """One node's (or the total's) figures: GPU utilisation and count, power, GPU memory, energy-to-train
    (so far, as the runs table shows it), the job's CPU and RSS on the node."""
    power = "–" if f.power_w is None else f"{f.power_w:.0f}W"
    return (f"{name[:width]:<{width}}  {f.gpus} GPU  util {_percent(f.gpu_util):>4}  power {power:>6}  "
            f"mem {_bytes(f.mem_used):>6}  energy {energy_cell(f.energy):>8}  cpu {_percent(f.cpu_percent):>5}  "
            f"rss {_bytes(f.rss):>6}")


def node_lines(by_node: NodeTelemetry) -> list[str]:
    """A line per node ("local": the run's own telemetry.jsonl), then the total; at most MAX_NODE_LINES."""
    names = [n.node or "local" for n in by_node.nodes]
    width = min(max(len(name) for name in [*names, "total"]), 16)
    lines = [node_line(name, n, width) for name, n in zip(names, by_node.nodes, strict=True)]
    if len(lines) + 1 > MAX_NODE_LINES:
        shown = MAX_NODE_LINES - 2
        lines = [*lines[:shown], f"… {len(lines) - shown} more nodes (perfwatch report lists each)"]
    return [*lines, node_line("total", by_node.total, width)]


class RunTelemetry(Widget):
    """One line for the run's process tree (CPU %, RSS), one per GPU (util, memory, power); a run on
    several compute nodes: one line per node and the total."""

    COMPONENT_CLASSES = {"run-telemetry--label", "run-telemetry--spark", "run-telemetry--none"}
    DEFAULT_CSS = """
    RunTelemetry { height: auto; max-height: 3; padding: 0 1; }
    RunTelemetry.-nodes { max-height: 6; }
    RunTelemetry > .run-telemetry--label { color: $foreground; }
    RunTelemetry > .run-telemetry--spark { color: $plot-line; }
    RunTelemetry > .run-telemetry--none { color: $muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._records: Sequence[Record] | None = None
        self._by_node: NodeTelemetry | None = None
        self._node_lines: list[str] = []
        self._rows: list[Strip] | None = None
        self._rows_width = -1
        self._lines: list[list[Cell]] = []
        self._height = 1

    def show(self, records: Sequence[Record] | None, by_node: NodeTelemetry | None = None) -> None:
        """Draw these records (the engine's `SelectedRun.telemetry`; None: the run has no telemetry), or,
        for a run on more than one compute node, each node's figures and the total (`SelectedRun.by_node`)."""
        if records is self._records and by_node is self._by_node:
            return  # the same (immutable) objects as last time
        self._records, self._by_node = records, by_node
        nodes = by_node is not None and len(by_node.nodes) > 1
        self._node_lines = node_lines(by_node) if by_node is not None and nodes else []
        self._lines = [] if nodes else telemetry_cells(records or ())
        self.set_class(nodes, "-nodes")
        height = max(len(self._node_lines) or len(self._lines), 1)
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
        if self._node_lines:
            rows = [Strip([Segment(text, label)]).crop_extend(0, width, base) for text in self._node_lines]
        elif not lines:
            none = base + self.get_component_rich_style("run-telemetry--none")
            text = NONE_TEXT if self._records is None else WAITING_TEXT
            rows = [Strip([Segment(text, none)]).crop_extend(0, width, base)]
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
