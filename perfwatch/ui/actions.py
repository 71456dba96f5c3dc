"""The one table of perfwatch's keyboard actions.

Each entry says what the action is called (`id`, the Binding id), which key runs it, what it
does (footer label, help and command-palette text), who handles it (the app shell or the
main screen) and which runs it applies to: `verbs` names the controller verbs behind a run
action. Two run actions may share a key when they never apply to the same run at once
(`p`: pause a running run, resume a paused one); the footer shows the one that applies. The
bindings, the help screen, the command palette and the greying of keys that do not apply
(`check_action`) are all derived from this table, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding, BindingType

Scope = Literal["app", "main"]


@dataclass(frozen=True, slots=True)
class UiAction:
    id: str  # the Binding id (users may remap keys by it)
    action: str  # the Textual action: `action_<name>` on the app or the main screen
    key: str  # Textual key list ("n,escape")
    label: str  # short footer label
    description: str  # help screen and command palette
    scope: Scope
    verbs: tuple[str, ...] = ()  # controller verbs: applies to the selected run while one of them is allowed
    show: bool = True  # in the footer

    @property
    def run_action(self) -> bool:
        return bool(self.verbs)


ACTIONS: tuple[UiAction, ...] = (
    UiAction("app.quit", "quit_app", "q", "quit", "quit (asks first when runs are live)", "app"),
    UiAction("app.help", "help", "question_mark", "help", "show every key", "app"),
    UiAction("main.filter", "filter", "slash", "filter", "filter runs by id or state", "main"),
    UiAction("main.sort", "cycle_sort", "o", "sort", "sort runs by the next column", "main", show=False),
    UiAction("app.theme", "cycle_theme", "t", "theme", "next theme (dark, light, colour-blind, yours)", "app"),
    UiAction("main.log", "toggle_log", "l", "log", "log only, keys to the log / plots and log", "main",
             show=False),
    UiAction("main.mark", "toggle_mark", "space", "mark", "mark / unmark the run for comparing", "main",
             show=False),
    UiAction("main.compare", "compare", "c", "compare", "compare marked runs (or the run's group)",
             "main", show=False),
    UiAction("main.groups", "groups", "g", "groups", "campaign view: groups, scores, baseline", "main",
             show=False),
    UiAction("main.ranks", "ranks", "d", "ranks", "ranks of the selected distributed run: straggler, stacks",
             "main", show=False),
    UiAction("run.pause", "pause", "p", "pause", "pause the selected run", "main", verbs=("pause",)),
    UiAction("run.resume", "resume", "p", "resume", "resume the selected paused run", "main",
             verbs=("resume",)),
    UiAction("run.stop", "stop", "s", "stop", "stop the selected run (SIGTERM, then SIGKILL)", "main",
             verbs=("stop",)),
    UiAction("run.kill", "kill", "k", "kill", "kill the selected run (asks first)", "main", verbs=("kill",)),
    UiAction("run.restart", "restart", "r", "restart", "restart the selected run (a new attempt)", "main",
             verbs=("restart",)),
    UiAction("run.start_now", "start_now", "enter", "start", "start the selected queued run now", "main",
             verbs=("start_now",)),
)
# keys handled by the runs table itself, listed in the help only
NAVIGATION: tuple[tuple[str, str], ...] = (
    ("↑/↓ pgup/pgdn", "select a run"),
    ("home/end", "first / last run"),
    ("ctrl+p", "command palette (every action below, by name)"),
    ("tab", "the log: scroll, / search, n/N, esc back"),
)
BY_ACTION = {a.action: a for a in ACTIONS}


def first_on_key(key: str) -> UiAction:
    """The first action of the table bound to `key` (the one shown greyed when none applies)."""
    return next(a for a in ACTIONS if a.key == key)


def bindings(scope: Scope) -> list[BindingType]:
    """The Textual bindings of one scope, from the table."""
    return [
        Binding(a.key, a.action, a.label, id=a.id, show=a.show, tooltip=a.description)
        for a in ACTIONS
        if a.scope == scope
    ]
