"""The detail pane: the selected run's facts, its eval and throughput plots and its log tail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from perfwatch.core.control.controller import ProcInfo
from perfwatch.core.control.states import RunState
from perfwatch.core.measure.energy import RunEnergy
from perfwatch.core.measure.eta import Eta
from perfwatch.core.measure.eta import progress as run_progress
from perfwatch.core.model.attempts import Attempt
from perfwatch.core.model.book import LOG_TAIL_LINES
from perfwatch.core.model.run import RunView
from perfwatch.core.model.status import RunStatus, judge
from perfwatch.text.escape import scrub
from perfwatch.ui.format import energy_text, fmt_duration, fmt_eta, fmt_mfu, fmt_rate, fmt_value, rate_name

if TYPE_CHECKING:
    from perfwatch.core.engine import RunFigures
from perfwatch.ui.widgets.plot import Plot
from perfwatch.ui.widgets.run_telemetry import RunTelemetry


class LogTail(ScrollView, can_focus=True):
    """The last lines of the run's log (Line API, strips cached per line); rejected lines are marked.

    It follows the log while scrolled to the bottom; scrolled up (↑, pgup, the mouse wheel) it
    keeps the same lines in view as new ones arrive, until `end` brings it back. `search()`
    highlights every line holding a text (case-insensitive) and moves to the next or previous one.
    It holds the lines the engine keeps of each log (`LOG_TAIL_LINES`).
    """

    COMPONENT_CLASSES = {"log-tail--bad", "log-tail--match", "log-tail--current"}
    DEFAULT_CSS = """
    LogTail {
        height: 1fr;
        min-height: 2;
        padding: 0 1;
        background: $surface;
        color: $muted;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;
    }
    LogTail:focus { background-tint: $foreground 4%; }
    LogTail > .log-tail--bad { color: $bad-line; text-style: bold; }
    LogTail > .log-tail--match { color: $foreground; text-style: bold; }
    LogTail > .log-tail--current { color: $background; background: $accent; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: tuple[str, ...] = ()
        self._bad: frozenset[str] = frozenset()
        self._cache: dict[tuple[str, bool, int, str, bool], Strip] = {}
        self._query = ""
        self._current: int | None = None  # index of the match moved to last
        self._follow = True  # at the bottom: new lines scroll into view

    @property
    def text(self) -> str:
        """What the pane shows, as plain text (marks included)."""
        return "\n".join(("✗ " if line[:2000] in self._bad else "  ") + line for line in self._shown())

    @property
    def lines(self) -> tuple[str, ...]:
        """Every line held (the view shows some of them)."""
        return self._lines

    @property
    def current(self) -> str | None:
        """The matching line the search moved to last."""
        return self._lines[self._current] if self._current is not None else None

    @property
    def following(self) -> bool:
        """Scrolled to the bottom: new lines scroll into view."""
        return self._follow

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._follow = new_value >= self.max_scroll_y

    def show(self, lines: Sequence[str], bad: frozenset[str]) -> None:
        new = tuple(scrub(line) for line in lines[-LOG_TAIL_LINES:])  # a workload's ANSI/OSC output stays inert
        bad = frozenset(scrub(b) for b in bad)
        if new == self._lines and bad == self._bad:
            return
        dropped = _dropped(self._lines, new)
        self._lines, self._bad = new, bad
        if self._current is not None:
            self._current = self._current - dropped if self._current >= dropped else None
        self.virtual_size = Size(self.scrollable_content_region.width, len(new))
        if self._follow:
            self.scroll_end(animate=False)  # once the new size is laid out
        elif dropped:
            self.scroll_to(y=max(self.scroll_y - dropped, 0), animate=False, immediate=True)
        self.refresh()

    def follow(self) -> None:
        """Back to the bottom, following (another run's log is shown)."""
        self._follow, self._current = True, None
        self.scroll_end(animate=False)

    def search(self, query: str, direction: int = 0) -> int:
        """Highlight lines holding `query`; move to the next (1) or previous (-1) one, or with 0 to the
        first at or above the bottom of the view. Returns how many lines match."""
        self._query = query.lower()
        self._cache.clear()
        hits = self.matches()
        if not hits:
            self._current = None
        else:
            bottom = int(self.scroll_y) + max(self.size.height, 1) - 1
            if direction > 0 and self._current is not None:
                self._current = next((i for i in hits if i > self._current), hits[0])
            elif direction < 0 and self._current is not None:
                self._current = next((i for i in reversed(hits) if i < self._current), hits[-1])
            else:
                self._current = next((i for i in reversed(hits) if i <= bottom), hits[-1])
            self.scroll_to(y=max(self._current - max(self.size.height, 1) // 2, 0), animate=False, immediate=True)
        self.refresh()
        return len(hits)

    def matches(self) -> list[int]:
        q = self._query
        return [i for i, line in enumerate(self._lines) if q and q in line.lower()]

    def _shown(self) -> tuple[str, ...]:
        top = int(self.scroll_y)
        return self._lines[top: top + max(self.size.height, 1)]

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = int(self.scroll_y) + y
        if index >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        line = self._lines[index]
        bad = line[:2000] in self._bad
        current = index == self._current
        key = (line, bad, width, self._query, current)
        strip = self._cache.get(key)
        if strip is None:
            if len(self._cache) > 512:
                self._cache.clear()
            style = self.rich_style
            if bad:
                style = style + self.get_component_rich_style("log-tail--bad")
            text = ("✗ " if bad else "  ") + line.replace("\t", " ")
            if len(text) > width:
                text = text[: max(width - 1, 0)] + "…"
            strip = Strip(self._segments(text, style, current)).crop_extend(0, width, self.rich_style)
            self._cache[key] = strip
        return strip

    def _segments(self, text: str, style: Style, current: bool) -> list[Segment]:
        """The line, its matches of the search highlighted."""
        q = self._query
        if not q:
            return [Segment(text, style)]
        hit = style + self.get_component_rich_style("log-tail--current" if current else "log-tail--match")
        out, at, low = [], 0, text.lower()
        while (found := low.find(q, at)) >= 0:
            out += [Segment(text[at:found], style), Segment(text[found: found + len(q)], hit)]
            at = found + len(q)
        out.append(Segment(text[at:], style))
        return out

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()


def _dropped(old: tuple[str, ...], new: tuple[str, ...]) -> int:
    """How many of `old`'s first lines `new` no longer holds (the tail moved on by that many)."""
    for k in range(len(old) + 1):
        rest = old[k:]
        if new[: len(rest)] == rest:
            return k
    return len(old)


def summary_text(view: RunView | None, proc: ProcInfo | None, findings: Sequence[str] = (),
                 eta: Eta | None = None, energy: RunEnergy | None = None, status: RunStatus | None = None,
                 attempts: Sequence[Attempt] = (), figures: RunFigures | None = None) -> Text:
    """Facts about one run, a few short lines: `status`, `figures` and `attempts` as the engine computed them."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if view is None and proc is None:
        t.append("no run selected")
        return t
    run_id = view.run_id if view is not None else proc.run_id if proc is not None else "?"
    if status is None:  # a caller without an engine snapshot: the same core rule
        status = judge(view, proc)
    t.append(run_id, "bold")
    t.append("   state ")
    t.append(status.word, "bold")
    if status.reason:
        t.append(f" ({status.reason})")
    t.append(f"   target {status.verdict.value}")
    if view is not None:
        bits = [view.benchmark, view.org, view.platform, view.division]
        if view.stands_for is not None:  # the campaign's `mlperf:`: what RCP and the target judge it as
            bits.append(f"stands for {view.stands_for.describe()}")
        t.append("   " + " · ".join(b for b in bits if b))
        t.append("\n")
        ttt = view.time_to_train_ms
        if ttt is not None and view.run_status == "success":
            t.append(f"time-to-train {fmt_duration(ttt)}")
        elif ttt is not None:  # run_stop says it did not finish: MLPerf gives it no time-to-train
            t.append(f"ran {fmt_duration(ttt)} (run_stop {view.run_status or 'without status'})")
        else:
            t.append(f"elapsed {fmt_duration(view.elapsed_ms)}")
        if view.epoch is not None:
            t.append(f"  epoch {view.epoch:g}")
        if view.samples is not None:
            t.append(f"  samples {fmt_rate(view.samples)}")
        st = view.throughput_stats
        if st.count and figures is not None:
            paused = " (paused)" if proc is not None and proc.state is RunState.PAUSED else ""  # no rate now
            t.append(f"  {rate_name(figures.unit)} {fmt_rate(figures.tp_now)}{paused} "
                     f"(avg {fmt_rate(figures.tp_avg)}, n={st.count})")
            if figures.mfu is not None and figures.mfu.value is not None:
                t.append(f"  MFU {fmt_mfu(figures.mfu.value)}")
        t.append("\n")
        if view.target is not None:
            mark = " reached" if view.target_reached else ""
            t.append(
                f"target {view.target.key} {'≥' if view.target.higher_is_better else '≤'} "
                f"{fmt_value(view.target.value)} ({view.target.source}){mark}"
            )
        else:
            t.append("no target")
        t.append(f"  best {fmt_value(view.best_eval)}  records {view.records}")
        line = progress_text(view, eta)
        if line:
            t.append("\n" + line)
        if view.bad_count:
            t.append(f"  bad lines {view.bad_count}", "bold")
    if proc is not None:
        t.append("\n")
        t.append(f"pid {proc.pid if proc.pid is not None else '–'}  attempt {proc.attempt}")
        if proc.devices:  # the GPUs the scheduler gave it (NVML indices = its CUDA_VISIBLE_DEVICES)
            t.append(f"  gpu {','.join(map(str, proc.devices))}")
        t.append(f"  {energy_text(energy) or 'energy –'}")  # GPU energy (none for a CPU run)
    elif energy is not None:
        t.append("\n" + energy_text(energy))
    if attempts:  # a restarted run: what each earlier attempt ended as
        t.append("\nearlier: " + "  ".join(attempt_text(a) for a in attempts))
    for finding in findings[:3]:
        t.append("\n" + finding)
    t.plain = scrub(t.plain)  # run ids, reasons, findings come from files: no control sequence reaches the terminal
    return t


def attempt_text(a: Attempt) -> str:
    """"#1 stopped, eval 0.91 (reached), 1:02" for the detail pane's list of earlier attempts."""
    bits = [f"#{a.attempt} {a.state}"]
    if a.last_eval is not None:
        bits.append(f"eval {fmt_value(a.last_eval)} ({a.verdict})")
    if a.time_ms is not None:
        bits.append(fmt_duration(a.time_ms))
    return ", ".join(bits)


def progress_text(view: RunView, eta: Eta | None) -> str:
    """Progress against the budget, distance to the target, ETA: one line ("" when it would only
    repeat the epoch shown above)."""
    p = run_progress(view)
    if p.budget is None and (view.target is None or view.target_reached or view.phase == "stopped"):
        return ""
    if p.done is None:
        parts = ["progress –"]
    elif p.budget is not None:
        parts = [f"{p.unit} {p.done:g} of {p.budget:g} ({(p.fraction or 0) * 100:.0f}%)"]
    else:
        parts = [f"{p.unit} {p.done:g}" if p.unit == "epoch" else f"{fmt_rate(p.done)} {p.unit}"]
    if view.target is not None and view.last_eval is not None and not view.target_reached:
        gap = abs(view.target.value - view.last_eval)
        parts.append(f"eval {fmt_value(view.last_eval)}, {fmt_value(gap)} from the target")
    if eta is not None and view.phase != "stopped":
        if eta.status == "converging":
            parts.append(f"ETA {eta.text(view.elapsed_ms, fmt_eta)}" + (f" ({eta.reason})" if eta.reason else ""))
        elif eta.status == "not_converging":
            parts.append(f"not converging: {eta.reason}")
        elif eta.status == "too_early":
            parts.append(f"ETA: {eta.reason}")
    return "  ·  ".join(parts)


class DetailPane(Vertical):
    """Summary, plots side by side, the run's own telemetry, log tail (and its search box).

    With the log focused (tab, a click, or `l`): `/` searches it, enter keeps the search and goes
    back to the log, `n`/`N` move to the next/previous matching line, escape clears the search."""

    BINDINGS = [
        Binding("slash", "search_log", "search log", id="log.search"),
        Binding("n", "next_match(1)", "next match", id="log.next"),
        Binding("N", "next_match(-1)", "previous match", id="log.previous"),
    ]
    DEFAULT_CSS = """
    DetailPane { border-top: solid $panel; }
    DetailPane #log-search { dock: bottom; display: none; }
    DetailPane #detail-summary { height: 6; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    DetailPane #detail-plots { height: 1fr; min-height: 4; max-height: 14; }
    DetailPane.log-only #detail-plots { display: none; }
    """

    _summary: Text | None = None
    _run_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="detail-summary")
        with Horizontal(id="detail-plots"):
            yield Plot("eval", id="plot-eval", classes="eval")
            yield Plot("throughput", unit="samples/s", zero_based=True, id="plot-throughput")
        yield RunTelemetry(id="detail-telemetry")
        yield LogTail(id="detail-log")
        yield Input(placeholder="search the log: enter keeps it, n/N next/previous, escape clears", id="log-search")

    @property
    def log_tail(self) -> LogTail:
        return self.query_one("#detail-log", LogTail)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_match":
            return bool(self.query_one("#log-search", Input).value)  # only while a search is kept
        return True

    def action_search_log(self) -> None:
        box = self.query_one("#log-search", Input)
        box.display = True
        box.focus()

    def action_next_match(self, direction: int) -> None:
        found = self.log_tail.search(self.query_one("#log-search", Input).value, direction)
        if not found:
            self.notify("no line of the log holds it", timeout=2)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            event.stop()
            self.log_tail.search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "log-search":
            event.stop()
            event.input.display = bool(event.value)
            self.log_tail.focus()
            self.refresh_bindings()

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#log-search", Input)
        if event.key == "escape" and (box.has_focus or box.value):
            event.stop()
            box.value = ""
            box.display = False
            self.log_tail.search("")
            self.log_tail.focus()

    def show(
        self,
        view: RunView | None,
        tail: Sequence[str],
        proc: ProcInfo | None = None,
        findings: Sequence[str] = (),
        eta: Eta | None = None,
        energy: RunEnergy | None = None,
        status: RunStatus | None = None,
        attempts: Sequence[Attempt] = (),
        figures: RunFigures | None = None,
    ) -> None:
        summary = summary_text(view, proc, findings, eta, energy, status, attempts, figures)
        if summary != self._summary:  # same text: no repaint
            self._summary = summary
            self.query_one("#detail-summary", Static).update(summary, layout=False)
        eval_plot = self.query_one("#plot-eval", Plot)
        tp_plot = self.query_one("#plot-throughput", Plot)
        if view is None:
            eval_plot.set_data(())
            tp_plot.set_data(())
        else:
            evals = [(e.time_ms, e.value) for e in view.evals]
            target = view.target.value if view.target is not None else None
            note = fmt_value(view.last_eval) if view.last_eval is not None else ""
            eval_plot.set_data(evals, target, note=note, start_ms=view.run_start_ms)
            now = figures.tp_now if figures is not None else None
            paused = proc is not None and proc.state is RunState.PAUSED
            tp_plot.unit = f"{view.count_unit}/s"  # view.throughput is in the benchmark's unit (tokens: GPT-3)
            tp_plot.set_data(view.throughput, note="paused" if paused else fmt_rate(now), start_ms=view.run_start_ms)
        bad = frozenset(b.text for b in view.bad_lines) if view is not None else frozenset()
        run_id = view.run_id if view is not None else proc.run_id if proc is not None else None
        if run_id != self._run_id:
            self._run_id = run_id
            self.log_tail.follow()
        self.log_tail.show(tail, bad)
