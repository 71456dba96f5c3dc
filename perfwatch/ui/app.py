"""The perfwatch Textual app shell: the engine's lifetime, themes, global keys, help and palette.

What the user looks at is `MainScreen` (screens/main.py). The app owns the `LiveEngine`
(core/engine.py): it starts it on mount and stops it on unmount; the engine calls back on
its own thread and the app turns each call into one `EngineUpdated` message for the main
screen (coalesced: a queued one is replaced). Background threads never touch widgets.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from perfwatch.core.control.states import RunState
from perfwatch.core.engine import LiveEngine, Session, WatcherFactory
from perfwatch.core.telemetry.types import Sampler
from perfwatch.ui import actions, themes
from perfwatch.ui.commands import ActionCommands
from perfwatch.ui.messages import EngineUpdated
from perfwatch.ui.screens.dialogs import HelpScreen, QuitScreen
from perfwatch.ui.screens.main import MainScreen

WATCH_MIN_INTERVAL = 0.5  # seconds between log read passes (the table paints at most once a second)


class PerfwatchApp(App[int]):
    """Watch (and, with a controller, steer) the runs of one session."""

    TITLE = "perfwatch"
    BINDINGS = actions.bindings("app")
    COMMANDS = App.COMMANDS | {ActionCommands}

    def __init__(
        self,
        session: Session,
        *,
        theme: str | None = None,
        sampler: Sampler | None = None,
        sampler_interval: float = 1.0,
        refresh_interval: float = 1.0,
        detail_interval: float = 1.0,
        minor_interval: float = 1.0,
        control_interval: float = 0.5,
        watcher_factory: WatcherFactory | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.engine = LiveEngine(
            session, sampler=sampler, sampler_interval=sampler_interval, control_interval=control_interval,
            watch_min_interval=WATCH_MIN_INTERVAL, watcher_factory=watcher_factory,
        )
        self.main = MainScreen(
            self.engine, has_devices=sampler is not None, refresh_interval=refresh_interval,
            detail_interval=detail_interval, minor_interval=minor_interval,
        )
        self._themes, self._theme_problems = themes.load_themes()
        self._wanted_theme = theme
        self.stop_runs_on_exit = False

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **themes.DEFAULT_VARIABLES}

    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        for theme in self._themes.values():
            self.register_theme(theme)
        name = self._wanted_theme or themes.saved_theme() or themes.DEFAULT_THEME
        self.theme = name if name in self._themes else next(iter(self._themes))
        for problem in self._theme_problems:
            self.notify(problem, title="perfwatch: theme", severity="warning", timeout=10)
        self.engine.start(self._engine_woke)

    def on_unmount(self) -> None:
        self.engine.stop()

    def _engine_woke(self) -> None:
        """The engine's thread: one message; the main screen takes the update on the app's thread."""
        self.main.post_message(EngineUpdated())

    # ---- global keys ----------------------------------------------------------------------------
    def action_quit_app(self) -> None:
        snap = self.engine.snapshot
        procs = snap.procs if snap is not None else {}
        live = [rid for rid, p in procs.items() if p.state.alive or p.state is RunState.QUEUED]
        if not self.engine.controlled or not live:
            self.exit(0)
            return
        queued = sum(1 for rid in live if procs[rid].state is RunState.QUEUED)
        if self.session.owns_campaign:
            leave = "Leave: a background perfwatch keeps the campaign going (queued runs start as planned)."
        else:
            leave = "Leave: the perfwatch that owns the campaign carries on with it."

        def chosen(choice: str | None) -> None:
            if choice is not None:
                self.stop_runs_on_exit = choice == "stop"
                self.exit(0)

        self.push_screen(QuitScreen(len(live), queued, leave), chosen)

    async def action_quit(self) -> None:
        """ctrl+q too asks what happens to live runs."""
        self.action_quit_app()

    def action_help(self) -> None:
        rows = list(actions.NAVIGATION)
        for a in actions.ACTIONS:
            binding = Binding(a.key, a.action, a.label)
            rows.append((self.get_key_display(binding), a.description))
        self.push_screen(HelpScreen(rows))

    def action_cycle_theme(self) -> None:
        names = list(self._themes)
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        themes.save_theme(self.theme)
        self.notify(f"theme: {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's own theme picker and keys screen would bypass perfwatch's themes and help
        for command in super().get_system_commands(screen):
            if command.title not in ("Theme", "Keys", "Quit"):
                yield command
