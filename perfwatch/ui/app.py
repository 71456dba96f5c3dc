"""The perfwatch Textual app: runs table, detail pane, device panel, keyboard run control.

Threads (log watcher, telemetry sampler) only post messages; the run book, the
controller and every widget are used on the app's thread. Changes are collected in
`_dirty` and painted at most every `refresh_interval` seconds, touching only the
rows that changed, so a busy campaign costs little CPU and an idle one almost none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from perfwatch.core.model.run import RunView
from perfwatch.ui import themes
from perfwatch.ui.format import header_text, make_row, mfu_for, status_of
from perfwatch.ui.messages import Inbox, LinesReady, TelemetryReady
from perfwatch.ui.screens.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from perfwatch.ui.widgets.detail import DetailPane
from perfwatch.ui.widgets.devices import DevicePanel
from perfwatch.ui.widgets.run_telemetry import RunTelemetry, telemetry_path
from perfwatch.ui.widgets.runs_table import RunsTable

RUN_ACTIONS = ("pause_resume", "stop", "kill", "restart", "start_now")
LIVE_STATES = frozenset({"queued", "starting", "running", "paused", "stopping", "stalled"})
WATCH_MIN_INTERVAL = 0.25  # seconds between log read passes inside the TUI (it paints at most 2x/s)


class PerfwatchApp(App[int]):
    """Watch (and, with a controller, steer) the runs of one session."""

    CSS_PATH = "perfwatch.tcss"
    TITLE = "perfwatch"
    BINDINGS = [
        Binding("q", "quit_app", "quit", id="app.quit"),
        Binding("question_mark", "help", "help", id="app.help"),
        Binding("slash", "filter", "filter", id="app.filter"),
        Binding("t", "cycle_theme", "theme", id="app.theme"),
        Binding("l", "toggle_log", "log", id="app.log", show=False),
        Binding("p", "pause_resume", "pause", id="run.pause", tooltip="pause/resume the selected run"),
        Binding("s", "stop", "stop", id="run.stop", tooltip="stop the selected run (SIGTERM, then SIGKILL)"),
        Binding("k", "kill", "kill", id="run.kill", tooltip="kill the selected run (asks first)"),
        Binding("r", "restart", "restart", id="run.restart", tooltip="restart the selected run"),
        Binding("enter", "start_now", "start", id="run.start_now", tooltip="start the selected queued run now"),
    ]

    def __init__(
        self,
        session: Any,
        *,
        theme: str | None = None,
        sampler: Any | None = None,
        sampler_interval: float = 1.0,
        refresh_interval: float = 0.5,
        detail_interval: float = 1.0,
        minor_interval: float = 1.0,
        control_interval: float = 0.5,
        watcher_factory: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.book = session.book
        if not Path(self.book.root).is_absolute():
            # the watcher reports absolute paths; run ids are paths relative to the book's root
            self.book.root = Path(self.book.root).resolve()
        self.controller = session.controller
        self.sampler = sampler
        self.sampler_interval = sampler_interval
        self.refresh_interval = refresh_interval
        self.detail_interval = detail_interval
        self.minor_interval = minor_interval  # rows whose rates/times alone moved: at most 1 Hz
        self._last_detail = 0.0
        self.control_interval = control_interval
        self._watcher_factory = watcher_factory
        self._themes = themes.load_themes()
        self._wanted_theme = theme
        self._inbox: Inbox[Any] = Inbox()
        self._dirty: set[str] = set()
        self._paint_pending = False
        self._paint_handle: asyncio.TimerHandle | None = None
        self._last_paint = 0.0
        self._procs: Mapping[str, Any] = {}
        self._selected: str | None = None
        self._shown: tuple[Any, ...] | None = None
        self._header = ""
        self._watcher: Any = None
        self._telemetry: Any = None
        self._snapshot: Any = None
        self._gpu_names: tuple[Any, ...] = ()
        self._devices_dirty = False
        self._closed = False
        self.stop_runs_on_exit = False

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **themes.DEFAULT_VARIABLES}

    # ---- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="header-bar")
        yield RunsTable(id="runs")
        yield DetailPane(id="detail")
        yield DevicePanel(id="devices")
        yield Input(placeholder="filter runs (id or state); enter keeps it, escape clears", id="filter")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        for theme in self._themes.values():
            self.register_theme(theme)
        name = self._wanted_theme or themes.saved_theme() or themes.DEFAULT_THEME
        self.theme = name if name in self._themes else next(iter(self._themes))
        self.query_one("#filter", Input).display = False
        self.query_one(RunsTable).focus()
        self._paint_header()
        self.query_one(RunTelemetry).use_own_clock(self.sampler is None)  # else polled with each sample
        if self.sampler is None:
            self.query_one(DevicePanel).display = False
        else:
            from perfwatch.core.telemetry.sampling import TelemetryThread

            self._telemetry = TelemetryThread(self.sampler, interval=self.sampler_interval, sink=self._on_sample)
            self._telemetry.start()
        if self.controller is not None:
            self._poll_controller()
            self.set_interval(self.control_interval, self._poll_controller)
        self._start_watcher()

    def _start_watcher(self) -> None:
        factory = self._watcher_factory
        if factory is None:
            from perfwatch.core.ingest.watch import LogWatcher

            factory = LogWatcher
        kwargs: dict[str, Any] = {"poll": self.session.poll}
        if factory is not None and self._watcher_factory is None:
            kwargs["min_interval"] = WATCH_MIN_INTERVAL  # the table refreshes at 2 Hz: read at most 4x/s
        self._watcher = factory(self.session.watcher_roots, self._sink, **kwargs)
        self._watcher.start()

    def on_unmount(self) -> None:
        self._closed = True
        if self._paint_handle is not None:
            self._paint_handle.cancel()
        if self._telemetry is not None:
            self._telemetry.stop()
        if self._watcher is not None:
            self._watcher.stop()

    # ---- data path (threads post, the app applies) ---------------------------------------------
    def _sink(self, batches: list[Any]) -> None:
        """Runs on the watcher's thread: buffer, and wake the app once per burst."""
        if self._inbox.put(batches):
            self.post_message(LinesReady())

    def _on_sample(self, snapshot: Any) -> None:
        """Runs on the telemetry thread; a newer snapshot replaces a queued older one."""
        self.post_message(TelemetryReady(snapshot))

    def on_lines_ready(self, _message: LinesReady) -> None:
        # the lines stay in the inbox (so the watcher posts nothing more) until the next paint
        self._schedule_paint()

    def on_telemetry_ready(self, message: TelemetryReady) -> None:
        if self._closed:
            return
        gpu = message.snapshot.gpu
        names = tuple(g.name for g in gpu.gpus) if gpu is not None else ()
        self._snapshot = message.snapshot
        if names != self._gpu_names:
            self._gpu_names = names
            self._mark(self._run_ids())  # the GPUs (so the peaks) changed: recompute the MFU cells
        if self._paint_pending:
            self._devices_dirty = True  # shown with the coming paint: one screen update for all
        else:
            self._show_devices()

    def _show_devices(self) -> None:
        """The device panel, and the selected run's telemetry.jsonl (read once a second, here)."""
        self.query_one(DevicePanel).show(self._snapshot)
        self.query_one(RunTelemetry).poll()

    def _poll_controller(self) -> None:
        ctl = self.controller
        ctl.poll()
        procs = ctl.procs()
        old = self._procs
        changed = {rid for rid, p in procs.items() if old.get(rid) != p}
        changed |= set(old) - set(procs)
        self._procs = dict(procs)
        if changed:
            self._mark(changed)
            if self._selected in changed:
                self.refresh_bindings()

    def _mark(self, run_ids: Iterable[str]) -> None:
        self._dirty.update(run_ids)
        if self._dirty:
            self._schedule_paint()

    def _schedule_paint(self) -> None:
        if not self._paint_pending:
            self._paint_pending = True
            delay = max(0.01, self._last_paint + self.refresh_interval - time.monotonic())
            # a loop timer queueing the paint on the app's pump (set_timer repr()s the whole app)
            self._paint_handle = asyncio.get_running_loop().call_later(delay, self.call_next, self._paint)

    def _paint(self) -> None:
        """Push what changed since the last paint to the widgets."""
        self._paint_pending = False
        if self._closed:
            return
        self._last_paint = time.monotonic()
        batches = self._inbox.drain()
        if batches:
            self._dirty |= self.book.apply(batches)
        dirty, self._dirty = self._dirty, set()
        rows = []
        for rid in dirty:
            view, proc = self._view(rid), self._procs.get(rid)
            rows.append(make_row(rid, view, proc, mfu_for(view, proc, self._snapshot)))
        # rows where only rates/times moved are repainted at most every minor_interval (less jitter)
        later = self.query_one(RunsTable).update_rows(rows, time.monotonic(), self.minor_interval - 0.1)
        self._mark(later)
        if self._selected in dirty:
            if time.monotonic() - self._last_detail >= self.detail_interval:
                self._show_detail()
            else:
                self._dirty.add(self._selected)  # shown at a later paint, at most detail_interval apart
                self._schedule_paint()
        self._paint_header()
        if self._devices_dirty:
            self._devices_dirty = False
            self._show_devices()

    def _view(self, run_id: str) -> RunView | None:
        run = self.book.get(run_id)
        return run.view() if run is not None else None

    def _run_ids(self) -> set[str]:
        return set(self.book.runs) | set(self._procs)

    def _paint_header(self) -> None:
        statuses = (status_of(self._view(rid), self._procs.get(rid))[0] for rid in self._run_ids())
        text = header_text(self.session.title, self.session.host, statuses)
        if text != self._header:
            self._header = text
            self.query_one("#header-bar", Static).update(text, layout=False)

    def _show_detail(self) -> None:
        rid = self._selected
        view = self._view(rid) if rid else None
        proc = self._procs.get(rid) if rid else None
        tail = self.book.log_tail(rid) if rid else ()
        key = (rid, view.version if view else None, proc, len(tail), tail[-1] if tail else None)
        if key == self._shown:
            return
        self._shown = key
        self._last_detail = time.monotonic()
        findings = [f"{f.severity}: {f.message}" for f in view.findings] if view else []
        if view is not None and view.compliance_ok is not None and not findings:
            findings = ["compliance: all MLPerf rules pass so far"]
        self.query_one(DetailPane).show(view, tail, proc, findings=findings)

    def on_runs_table_selected(self, message: RunsTable.Selected) -> None:
        self._selected = rid = message.run_id
        run, proc = (self.book.get(rid), self._procs.get(rid)) if rid else (None, None)
        self.query_one(RunTelemetry).follow(telemetry_path(run, proc))
        self._show_detail()
        self.refresh_bindings()

    # ---- keys ---------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in RUN_ACTIONS:
            return True
        if self.controller is None or isinstance(self.screen, ModalScreen):
            return False  # nobody controls these runs: the keys do not exist
        rid = self._selected
        if rid is None:
            return None
        if action == "pause_resume":
            ok = self.controller.can("pause", rid) or self.controller.can("resume", rid)
        else:
            ok = self.controller.can(action, rid)
        return True if ok else None  # None: shown greyed out

    def _control(self, verb: str) -> None:
        rid = self._selected
        if rid is None or self.controller is None or not self.controller.can(verb, rid):
            return
        getattr(self.controller, verb)(rid)
        self.notify(f"{verb.replace('_', ' ')}: {rid}", timeout=3)
        self._last_detail = 0.0  # show the outcome in the detail pane at the next paint
        self._poll_controller()
        self.refresh_bindings()

    def action_pause_resume(self) -> None:
        rid = self._selected
        if rid is not None and self.controller is not None:
            self._control("resume" if self.controller.can("resume", rid) else "pause")

    def action_stop(self) -> None:
        self._control("stop")

    def action_restart(self) -> None:
        self._control("restart")

    def action_start_now(self) -> None:
        self._control("start_now")

    def action_kill(self) -> None:
        rid = self._selected
        if rid is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._control("kill")

        self.push_screen(ConfirmScreen(f"Kill {rid}? (SIGKILL to its whole process group)"), answered)

    def action_quit_app(self) -> None:
        live = [rid for rid, p in self._procs.items() if str(getattr(p, "state", "")).lower() in LIVE_STATES]
        if self.controller is None or not live:
            self.exit(0)
            return

        def chosen(choice: str | None) -> None:
            if choice is not None:
                self.stop_runs_on_exit = choice == "stop"
                self.exit(0)

        self.push_screen(QuitScreen(len(live)), chosen)

    def action_help(self) -> None:
        keys = [("↑/↓ pgup/pgdn", "select a run"), ("o", "sort by the next column"), ("l", "log only / plots")]
        keys += [
            (self.get_key_display(b), b.tooltip or b.description)
            for b in self.BINDINGS
            if isinstance(b, Binding) and b.action != "toggle_log"
        ]
        keys.append(("ctrl+p", "command palette"))
        self.push_screen(HelpScreen(keys))

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

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            self._close_filter(keep=False)

    def _close_filter(self, keep: bool) -> None:
        box = self.query_one("#filter", Input)
        if not keep:
            box.value = ""
            self.query_one(RunsTable).set_filter("")
        box.display = bool(box.value)
        self.query_one(RunsTable).focus()

    def action_cycle_theme(self) -> None:
        names = list(self._themes)
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        themes.save_theme(self.theme)
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_toggle_log(self) -> None:
        self.query_one(DetailPane).toggle_class("log-only")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Filter runs", "Show only runs whose id or state matches", self.action_filter)
        yield SystemCommand("Sort runs", "Sort by the next column", self.query_one(RunsTable).action_cycle_sort)
        yield SystemCommand("Next perfwatch theme", "Cycle dark, light, colour-blind", self.action_cycle_theme)
        commands = {
            "pause_resume": ("Pause/resume run", self.action_pause_resume),
            "stop": ("Stop run", self.action_stop),
            "kill": ("Kill run", self.action_kill),
            "restart": ("Restart run", self.action_restart),
            "start_now": ("Start queued run now", self.action_start_now),
        }
        for action, (title, fn) in commands.items():
            if self.check_action(action, ()):
                yield SystemCommand(title, f"{title} ({self._selected})", fn)
