"""Keyboard run control against real processes started by the real scheduler."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil
import pytest
from textual.command import CommandPalette
from ui_helpers import WORKLOAD, screen_text, table, until

from perfwatch.core.control.campaign import load_campaign
from perfwatch.core.engine import launch_session
from perfwatch.ui.app import PerfwatchApp
from perfwatch.ui.screens.dialogs import ConfirmScreen, QuitScreen


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def session(tmp_path):
    (tmp_path / "spin.py").write_text(WORKLOAD)
    (tmp_path / "c.yaml").write_text(
        "name: uictl\n"
        "defaults: {repeat: 2}\n"
        "scheduler: {max_parallel: 1}\n"
        "jobs:\n"
        "  - name: spin\n"
        "    cmd: [python, spin.py]\n"
        "    grace: 2s\n"
    )
    s = launch_session(load_campaign(tmp_path / "c.yaml", base=tmp_path), (tmp_path / "logdir").resolve())
    yield s
    ctl = s.controller
    assert ctl is not None
    ctl.close(stop_runs=True)  # never leave a process behind, whatever the test did
    for info in ctl.procs().values():
        assert info.pid is None or not psutil.pid_exists(info.pid) or _status(info.pid) == "zombie"


def _status(pid: int | None) -> str:
    try:
        return psutil.Process(pid).status() if pid else "gone"
    except psutil.NoSuchProcess:
        return "gone"


def _proc(app: PerfwatchApp, run_id: str):
    return app.session.controller.procs()[run_id]


async def test_pause_resume_stop_restart_start_now_kill(session):
    app = PerfwatchApp(session, theme="dark", control_interval=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: _proc(app, "spin.r0").state == "running", "spin.r0 running")
        await until(pilot, lambda: table(app).visible_ids == ["spin.r0", "spin.r1"], "both runs listed")
        pid = _proc(app, "spin.r0").pid
        assert table(app).selected == "spin.r0"
        # keys that do not apply are greyed out, not hidden
        assert app.main.check_action("start_now", ()) is None
        assert app.main.check_action("pause", ()) is True

        await pilot.press("p")
        await until(pilot, lambda: _status(pid) == psutil.STATUS_STOPPED, "the process stopped (state T)")
        await until(pilot, lambda: "‖ paused" in screen_text(app), "the paused row")
        await pilot.press("p")
        await until(pilot, lambda: _status(pid) in ("running", "sleeping"), "the process resumed")
        await until(pilot, lambda: "▶ running" in screen_text(app), "the running row")

        await pilot.press("down")  # the queued run
        assert table(app).selected == "spin.r1"
        assert app.main.check_action("start_now", ()) is True
        assert app.main.check_action("pause", ()) is None
        await pilot.press("enter")
        await until(pilot, lambda: _proc(app, "spin.r1").state == "running", "spin.r1 started now")
        pid1 = _proc(app, "spin.r1").pid

        await pilot.press("s")
        await until(pilot, lambda: _proc(app, "spin.r1").state == "stopped", "spin.r1 stopped")
        assert _status(pid1) == "gone"
        await until(pilot, lambda: app.main.check_action("restart", ()) is True, "restart offered for spin.r1")
        await pilot.press("r")  # a new attempt, queued behind spin.r0 (max_parallel: 1)...
        await until(pilot, lambda: _proc(app, "spin.r1").attempt == 2, "spin.r1 attempt 2")
        assert _proc(app, "spin.r1").state == "queued"
        await until(pilot, lambda: app.main.check_action("start_now", ()) is True, "start offered for attempt 2")
        await pilot.press("enter")  # ...unless started now
        await until(pilot, lambda: _proc(app, "spin.r1").state == "running", "spin.r1 restarted")

        await pilot.press("up", "k")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # declining keeps it alive
        assert _status(pid) in ("running", "sleeping")
        await pilot.press("k", "y")
        await until(pilot, lambda: _proc(app, "spin.r0").state == "killed", "spin.r0 killed")
        assert _status(pid) == "gone"

        await pilot.press("q")  # spin.r1 is still live: asks
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, QuitScreen)
        await pilot.press("q", "s")
    assert app.stop_runs_on_exit is True


async def test_quit_leaves_runs_running_by_default(session):
    app = PerfwatchApp(session, theme="dark", control_interval=0.1)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: _proc(app, "spin.r0").state == "running", "spin.r0 running")
        await pilot.press("q", "enter")
    assert app.stop_runs_on_exit is False
    assert _status(_proc(app, "spin.r0").pid) in ("running", "sleeping")
    assert Path(os.fspath(session.logdir), "spin.r0", "mllog.txt").exists()


async def _palette(pilot, app: PerfwatchApp, query: str, title: str) -> None:
    """Open the command palette, type `query`, wait for the command `title`, run it."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the command palette")
    await pilot.press(*query)
    await until(pilot, lambda: title in screen_text(app), f"the command {title!r}")
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, CommandPalette), "the palette closed")


async def test_palette_runs_every_run_action_on_the_highlighted_run(session):
    app = PerfwatchApp(session, theme="dark", control_interval=0.1)
    async with app.run_test(size=(150, 40)) as pilot:
        await until(pilot, lambda: app.main.check_action("pause", ()) is True, "spin.r0 running, pause offered")
        pid = _proc(app, "spin.r0").pid
        await until(pilot, lambda: table(app).row("spin.r0").cells["tp_now"] != "–", "spin.r0's live rate")

        await _palette(pilot, app, "pause the", "pause the selected run (p): spin.r0")
        await until(pilot, lambda: _status(pid) == psutil.STATUS_STOPPED, "spin.r0's process stopped")
        await until(pilot, lambda: "‖ paused" in table(app).row("spin.r0").cells["state"], "the paused row")
        assert table(app).row("spin.r0").cells["tp_now"] == "–"  # no live rate while paused
        assert "samp/s – (paused)" in screen_text(app)
        await until(pilot, lambda: "p resume" in screen_text(app), "the footer's `p resume`")
        assert "p pause" not in screen_text(app)

        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the command palette")
        await pilot.press(*"pause the")
        await pilot.pause(0.3)
        assert "pause the selected run (p)" not in screen_text(app)  # it is paused: resume is offered
        await pilot.press("escape")
        await _palette(pilot, app, "resume the", "resume the selected paused run (p): spin.r0")
        await until(pilot, lambda: _status(pid) in ("running", "sleeping"), "spin.r0 resumed")
        await until(pilot, lambda: "p pause" in screen_text(app), "the footer's `p pause` again")

        await pilot.press("down")
        await until(pilot, lambda: app.main.check_action("start_now", ()) is True, "start offered for spin.r1")
        await _palette(pilot, app, "start the", "start the selected queued run now (enter): spin.r1")
        await until(pilot, lambda: _proc(app, "spin.r1").state == "running", "spin.r1 started")
        await until(pilot, lambda: app.main.check_action("stop", ()) is True, "stop offered for spin.r1")
        await _palette(pilot, app, "stop the", "stop the selected run (SIGTERM, then SIGKILL) (s): spin.r1")
        await until(pilot, lambda: _proc(app, "spin.r1").state == "stopped", "spin.r1 stopped")
        assert _proc(app, "spin.r0").state == "running"
        await until(pilot, lambda: app.main.check_action("restart", ()) is True, "restart offered for spin.r1")
        await _palette(pilot, app, "restart the", "restart the selected run (a new attempt) (r): spin.r1")
        await until(pilot, lambda: _proc(app, "spin.r1").attempt == 2, "spin.r1's second attempt")

        await pilot.press("up")
        await until(pilot, lambda: app.main.check_action("kill", ()) is True, "kill offered for spin.r0")
        await _palette(pilot, app, "kill the", "kill the selected run (asks first) (k): spin.r0")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the kill question")
        assert "Kill spin.r0?" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: _proc(app, "spin.r0").state == "killed", "spin.r0 killed")


async def test_keys_are_answered_while_a_controller_poll_is_slow(session, monkeypatch):
    """A poll that takes seconds (Slurm's squeue may take up to 30 s) holds nothing the keys need: the
    row says `stopping…` at once, the cursor moves during the poll, the stop shows once it is done."""
    ctl = session.controller
    real_poll = ctl.poll
    slow, inside, release = threading.Event(), threading.Event(), threading.Event()

    def poll() -> None:
        if slow.is_set():
            inside.set()
            release.wait(10.0)  # the poll lasts until the test has pressed its keys
            inside.clear()
        real_poll()

    monkeypatch.setattr(ctl, "poll", poll)
    app = PerfwatchApp(session, theme="dark", control_interval=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.main.check_action("stop", ()) is True, "spin.r0 running, stop offered")
        slow.set()
        await until(pilot, lambda: inside.is_set(), "a slow poll under way")
        await pilot.press("s")
        await until(pilot, lambda: table(app).row("spin.r0").cells["state"] == "stopping…", "the pending row")
        await pilot.press("down")
        assert table(app).selected == "spin.r1"
        assert inside.is_set()  # all of this while the poll was still running
        slow.clear()
        release.set()
        await until(pilot, lambda: _proc(app, "spin.r0").state == "stopped", "spin.r0 stopped")
        await until(pilot, lambda: "stopped" in table(app).row("spin.r0").cells["state"], "the stopped row")



def test_campaign_view_counts_a_run_that_crashed_before_run_stop_as_ended() -> None:
    """The campaign view's stopped/runs from the engine's states, as the header and report count them."""
    from perfwatch.core.model.run import Run
    from perfwatch.core.model.status import RunStatus, State, Verdict
    from perfwatch.core.results.groups import group_rows

    run = Run("job.r0")
    run.feed_block(b':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", '
                   b'"key": "run_start", "value": null, "metadata": {}}\n', last=True)
    view = run.view()
    assert view.phase != "stopped"  # the log never said run_stop
    (row,) = group_rows({"job.r0": view})
    assert row.stopped == 0
    crashed = RunStatus(State.CRASHED, Verdict.NO_TARGET, "crashed with exit 2", True, "failed")
    (row,) = group_rows({"job.r0": view}, statuses={"job.r0": crashed})
    assert row.stopped == 1
