"""A light runs table drawn with Textual's Line API.

Only the lines of rows that changed are repainted; sorting, filtering and scrolling
work on plain lists, so a campaign of hundreds of runs stays cheap. The header row
stays on top while the rows scroll.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from perfwatch.ui.format import COLUMNS, NARROW_HIDE, OPTIONAL, STATUS_CLASSES, Row

SORT_KEYS = ("id", "state", "progress", "tp_now", "eval", "time")
MINOR = frozenset({"progress", "tp_now", "tp_avg", "mfu", "time", "energy", "eta"})  # cells that move all the time
_DESCENDING = frozenset({"progress", "tp_now", "eval", "time"})


class RunsTable(ScrollView, can_focus=True):
    """Runs, one per line; the cursor row is the selected run."""

    DEFAULT_CSS = """
    RunsTable {
        background: $surface;
        color: $foreground;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;  /* rows are cut to the width: never a horizontal scrollbar */
    }
    RunsTable > .runs-table--header { background: $panel; color: $foreground; text-style: bold; }
    RunsTable > .runs-table--cursor { background: $primary 30%; }
    RunsTable > .runs-table--cursor-focus { background: $primary 45%; }
    RunsTable > .runs-table--queued { color: $status-queued; }
    RunsTable > .runs-table--running { color: $status-running; }
    RunsTable > .runs-table--paused { color: $status-paused; }
    RunsTable > .runs-table--reached { color: $status-reached; }
    RunsTable > .runs-table--done { color: $status-done; }
    RunsTable > .runs-table--failed { color: $status-failed; }
    RunsTable > .runs-table--stalled { color: $status-stalled; }
    """

    COMPONENT_CLASSES = {
        "runs-table--header",
        "runs-table--cursor",
        "runs-table--cursor-focus",
        *(f"runs-table--{s}" for s in STATUS_CLASSES),
    }
    BINDINGS = [
        Binding("up", "cursor(-1)", "up", show=False),
        Binding("down", "cursor(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "jump(0)", "first", show=False),
        Binding("end", "jump(-1)", "last", show=False),
    ]

    class Selected(Message):
        """The cursor moved to another run (or to none)."""

        def __init__(self, run_id: str | None) -> None:
            super().__init__()
            self.run_id = run_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[str, Row] = {}
        self._painted: dict[str, float] = {}  # run id -> when its row was last replaced
        self._order: list[str] = []
        self._index: dict[str, int] = {}
        self._filter = ""
        self.sort_key = "id"
        self.cursor = 0
        self._selected: str | None = None
        self._styles: dict[str, Style] | None = None
        self.marked: set[str] = set()  # runs chosen for the compare screen
        self._valued: dict[str, set[str]] = {k: set() for k in OPTIONAL}  # column -> runs with a value
        self._layout_for: tuple[int, frozenset[str]] | None = None  # (width, optional columns) of _layout_cols
        self._layout_cols: list[tuple[str, str, int]] = []

    # ---- data ---------------------------------------------------------------
    @property
    def selected(self) -> str | None:
        return self._order[self.cursor] if self._order else None

    @property
    def visible_ids(self) -> list[str]:
        return list(self._order)

    def row(self, run_id: str) -> Row | None:
        """The run's row as last painted."""
        return self._rows.get(run_id)

    def update_rows(self, rows: Iterable[Row], now: float = 0.0, minor_every: float = 0.0) -> list[str]:
        """Replace the given rows; repaint only their lines unless the order changed.

        A row whose only changes are in the continuously moving cells (`MINOR`: rates, times,
        progress) and that was painted less than `minor_every` seconds ago is left as it is:
        its id is returned, for the caller to offer again later. State, eval and new rows
        are shown at once."""
        changed, later = [], []
        for row in rows:
            old = self._rows.get(row.run_id)
            if old is not None and old.cells == row.cells and old.status == row.status and old.sort == row.sort:
                continue  # same text on screen: nothing to repaint
            if (
                old is not None
                and old.status == row.status
                and now - self._painted.get(row.run_id, -math.inf) < minor_every
                and all(old.cells[k] == v for k, v in row.cells.items() if k not in MINOR)
            ):
                later.append(row.run_id)
                continue
            self._rows[row.run_id] = row
            self._painted[row.run_id] = now
            changed.append(row.run_id)
        if not changed:
            return later
        shown = self._optional_shown()
        for run_id in changed:
            for key, runs in self._valued.items():
                (runs.add if self._rows[run_id].cells.get(key, "–") != "–" else runs.discard)(run_id)
        if self._optional_shown() != shown:
            self.refresh()  # a column appeared or went: every line changes
        if not self._reorder():
            for run_id in changed:
                i = self._index.get(run_id)
                if i is not None:
                    self.refresh_line(i + 1)
        return later

    def toggle_mark(self, run_id: str) -> None:
        """Mark (or unmark) a run for comparing; marked rows start with ●."""
        self.marked ^= {run_id}
        i = self._index.get(run_id)
        if i is not None:
            self.refresh_line(i + 1)

    def set_filter(self, text: str) -> None:
        self._filter = text.strip().lower()
        self._reorder(force=True)

    def action_cycle_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(i + 1) % len(SORT_KEYS)]
        self._reorder(force=True)

    def _matches(self, row: Row) -> bool:
        f = self._filter
        return not f or any(f in row.cells[k].lower() for k in ("id", "state"))

    def _reorder(self, force: bool = False) -> bool:
        """Recompute the visible order; True (and a full repaint) if it changed."""
        ids = [r for r, row in self._rows.items() if self._matches(row)]
        key = self.sort_key
        if key == "id":
            ids.sort()
        else:
            ids.sort(key=lambda r: (self._rows[r].sort.get(key, 0), r), reverse=key in _DESCENDING)
        if ids == self._order and not force:
            return False
        grew = len(ids) != len(self._order)
        keep = self._selected
        self._order = ids
        self._index = {r: i for i, r in enumerate(ids)}
        self.cursor = self._index.get(keep, min(self.cursor, max(len(ids) - 1, 0))) if keep else 0
        self.virtual_size = Size(self.scrollable_content_region.width, len(ids) + 1)
        self._announce()
        self.refresh(layout=grew)  # with `height: auto` the table takes the rows it has
        return True

    # ---- cursor -------------------------------------------------------------
    def _move_to(self, index: int) -> None:
        if not self._order:
            return
        old = self.cursor
        self.cursor = max(0, min(index, len(self._order) - 1))
        if old != self.cursor:
            self.refresh_line(old + 1)
            self.refresh_line(self.cursor + 1)
        self._scroll_to_cursor()
        self._announce()

    def _scroll_to_cursor(self) -> None:
        rows_visible = max(self.size.height - 1, 1)
        top = int(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + rows_visible:
            self.scroll_to(y=self.cursor - rows_visible + 1, animate=False)

    def _announce(self) -> None:
        sel = self.selected
        if sel != self._selected:
            self._selected = sel
            self.post_message(self.Selected(sel))

    def select(self, run_id: str) -> None:
        if run_id in self._index:
            self._move_to(self._index[run_id])

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(self.size.height - 2, 1))

    def action_jump(self, where: int) -> None:
        self._move_to(len(self._order) - 1 if where < 0 else 0)

    def on_focus(self) -> None:
        self.refresh_line(self.cursor + 1)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor + 1)

    def on_click(self, event: Click) -> None:
        if event.y >= 1:
            self._move_to(int(self.scroll_y) + event.y - 1)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The header and every visible row: the screen gives the table what it needs (up to its max)."""
        return len(self._order) + 1

    # ---- drawing ------------------------------------------------------------
    def _optional_shown(self) -> frozenset[str]:
        """Optional columns some visible-or-not run has a value for."""
        return frozenset([k for k, runs in self._valued.items() if runs])

    def _layout(self, width: int) -> list[tuple[str, str, int]]:
        """The columns and their widths; asked for by every line painted, so kept until width or the
        optional columns change (recomputing it per line was a seventh of the live view's CPU)."""
        shown = self._optional_shown()
        if self._layout_for != (width, shown):
            self._layout_for, self._layout_cols = (width, shown), self._compute_layout(width, shown)
        return self._layout_cols

    @staticmethod
    def _compute_layout(width: int, shown: frozenset[str]) -> list[tuple[str, str, int]]:
        cols = [c for c in COLUMNS if c[0] != "id" and (c[0] not in OPTIONAL or c[0] in shown)]
        for drop in ((), OPTIONAL, NARROW_HIDE):  # narrow: the optional columns go first, then the rest
            kept = [c for c in cols if c[0] not in drop]
            fixed = sum(w + 1 for _, _, w in kept)
            if width - fixed >= 16:
                break
        return [("id", "run", max(width - fixed, 8)), *kept]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None

    def _style(self, name: str) -> Style:
        """Component styles, looked up once per theme/style change (render_line is hot)."""
        if self._styles is None:
            self._styles = {"": self.rich_style}
            for cls in self.COMPONENT_CLASSES:
                partial = cls.removeprefix("runs-table--") in STATUS_CLASSES
                self._styles[cls] = self.get_component_rich_style(cls, partial=partial)
        return self._styles[name]


    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        layout = self._layout(width)
        if y == 0:
            style = self._style("") + self._style("runs-table--header")
            texts = []
            for key, title, _w in layout:
                mark = " ▼" if key == self.sort_key and key in _DESCENDING else ""
                mark = " ▲" if key == self.sort_key and not mark else mark
                texts.append(title + mark)
            return self._strip(layout, texts, style, None, width)
        index = int(self.scroll_y) + y - 1
        if index >= len(self._order):
            return Strip.blank(width, self._style(""))
        row = self._rows[self._order[index]]
        base = self._style("")
        if index == self.cursor:
            cursor = "runs-table--cursor-focus" if self.has_focus else "runs-table--cursor"
            base = base + self._style(cursor)
        status = self._style(f"runs-table--{row.status}")
        texts = [row.cells[k] for k, _, _ in layout]
        if row.run_id in self.marked:
            texts[0] = "● " + texts[0]
        return self._strip(layout, texts, base, status, width)

    @staticmethod
    def _strip(
        layout: list[tuple[str, str, int]], texts: list[str], base: Style, status: Style | None, width: int
    ) -> Strip:
        segments = []
        for (key, _t, w), text in zip(layout, texts, strict=True):
            cell = _shorten(text, w, middle=key == "id")
            cell = cell.ljust(w) if key in ("id", "state") else cell.rjust(w)
            style = base + status if (status is not None and key in ("state", "eval")) else base
            segments.append(Segment(cell + " ", style))
        return Strip(segments).crop_extend(0, width, base)


def _shorten(text: str, width: int, *, middle: bool) -> str:
    """Fit `text` in `width`; run ids keep their start and their informative end."""
    if len(text) <= width:
        return text
    if not middle or width < 12:
        return text[: width - 1] + "…"
    head = width // 3
    return text[:head] + "…" + text[len(text) - (width - head - 1) :]
