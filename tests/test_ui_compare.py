"""The campaign view (groups, olympic score so far, baseline ratio) and the compare screen, via Pilot."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable
from ui_helpers import attach_app, screen_text, table, until

from perfwatch.ui.screens.compare import CompareScreen
from perfwatch.ui.screens.groups import GroupsScreen

BASE = "v2.1/MosaicML/results/8xA100_80GB-baseline/bert"
METHODS = "v2.1/MosaicML/results/8xA100_80GB-methods/bert"


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def _olympic_minutes(views):
    # MLPerf's rule, written out here: drop the fastest and the slowest, mean of the rest
    ttt = sorted(v.time_to_train_ms / 60_000 for v in views)
    return sum(ttt[1:-1]) / len(ttt[1:-1])


async def test_marked_runs_compare_side_by_side(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        first, second = table(app).visible_ids[:2]
        await pilot.press("space", "down", "space")
        assert table(app).marked == {first, second}
        assert screen_text(app).count("● v2.1/") == 2
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare screen")
        screen = app.screen
        await until(pilot, lambda: screen.query_one(DataTable).row_count == 2, "two rows")
        text = screen_text(app)
        assert "━ result_0" in text and "━ result_1" in text  # the legend of the overlaid curves
        assert "5:19:13" in text and "5:36:36" in text  # each run's time-to-train, side by side
        assert "aborted" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, CompareScreen)


async def test_campaign_view_scores_groups_and_compares_with_a_baseline(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        views = app.main.snapshot.views
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupsScreen), "the campaign view")
        screen = app.screen
        await until(pilot, lambda: len(screen.rows) == 4, "four groups")
        text = screen_text(app)
        assert "4/5" in text  # resnet: 4 of 5 converged, MLPerf needs 5
        assert "10/10" in text
        base = [v for rid, v in views.items() if rid.startswith(BASE)]
        methods = [v for rid, v in views.items() if rid.startswith(METHODS)]
        assert f"{_olympic_minutes(base):.2f}" in text and f"{_olympic_minutes(methods):.2f}" in text
        # the live RCP projection of the highlighted group, from mlperf_logging's own RCP tables
        screen.query_one(DataTable).move_cursor(row=3)  # llama2_70b_lora, closed division
        await until(pilot, lambda: "RCP: on track" in screen_text(app), "llama's RCP projection")
        screen.query_one(DataTable).move_cursor(row=1)  # the MosaicML baseline (open division)
        await until(pilot, lambda: "RCP: n/a (open division" in screen_text(app), "no RCP in the open division")
        await pilot.press("b")
        expected = _olympic_minutes(base) / _olympic_minutes(methods)
        await until(pilot, lambda: f"×{expected:.2f}" in screen_text(app), f"methods ×{expected:.2f} vs baseline")
        assert "baseline" in screen_text(app)
        await pilot.press("enter")  # compare the baseline group's runs
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), "the group's compare screen")
        await until(pilot, lambda: app.screen.query_one(DataTable).row_count == 10, "its 10 runs")
        await pilot.press("escape", "escape")
        assert app.screen is app.main


def _legend(plot) -> dict[str, object]:
    """label -> colour of its legend entry, read from the drawn lines."""
    out = {}
    for y in range(plot.size.height):
        for seg in plot.render_line(y):
            text = seg.text.strip()
            if text[:2] in ("━ ", "┅ "):
                out[text[2:]] = seg.style.color
    return out


async def test_compare_gives_each_run_one_colour_in_every_plot_and_the_table(mlperf_logs):
    from perfwatch.ui.widgets.plot import Plot

    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupsScreen), "the campaign view")
        screen = app.screen
        await until(pilot, lambda: len(screen.rows) == 4, "four groups")
        screen.query_one(DataTable).move_cursor(row=1)  # the MosaicML baseline: ten bert runs
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare screen")
        compare = app.screen
        await until(pilot, lambda: compare.query_one(DataTable).row_count == 10, "its 10 runs")
        await pilot.pause()
        names = [f"result_{k}" for k in range(10)]
        dt = compare.query_one(DataTable)
        rows = [dt.get_row_at(i)[0] for i in range(10)]
        assert [r.plain[2:] for r in rows] == names  # run-id order, numbers as numbers
        evals = _legend(compare.query_one("#compare-eval", Plot))
        rates = _legend(compare.query_one("#compare-throughput", Plot))
        assert set(evals) == set(rates) == set(names)  # every name whole in both legends
        assert evals == rates  # one colour per run in both plots
        assert len(set(evals.values())) == 10
        for row in rows:  # and the table's marker in the same colour
            assert row.spans[0].style.color == evals[row.plain[2:]]
