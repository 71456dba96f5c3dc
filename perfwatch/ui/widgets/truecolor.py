"""Line filters for widgets that draw only in their own theme styles.

Textual converts ANSI colours (and `dim`) to truecolor on every rendered line (`ANSIToTruecolor`):
a new Strip, five caches and a new segment list per line, a fifth of the main thread's time with 16
live runs. A widget whose styles are all RGB and not dim gets nothing from it, so `line_filters`
leaves it out for such a widget; a theme that names an ANSI colour (or dims text) keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.style import Style
from textual.app import App
from textual.filter import ANSIToTruecolor, LineFilter

__all__ = ["line_filters", "truecolor_only"]


def truecolor_only(styles: Iterable[Style]) -> bool:
    """True when no style has a colour without an RGB triplet (ANSI, default) nor `dim`: what
    `ANSIToTruecolor` changes."""
    for style in styles:
        if style.dim:
            return False
        for color in (style.color, style.bgcolor):
            if color is not None and color.triplet is None:
                return False
    return True


def line_filters(app: App, styles_are_truecolor: bool) -> Sequence[LineFilter]:
    """The app's filters, less the ANSI-to-truecolor one when the widget's styles make it a no-op."""
    filters = app.get_line_filters()
    if styles_are_truecolor:
        return [f for f in filters if not isinstance(f, ANSIToTruecolor)]
    return filters
