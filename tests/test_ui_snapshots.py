"""SVG snapshots of the main screens (pytest-textual-snapshot).

Deterministic by construction: finished logs (every time shown comes from the log, none
from the wall clock), `FakeSampler` for the device panel, a fixed terminal size.
Update after an intended change with `pytest tests/test_ui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import re

import pytest
from ui_helpers import attach_app, screen_text, table, until

from perfwatch.core.telemetry.fake import FakeSampler


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def _loaded(app, n=35, devices=True, press=()):
    """Wait for the runs (and a device sample), press the keys, wait until the engine's answer is shown."""

    async def wait(pilot):
        await until(pilot, lambda: len(table(app).visible_ids) == n, f"{n} runs")
        if devices:
            await until(pilot, lambda: "GPU" in str(app.query_one("#devices").render()), "a telemetry sample")
        await pilot.press(*press)
        await until(pilot, lambda: app.main.settled, "the selected run's detail")
        await pilot.pause()

    return wait


def test_snapshot_main_dark(snap_compare, mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark", sampler=FakeSampler())
    assert snap_compare(app, terminal_size=(120, 40), run_before=_loaded(app, press=["down", "down"]))


def test_snapshot_light_llama(snap_compare, mlperf_logs):
    app = attach_app(mlperf_logs, theme="light", sampler=FakeSampler())
    assert snap_compare(app, terminal_size=(120, 40), run_before=_loaded(app, press=["end"]))


def test_snapshot_colorblind_small_no_gpu(snap_compare, mlperf_logs):
    sampler = FakeSampler(init_error="NVML Shared Library Not Found")
    app = attach_app(mlperf_logs, theme="colorblind", sampler=sampler)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_loaded(app))


def test_snapshot_help(snap_compare, mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    assert snap_compare(app, terminal_size=(100, 32), run_before=_loaded(app, devices=False), press=["question_mark"])


def test_snapshot_filter(snap_compare, mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    assert snap_compare(app, terminal_size=(100, 30), run_before=_loaded(app, devices=False), press=["slash", *"bert"])


def test_snapshot_compare(snap_compare, mlperf_logs):
    from textual.widgets import DataTable

    app = attach_app(mlperf_logs, theme="dark")

    async def run_before(pilot):
        await _loaded(app, devices=False)(pilot)
        await pilot.press("space", "down", "space", "down", "space", "c")
        await until(pilot, lambda: app.screen.query(DataTable) and app.screen.query_one(DataTable).row_count == 3,
                    "3 runs compared")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_campaign_view(snap_compare, mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")

    async def run_before(pilot):
        await _loaded(app, devices=False)(pilot)
        await pilot.press("g")
        await until(pilot, lambda: len(getattr(app.screen, "rows", ())) == 4, "four groups")
        app.screen.query_one("DataTable").move_cursor(row=1)
        await pilot.press("b")
        await until(pilot, lambda: any(r.speedup for r in app.screen.rows), "the baseline ratio")
        # the table's columns are widened on a later refresh: wait until the interval is drawn whole
        await until(pilot, lambda: re.search(r"×\d\.\d\d \[\d\.\d\d–\d\.\d\d\]", screen_text(app)) is not None,
                    "the speed-up interval drawn whole")

    assert snap_compare(app, terminal_size=(150, 20), run_before=run_before)
