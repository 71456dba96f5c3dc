"""One action table drives the keys, the help, the command palette; themes ship in the package."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import Input
from ui_helpers import attach_app, screen_text, table, until

from perfwatch.core.control.states import RunState, allowed
from perfwatch.ui import actions, themes
from perfwatch.ui.screens.dialogs import HelpScreen

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def test_every_action_has_one_id_and_a_key_shared_only_by_run_actions_that_exclude_each_other():
    ids = [a.id for a in actions.ACTIONS]
    assert len(set(ids)) == len(ids)
    by_key: dict[str, list[actions.UiAction]] = {}
    for a in actions.ACTIONS:
        for key in a.key.split(","):
            by_key.setdefault(key, []).append(a)
    shared = {key: acts for key, acts in by_key.items() if len(acts) > 1}
    assert set(shared) == {"p"}  # pause / resume
    for acts in shared.values():
        assert all(a.run_action for a in acts)
        for state in RunState:  # never two of them for one run
            assert sum(any(allowed(v, state) for v in a.verbs) for a in acts) <= 1


async def test_help_and_footer_come_from_the_table(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(110, 44)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        bound = {b.id for node in (app, app.main) for bs in node._bindings.key_to_bindings.values() for b in bs}
        assert {a.id for a in actions.ACTIONS} <= bound
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for a in actions.ACTIONS:
            assert a.description in text


async def test_palette_offers_what_applies_and_runs_it(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(110, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the command palette")
        await pilot.press(*"kill the selected")
        await pilot.pause(0.3)
        assert "kill the selected run" not in screen_text(app)  # nobody controls these runs
        for _ in range(len("kill the selected")):
            await pilot.press("backspace")
        await pilot.press(*"filter runs")
        await until(pilot, lambda: "filter runs by id or state" in screen_text(app), "the filter command")
        await pilot.press("enter")
        await until(pilot, lambda: app.main.query_one("#filter", Input).display, "the filter box open")


def test_shipped_themes_live_in_the_package_and_match_the_top_level_copies():
    shipped, problems = themes.load_themes(user_folder=Path("/nonexistent"))
    assert {"dark", "light", "colorblind"} <= set(shipped) and not problems
    assert themes.THEMES_DIR.is_relative_to(REPO / "perfwatch")
    for name in ("dark", "light", "colorblind"):
        assert (REPO / "themes" / f"{name}.toml").read_bytes() == (themes.THEMES_DIR / f"{name}.toml").read_bytes()


async def test_a_user_theme_from_the_config_dir_is_offered(tmp_path, mlperf_logs):
    user = tmp_path / "config" / "themes"
    user.mkdir(parents=True)
    (user / "solar.toml").write_text('primary = "#B58900"\nbackground = "#002B36"\n'
                                     '[variables]\nstatus-running = "#268BD2"\n')
    (user / "broken.toml").write_text("primary = \n")
    app = attach_app(mlperf_logs, theme="solar")
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        assert app.theme == "solar"
        assert app.theme_variables["status-running"].upper() == "#268BD2"
        assert "broken" not in app._themes
        await until(pilot, lambda: "broken.toml" in screen_text(app), "the broken theme named")


async def test_palette_on_another_screen_offers_only_global_actions(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(110, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await pilot.press("g", "ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the command palette")
        await pilot.press(*"next theme")
        await until(pilot, lambda: "next theme" in screen_text(app), "a global action")
        for _ in range(len("next theme")):
            await pilot.press("backspace")
        await pilot.press(*"filter runs")
        await pilot.pause(0.3)
        assert "filter runs by id or state" not in screen_text(app)  # a main-screen action: not here
