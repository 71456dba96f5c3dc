"""Themes: colour-only TOML files, loaded by name.

The shipped themes (dark, light, colorblind) live in this package folder, so an installed
wheel has them. A user adds or overrides themes by dropping `NAME.toml` files into
`<config dir>/themes/`; the config dir is `$PERFWATCH_CONFIG_DIR`, else
`$XDG_CONFIG_HOME/perfwatch`, else `~/.config/perfwatch`, and it also keeps the user's
last choice (`tui.json`). Each file gives Textual's base colours plus perfwatch's
variables (`status-running`, `plot-target`, ...) that the widgets' CSS uses; a variable a
theme omits falls back to `DEFAULT_VARIABLES`. A user theme that cannot be read is
skipped and reported (`load_themes` returns the problems), never fatal.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from textual.theme import Theme

THEMES_DIR = Path(__file__).resolve().parent  # the shipped *.toml files
DEFAULT_THEME = "dark"
_BASE_FIELDS = (
    "primary", "secondary", "accent", "warning", "error", "success",
    "foreground", "background", "surface", "panel", "boost",
)
# fallbacks for every variable the widgets' CSS references (used when a theme omits one)
DEFAULT_VARIABLES = {
    "status-queued": "#8B93A1",
    "status-running": "#4C9AFF",
    "status-paused": "#F5A524",
    "status-reached": "#4ADE80",
    "status-done": "#A7B0BE",
    "status-failed": "#F3727F",
    "status-stalled": "#E879F9",
    "plot-line": "#4C9AFF",
    "plot-eval": "#A78BFA",
    "plot-target": "#4ADE80",
    "bad-line": "#F3727F",
    "muted": "#8B93A1",
    # the compare screen's curves, one colour per run (Tableau 10: tells ten runs apart on dark or light)
    "plot-series-0": "#4E79A7",
    "plot-series-1": "#F28E2B",
    "plot-series-2": "#E15759",
    "plot-series-3": "#76B7B2",
    "plot-series-4": "#59A14F",
    "plot-series-5": "#EDC948",
    "plot-series-6": "#B07AA1",
    "plot-series-7": "#FF9DA7",
    "plot-series-8": "#9C755F",
    "plot-series-9": "#BAB0AC",
}


def load_theme(path: Path) -> Theme:
    """One theme file → a Textual `Theme` named after the file."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    base: dict[str, Any] = {k: str(data[k]) for k in _BASE_FIELDS if k in data}
    if "primary" not in base:
        raise ValueError(f"{path}: a theme needs at least 'primary'")
    variables = {**DEFAULT_VARIABLES, **{k: str(v) for k, v in data.get("variables", {}).items()}}
    return Theme(name=path.stem, dark=bool(data.get("dark", True)), variables=variables, **base)


def load_themes(folder: Path = THEMES_DIR, user_folder: Path | None = None) -> tuple[dict[str, Theme], list[str]]:
    """The shipped themes, then the user's (`<config dir>/themes/*.toml`, same name overrides).

    Returns (themes by name, problems): a user file that is not a valid theme is skipped and named."""
    themes = {p.stem: load_theme(p) for p in sorted(folder.glob("*.toml"))} if folder.is_dir() else {}
    problems: list[str] = []
    user = user_folder if user_folder is not None else config_dir() / "themes"
    if user.is_dir():
        for path in sorted(user.glob("*.toml")):
            try:
                themes[path.stem] = load_theme(path)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                problems.append(f"theme {path}: {exc}")
    if not themes:
        themes["dark"] = Theme(name="dark", primary="#0178D4", dark=True, variables=dict(DEFAULT_VARIABLES))
    return themes, problems


def config_dir() -> Path:
    env = os.environ.get("PERFWATCH_CONFIG_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "perfwatch"


def saved_theme() -> str | None:
    """The theme the user picked last time, if any."""
    try:
        data = json.loads((config_dir() / "tui.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = data.get("theme") if isinstance(data, dict) else None
    return name if isinstance(name, str) else None


def save_theme(name: str) -> None:
    """Remember the theme (atomically); a read-only home is not an error."""
    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "tui.json.tmp"
        tmp.write_text(json.dumps({"theme": name}), encoding="utf-8")
        tmp.replace(folder / "tui.json")
    except OSError:
        pass
