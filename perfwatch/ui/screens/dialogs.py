"""Modal dialogs: confirm a kill, choose what happens to live runs on quit, and the help."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


def _dialog_css(screen: str) -> str:
    """The look every dialog shares, scoped to one screen class."""
    return f"""
    {screen} {{ align: center middle; }}
    {screen} .dialog {{
        width: 64;
        height: auto;
        max-height: 90%;
        padding: 1 2;
        border: thick $primary;
        background: $surface;
    }}
    {screen} .dialog-question {{ width: 100%; margin-bottom: 1; text-style: bold; }}
    {screen} .dialog-buttons {{ height: auto; }}
    {screen} .dialog-buttons Button {{ margin-right: 1; }}
    {screen} .dialog-hint {{ color: $muted; }}
    """


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no question; `y` confirms, `n`/escape declines (the default)."""

    DEFAULT_CSS = _dialog_css("ConfirmScreen")

    BINDINGS = [
        Binding("y", "answer(True)", "yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "no", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("No", id="no", variant="primary")
                yield Button("Yes (y)", id="yes", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class QuitScreen(ModalScreen[str | None]):
    """Quit while runs are live: leave them running (default), stop them, or stay."""

    DEFAULT_CSS = _dialog_css("QuitScreen") + "QuitScreen .dialog-hint { width: 100%; margin-top: 1; }"

    BINDINGS = [
        Binding("l,enter", "choose('leave')", "leave running", id="quit.leave"),
        Binding("s", "choose('stop')", "stop runs", id="quit.stop"),
        Binding("escape,c", "choose(None)", "cancel", id="quit.cancel"),
    ]

    def __init__(self, live: int, queued: int = 0, leave: str = "") -> None:
        super().__init__()
        self.live, self.queued, self.leave = live, queued, leave

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            of_which = f" ({self.queued} not started yet)" if self.queued else ""
            yield Label(f"{self.live} run(s) still live{of_which}. Quit and…", classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Leave them running (l)", id="leave", variant="primary")
                yield Button("Stop them (s)", id="stop", variant="error")
                yield Button("Cancel (esc)", id="cancel")
            if self.leave:
                yield Label(self.leave, classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#leave", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


class HelpScreen(ModalScreen[None]):
    """Every key with what it does; any of escape, `?` or `q` closes it."""

    DEFAULT_CSS = _dialog_css("HelpScreen") + """
    HelpScreen #help-keys { height: auto; }
    HelpScreen .dialog { width: 84; max-width: 96%; }  /* a key and its description on one line */
    """

    BINDINGS = [Binding("escape,question_mark,q", "close", "close", id="help.close")]

    def __init__(self, keys: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        lines = [f"{key:>10}  {desc}" for key, desc in self.keys]
        with Vertical(classes="dialog", id="help"):
            yield Label("perfwatch keys", classes="dialog-question")
            yield Static("\n".join(lines), id="help-keys")
            yield Label("escape closes", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)
