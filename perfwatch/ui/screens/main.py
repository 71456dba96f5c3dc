"""The main screen: header, runs table, the selected run's detail, devices, and the run keys.

It presents what the `LiveEngine` publishes and nothing else: on `EngineUpdated` it takes
the engine's update and repaints, at most every `refresh_interval` seconds, only the rows
that changed; rows whose only change is a moving number (rate, elapsed) at most every
`minor_interval`; the detail pane at most every `detail_interval`.

A run key acts on the run under the table's cursor when the key is handled (never on a
selection a queued message has not delivered yet), and only when the controller allows it
for that run as the screen shows it (the footer greys the others out). The action goes to
the engine (`LiveEngine.act`) from a thread worker, so the UI never waits for the controller;
the row says "stopping…" (or "pausing…", …) until the engine publishes the run's new state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

from textual import events, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static
from textual.worker import get_current_worker

from perfwatch.core.control.controller import ProcInfo
from perfwatch.core.engine import LiveEngine, LiveSnapshot, Update
from perfwatch.core.layout import run_dir
from perfwatch.core.model.view import RunView
from perfwatch.core.results.groups import group_runs
from perfwatch.core.results.summary import group_of
from perfwatch.ui import actions
from perfwatch.ui.format import header_text, make_row, pending_row
from perfwatch.ui.messages import EngineUpdated
from perfwatch.ui.screens.compare import CompareScreen
from perfwatch.ui.screens.dialogs import ConfirmScreen
from perfwatch.ui.screens.groups import GroupsScreen
from perfwatch.ui.screens.ranks import RanksScreen
from perfwatch.ui.widgets import DetailPane, DevicePanel, RunsTable, RunTelemetry

PENDING_LIMIT = 30.0  # s after the controller took an action with no new state shown: say so, stop waiting


@dataclass
class _Pending:
    """An action asked for a run whose outcome the screen has not shown yet."""

    verb: str
    before: tuple[object, ...]  # (state, attempt, reason) of the run when it was asked
    timer: Timer | None = None


class MainScreen(Screen[None]):
    """Runs table + detail pane + device panel over one engine."""

    DEFAULT_CSS = """
    MainScreen { layout: vertical; background: $background; }
    MainScreen #header-bar {
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $foreground;
        text-style: bold;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    MainScreen RunsTable { height: auto; max-height: 45%; min-height: 3; }
    MainScreen DetailPane { height: 1fr; min-height: 8; }
    MainScreen #filter { dock: bottom; margin-bottom: 1; }
    """
    BINDINGS = actions.bindings("main")

    def __init__(
        self,
        engine: LiveEngine,
        *,
        has_devices: bool,
        refresh_interval: float = 1.0,
        detail_interval: float = 1.0,
        minor_interval: float = 1.0,
    ) -> None:
        super().__init__(id="main")
        self.engine = engine
        self.has_devices = has_devices
        self.refresh_interval = refresh_interval
        self.detail_interval = detail_interval
        self.minor_interval = minor_interval
        self.snapshot: LiveSnapshot | None = None
        self._dirty: set[str] = set()
        self._devices_dirty = False
        self._detail_dirty = False
        self._paint_pending = False
        self._paint_timer: Timer | None = None
        self._last_paint = 0.0
        self._last_detail = 0.0
        self._selected: str | None = None
        self._awaiting: str | None = None  # selected, its tail not yet published by the engine
        self._shown: tuple[object, ...] | None = None
        self._header = ""
        self._closed = False
        self._pending: dict[str, _Pending] = {}  # run id -> the action asked, until its effect is shown
        self._table: RunsTable | None = None

    # ---- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="header-bar")
        yield RunsTable(id="runs")
        yield DetailPane(id="detail")
        yield DevicePanel(id="devices")
        yield Input(placeholder="filter runs (id or state); enter keeps it, escape clears", id="filter")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one("#devices", DevicePanel).display = self.has_devices
        self.query_one(RunsTable).focus()
        self._paint_header()

    @property
    def table(self) -> RunsTable:
        if self._table is None:
            self._table = self.query_one(RunsTable)
        return self._table

    @property
    def highlighted(self) -> str | None:
        """The run under the table's cursor now: what every run key acts on."""
        return self.table.selected

    def on_unmount(self) -> None:
        self._closed = True
        if self._paint_timer is not None:
            self._paint_timer.stop()

    # ---- engine updates -------------------------------------------------------------------------
    def on_engine_updated(self, _message: EngineUpdated) -> None:
        if self._awaiting is not None:  # the user just moved the cursor: show its log tail at once
            self._awaiting = None
            if self._paint_timer is not None:
                self._paint_timer.stop()
            self._paint_pending = False
            self._last_detail = 0.0
            self._paint()
        elif not self._paint_pending and time.monotonic() - self._last_paint >= 0.9 * self.refresh_interval:
            self._paint()  # the last paint is old enough: now, not after one more wake-up of the loop
        else:
            self._schedule_paint()

    @property
    def settled(self) -> bool:
        """Everything the engine published is on screen, the selected run's tail included (for tests)."""
        snap = self.snapshot
        return (not self._paint_pending and not self._detail_dirty and not self._dirty
                and (snap is None or snap.selected.run_id == self._selected))

    def _schedule_paint(self) -> None:
        if not self._paint_pending:
            self._paint_pending = True
            delay = max(0.01, self._last_paint + self.refresh_interval - time.monotonic())
            self._paint_timer = self.set_timer(delay, self._paint)

    def _paint(self) -> None:
        """Take the engine's update and push what changed to the widgets."""
        self._paint_pending = False
        if self._closed:
            return
        self._last_paint = time.monotonic()
        update = self.engine.take()
        if update is not None:
            self._absorb(update)
        snap = self.snapshot
        if snap is None:
            return
        dirty, self._dirty = self._dirty, set()
        rows = []
        for rid in dirty:
            status = snap.statuses.get(rid)
            if status is None:
                continue
            # every number and state as the engine computed it
            row = make_row(rid, snap.views.get(rid), status, snap.figures.get(rid), snap.etas.get(rid),
                           snap.energy.get(rid))
            pending = self._pending.get(rid)
            if pending is not None and _progress(snap.procs.get(rid)) != pending.before:
                self._settle(rid, repaint=False)  # the engine shows the action's effect: the row says it
            elif pending is not None:
                row = pending_row(row, pending.verb)
            rows.append(row)
        # rows where only rates/times moved are repainted at most every minor_interval (less jitter)
        later = self.query_one(RunsTable).update_rows(rows, time.monotonic(), self.minor_interval - 0.1)
        self._mark(later)
        if self._detail_dirty:
            if time.monotonic() - self._last_detail >= self.detail_interval:
                self._detail_dirty = False
                self._show_detail()
            else:
                self._schedule_paint()  # shown at a later paint, at most detail_interval apart
        self._paint_header()
        if self._devices_dirty:
            self._devices_dirty = False
            self.query_one("#devices", DevicePanel).show(snap.devices)

    def _absorb(self, update: Update) -> None:
        old = self.snapshot
        snap = self.snapshot = update.snapshot
        self._dirty |= update.changed
        if old is None:
            self._dirty |= set(snap.run_ids())
        if update.devices:
            self._devices_dirty = True
        if self._selected in update.changed or update.selected:
            self._detail_dirty = True
        for err in update.errors:
            self.notify(err.message, title=f"perfwatch: {err.source}", severity="error", timeout=10)
        rid = self.highlighted
        if rid is not None and rid in update.changed and old is not None and old.procs.get(rid) != snap.procs.get(rid):
            self.refresh_bindings()  # its process state changed what applies (not its log lines: the
            # footer is recomposed on every refresh_bindings, far too costly at the rate lines arrive)

    def _mark(self, run_ids: Iterable[str]) -> None:
        self._dirty.update(run_ids)
        if self._dirty:
            self._schedule_paint()

    def _paint_header(self) -> None:
        snap = self.snapshot
        if snap is None:
            text = header_text(self.engine.session.title, self.engine.session.host, None)
        else:
            text = header_text(snap.title, snap.host, snap.counts)
        if text != self._header:
            self._header = text
            self.query_one("#header-bar", Static).update(text, layout=False)

    def _current(self) -> tuple[RunView | None, ProcInfo | None]:
        snap, rid = self.snapshot, self._selected
        if snap is None or rid is None:
            return None, None
        return snap.views.get(rid), snap.procs.get(rid)

    def _show_detail(self) -> None:
        rid = self._selected
        view, proc = self._current()
        snap = self.snapshot
        sel = snap.selected if snap is not None and snap.selected.run_id == rid else None
        tail = sel.tail if sel is not None else ()
        energy = snap.energy.get(rid) if snap is not None and rid is not None else None
        key = (rid, view.version if view else None, proc, len(tail), tail[-1] if tail else None,
               id(sel.telemetry) if sel is not None else None, id(sel.by_node) if sel is not None else None, energy,
               snap.statuses.get(rid) if snap is not None and rid is not None else None,
               snap.attempts.get(rid) if snap is not None and rid is not None else None)
        if key == self._shown:
            return
        self._shown = key
        self._last_detail = time.monotonic()
        findings = [f"{f.severity}: {f.message}" for f in view.findings] if view else []
        if view is not None and view.compliance_ok is not None and not findings:
            findings = ["compliance: all MLPerf rules pass so far"]
        eta = snap.etas.get(rid) if snap is not None and rid is not None else None
        status = snap.statuses.get(rid) if snap is not None and rid is not None else None
        attempts = snap.attempts.get(rid, ()) if snap is not None and rid is not None else ()
        figures = snap.figures.get(rid) if snap is not None and rid is not None else None
        self.query_one(DetailPane).show(view, tail, proc, findings=findings, eta=eta, energy=energy, status=status,
                                        attempts=attempts, figures=figures)
        if sel is not None:
            self.query_one(RunTelemetry).show(sel.telemetry, sel.by_node)

    def on_runs_table_selected(self, message: RunsTable.Selected) -> None:
        self._selected = self._awaiting = message.run_id
        self.engine.select(message.run_id)
        self._show_detail()
        self.refresh_bindings()

    # ---- keys ---------------------------------------------------------------------------------
    def _allowed(self, verb: str, run_id: str | None) -> bool:
        """The controller allows `verb` for the run, in the state the screen shows, and the same action
        is not already under way for it (a second `s` while it says "stopping…" does nothing)."""
        snap = self.snapshot
        if run_id is None or snap is None or verb not in snap.actions.get(run_id, ()):
            return False
        pending = self._pending.get(run_id)
        return pending is None or pending.verb != verb

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        entry = actions.BY_ACTION.get(action)
        if entry is None or not entry.run_action:
            return True
        if not self.engine.controlled:
            return False  # nobody controls these runs: the keys do not exist
        rid = self.highlighted
        ok = any(self._allowed(verb, rid) for verb in entry.verbs)
        if ok:
            return True
        # one key, two actions (p: pause / resume): the one that applies is shown, else the first greyed
        if any(other.key == entry.key and any(self._allowed(v, rid) for v in other.verbs)
               for other in actions.ACTIONS if other is not entry):
            return False
        return None if entry.id == actions.first_on_key(entry.key).id else False

    def _control(self, verb: str, run_id: str | None) -> None:
        """Ask the engine for `verb` on the run (a thread worker waits for the answer)."""
        if run_id is None or not self._allowed(verb, run_id):
            return  # greyed out for this run: nothing happens
        snap = self.snapshot
        old = self._pending.pop(run_id, None)
        if old is not None and old.timer is not None:
            old.timer.stop()
        self._pending[run_id] = _Pending(verb, _progress(snap.procs.get(run_id) if snap else None))
        self._mark([run_id])
        self.refresh_bindings()
        self.notify(f"{verb.replace('_', ' ')}: {run_id}", timeout=3)
        self._send(verb, run_id)

    @work(thread=True, group="control", exit_on_error=False)
    def _send(self, verb: str, run_id: str) -> None:
        outcome = self.engine.act(verb, run_id)
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                why = outcome.result(timeout=0.5)
            except FutureTimeout:
                continue  # a slow controller poll (Slurm) is still running: keep waiting, off the UI thread
            self.app.call_from_thread(self._answered, verb, run_id, why)
            return

    def _answered(self, verb: str, run_id: str, why: str | None) -> None:
        """The engine executed the action (`why` None) or refused it."""
        pending = self._pending.get(run_id)
        if pending is None or pending.verb != verb:
            return
        if why is not None:
            self._settle(run_id)
            self.notify(why, title="perfwatch: control", severity="warning", timeout=6)
            return
        self._last_detail = 0.0  # show the outcome in the detail pane at the next paint
        pending.timer = self.set_timer(PENDING_LIMIT, lambda: self._expired(run_id, pending))

    def _expired(self, run_id: str, pending: _Pending) -> None:
        if self._pending.get(run_id) is pending:
            self._settle(run_id)
            self.notify(f"{pending.verb.replace('_', ' ')} {run_id}: sent, but no new state after "
                        f"{PENDING_LIMIT:g}s", title="perfwatch: control", severity="warning", timeout=10)

    def _settle(self, run_id: str, *, repaint: bool = True) -> None:
        pending = self._pending.pop(run_id, None)
        if pending is not None and pending.timer is not None:
            pending.timer.stop()
        if repaint:
            self._mark([run_id])
        if run_id == self.highlighted:
            self.refresh_bindings()

    def action_pause(self) -> None:
        self._control("pause", self.highlighted)

    def action_resume(self) -> None:
        self._control("resume", self.highlighted)

    def action_stop(self) -> None:
        self._control("stop", self.highlighted)

    def action_restart(self) -> None:
        self._control("restart", self.highlighted)

    def action_start_now(self) -> None:
        self._control("start_now", self.highlighted)

    def action_kill(self) -> None:
        rid = self.highlighted
        if rid is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._control("kill", rid)  # the run the question named, wherever the cursor is now

        self.app.push_screen(ConfirmScreen(f"Kill {rid}? (SIGKILL to its whole process group)"), answered)

    def action_toggle_mark(self) -> None:
        rid = self.highlighted
        if rid is not None:
            self.table.toggle_mark(rid)

    def action_compare(self) -> None:
        table = self.query_one(RunsTable)
        ids = [rid for rid in table.visible_ids if rid in table.marked]
        title = f"compare {len(ids)} marked runs"
        rid = self.highlighted
        if len(ids) < 2 and rid is not None and self.snapshot is not None:
            view = self.snapshot.views.get(rid)
            members = group_runs(self.snapshot.views.values()).get(group_of(view), []) if view else []
            ids = [v.run_id for v in members] or [rid]
            title = f"compare: {group_of(view)}" if view else title
        if ids:
            self.app.push_screen(CompareScreen(self.engine, ids, title=title))

    def action_groups(self) -> None:
        self.app.push_screen(GroupsScreen(self.engine, self.engine.session.baseline))

    def action_ranks(self) -> None:
        rid = self.highlighted
        if rid is None:
            return
        view = self.snapshot.views.get(rid) if self.snapshot is not None else None
        folder = Path(view.path).parent if view is not None else run_dir(self.engine.session.logdir, rid)
        self.app.push_screen(RanksScreen(rid, folder))

    def action_cycle_sort(self) -> None:
        self.query_one(RunsTable).action_cycle_sort()

    def action_toggle_log(self) -> None:
        """Log only (and the keys go to the log: scroll, `/` search) / plots and log (keys to the table)."""
        pane = self.query_one(DetailPane)
        pane.toggle_class("log-only")
        if pane.has_class("log-only"):
            pane.log_tail.focus()
        else:
            self.table.focus()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.query_one(RunsTable).set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self._close_filter(keep=True)

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            self._close_filter(keep=False)
        elif event.key == "escape" and self.query_one(DetailPane).log_tail.has_focus:
            event.stop()
            self.table.focus()  # back to choosing runs

    def _close_filter(self, keep: bool) -> None:
        box = self.query_one("#filter", Input)
        if not keep:
            box.value = ""
            self.query_one(RunsTable).set_filter("")
        box.display = bool(box.value)
        self.query_one(RunsTable).focus()


def _progress(proc: ProcInfo | None) -> tuple[object, ...]:
    """What an action changes about a run: its state, its attempt, or the reason (a refusal says why)."""
    return (proc.state, proc.attempt, proc.reason) if proc is not None else ()
