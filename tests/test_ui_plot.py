"""The plot widget: lines (not dots), SI labels, zero-based rates, a time axis, a labelled target."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from perfwatch.ui import themes
from perfwatch.ui.widgets.plot import Plot, PlotLine, fmt_si, raster


def test_si_labels():
    assert [fmt_si(v) for v in (1_311_000, 15_130, 2_361, 561.2, 0.759, 0, -2_500)] == [
        "1.31M", "15.1k", "2.36k", "561", "0.759", "0", "-2.5k"]


def test_a_steep_line_has_no_gaps():
    # from bottom-left to top-right across 10 cells and 4 rows: every column and every row is drawn
    bits, owner = raster([[(0.0, 0.0), (1.0, 1.0)]], 10, 4, 0.0, 1.0, 0.0, 1.0)
    assert all(any(bits[r][c] for r in range(4)) for c in range(10))
    assert all(any(row) for row in bits)
    assert {o for row in owner for o in row} == {-1, 0}


class _One(App[None]):
    def __init__(self, plot: Plot) -> None:
        super().__init__()
        self.plot = plot

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **themes.DEFAULT_VARIABLES}

    def compose(self) -> ComposeResult:
        yield self.plot


@pytest.mark.parametrize("zero", [True, False])
async def test_rates_from_zero_time_axis_and_target(zero):
    plot = Plot("throughput", unit="samples/s", zero_based=zero)
    points = [(1000.0 * k, 2338.0 + (k % 3) * 6) for k in range(0, 600)]  # a 2,338-2,350 wobble, 10 min
    async with _One(plot).run_test(size=(60, 12)) as pilot:
        plot.set_series([PlotLine("", points)], target=2400.0, start_ms=0.0, target_label="target")
        await pilot.pause()
        text = plot.text
    lines = text.splitlines()
    assert lines[0].startswith("throughput (samples/s)") and "╌ target 2.4k" in lines[0]
    assert "└0:00" in lines[-1] and lines[-1].rstrip().endswith("9:59")
    if zero:
        assert "0│" in text  # the axis starts at zero: the wobble is a flat line near the top
        drawn_rows = [line for line in lines[1:-1] if any("\u2800" < ch <= "\u28ff" for ch in line)]
        assert len(drawn_rows) <= 2
    else:
        assert "0│" not in text


async def test_several_series_get_a_legend():
    plot = Plot("eval")
    async with _One(plot).run_test(size=(70, 10)) as pilot:
        plot.set_series([PlotLine("a.r0", [(0.0, 0.1), (10.0, 0.5)]), PlotLine("b.r0", [(0.0, 0.2), (10.0, 0.7)])])
        await pilot.pause()
        assert "━ a.r0" in plot.text.splitlines()[0] and "━ b.r0" in plot.text.splitlines()[0]


async def test_numbered_series_keep_their_colour_and_the_legend_wraps():
    """12 curves: colours 0-9 solid, 10 and 11 dashed in the colours of 0 and 1; every label whole."""
    labels = [f"v2.1/MosaicML/result_{k}" for k in range(12)]
    series = [PlotLine(label, [(0.0, 0.1 * k), (10.0, 0.1 * k + 0.05)], k) for k, label in enumerate(labels)]
    plot = Plot("eval")
    async with _One(plot).run_test(size=(70, 16)) as pilot:
        plot.set_series(series)
        await pilot.pause()
        lines = plot.text.splitlines()
        legend_colours = {}
        for y in range(plot.size.height):
            for seg in plot.render_line(y):
                for label in labels:
                    if seg.text.strip().endswith(label) and seg.text.strip()[2:] == label:
                        legend_colours[label] = (seg.text.strip()[0], seg.style.color)
    assert set(legend_colours) == set(labels), lines  # no label cut
    assert sum(1 for line in lines if "result_" in line) >= 3  # the legend took several lines
    marks = [legend_colours[label][0] for label in labels]
    colours = [legend_colours[label][1] for label in labels]
    assert marks == ["━"] * 10 + ["┅"] * 2
    assert len(set(colours[:10])) == 10
    assert colours[10] == colours[0] and colours[11] == colours[1]


def test_a_dashed_series_leaves_gaps():
    solid, _ = raster([[(0.0, 0.5), (1.0, 0.5)]], 20, 1, 0.0, 1.0, 0.0, 1.0)
    gappy, _ = raster([[(0.0, 0.5), (1.0, 0.5)]], 20, 1, 0.0, 1.0, 0.0, 1.0, gaps=[True])
    assert all(solid[0]) and not all(gappy[0]) and any(gappy[0])
