"""The detail pane: the selected run's facts, its eval and throughput plots and its log tail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from perfwatch.core.control.controller import ProcInfo
from perfwatch.core.measure.energy import RunEnergy
from perfwatch.core.measure.eta import Eta
from perfwatch.core.measure.eta import progress as run_progress
from perfwatch.core.model.attempts import Attempt
from perfwatch.core.model.run import RunView
from perfwatch.core.model.status import RunStatus, judge
from perfwatch.text.escape import scrub
from perfwatch.ui.format import energy_text, fmt_duration, fmt_eta, fmt_mfu, fmt_rate, fmt_value

if TYPE_CHECKING:
    from perfwatch.core.engine import RunFigures
from perfwatch.ui.widgets.plot import Plot
from perfwatch.ui.widgets.run_telemetry import RunTelemetry


class LogTail(Widget):
    """The last lines of the run's log (Line API, strips cached per line); rejected lines are marked."""

    COMPONENT_CLASSES = {"log-tail--bad"}
    DEFAULT_CSS = """
    LogTail {
        height: 1fr;
        min-height: 2;
        padding: 0 1;
        background: $surface;
        color: $muted;
    }
    LogTail > .log-tail--bad { color: $bad-line; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: tuple[str, ...] = ()
        self._bad: frozenset[str] = frozenset()
        self._cache: dict[tuple[str, bool, int], Strip] = {}

    @property
    def text(self) -> str:
        """What the pane shows, as plain text (marks included)."""
        return "\n".join(("✗ " if line[:2000] in self._bad else "  ") + line for line in self._shown())

    def show(self, lines: Sequence[str], bad: frozenset[str]) -> None:
        new = tuple(scrub(line) for line in lines[-200:])  # a workload's ANSI/OSC output stays inert
        bad = frozenset(scrub(b) for b in bad)
        if new != self._lines or bad != self._bad:
            self._lines, self._bad = new, bad
            self.refresh()

    def _shown(self) -> tuple[str, ...]:
        height = max(self.size.height, 1)
        return self._lines[-height:]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        shown = self._shown()
        if y >= len(shown):
            return Strip.blank(width, self.rich_style)
        line = shown[y]
        bad = line[:2000] in self._bad
        key = (line, bad, width)
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
            strip = Strip([Segment(text, style)]).crop_extend(0, width, self.rich_style)
            self._cache[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()


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
            t.append(f"  samp/s {fmt_rate(figures.tp_now)} (avg {fmt_rate(figures.tp_avg)}, n={st.count})")
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
    """Summary, plots side by side, the run's own telemetry, log tail."""

    DEFAULT_CSS = """
    DetailPane { border-top: solid $panel; }
    DetailPane #detail-summary { height: 6; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    DetailPane #detail-plots { height: 1fr; min-height: 4; max-height: 14; }
    DetailPane.log-only #detail-plots { display: none; }
    """

    _summary: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="detail-summary")
        with Horizontal(id="detail-plots"):
            yield Plot("eval", id="plot-eval", classes="eval")
            yield Plot("throughput", unit="samples/s", zero_based=True, id="plot-throughput")
        yield RunTelemetry(id="detail-telemetry")
        yield LogTail(id="detail-log")

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
            tp_plot.set_data(view.throughput, note=fmt_rate(now), start_ms=view.run_start_ms)
        bad = frozenset(b.text for b in view.bad_lines) if view is not None else frozenset()
        self.query_one("#detail-log", LogTail).show(tail, bad)
