"""The command palette's perfwatch commands, one per entry of the action table (ui/actions.py).

Only actions that apply right now are offered (the same `check_action` that greys the
footer keys), each with its key, so the palette also teaches the keyboard; a run action
names the run it will act on (the one highlighted in the runs table).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode

from perfwatch.ui import actions
from perfwatch.ui.screens.main import MainScreen


class ActionCommands(Provider):
    """Every applicable action of the table, by its description."""

    def _available(self) -> list[tuple[actions.UiAction, str, Callable[[], object]]]:
        out: list[tuple[actions.UiAction, str, Callable[[], object]]] = []
        for a in actions.ACTIONS:
            if a.scope == "main" and not isinstance(self.screen, MainScreen):
                continue  # the run keys belong to the main screen, not to the compare or campaign view
            node: DOMNode = self.app if a.scope == "app" else self.screen
            if node.check_action(a.action, ()) is not True:
                continue
            title = f"{a.description} ({a.key.split(',')[0].replace('question_mark', '?').replace('slash', '/')})"
            if a.run_action and isinstance(node, MainScreen):
                title = f"{title}: {node.highlighted}"
            out.append((a, title, partial(self.app.run_action, a.action, node)))
        return out

    async def discover(self) -> Hits:
        for _a, title, run in self._available():
            yield DiscoveryHit(title, run)

    async def search(self, query: str) -> AsyncIterator[Hit]:
        matcher = self.matcher(query)
        for _a, title, run in self._available():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run)
