"""Keys typed faster than the screen repaints, in a real terminal: tmux sends `Down Down s` (and
`Down Down Space`) as one burst to `perfwatch launch`, and the run under the cursor is the one acted on."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from test_e2e_tmux import Tmux, _pids, _state, cleanup
from test_metrics_endpoint import free_port
from ui_helpers import WORKLOAD

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

RUNS = ("spin.r0", "spin.r1", "spin.r2")


def _row(screen: str, run_id: str) -> str:
    return next((line for line in screen.splitlines() if run_id in line and "│" not in line), "")


def _wait(cond, what: str, tmux: Tmux, steps: int = 150) -> None:
    for _ in range(steps):
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"never: {what}; the terminal shows:\n{tmux.screen()}")


def test_a_burst_of_keys_acts_on_the_highlighted_run(tmp_path):
    (tmp_path / "spin.py").write_text(WORKLOAD)
    (tmp_path / "c.yaml").write_text(
        "name: keys\ndefaults: {repeat: 3}\nscheduler: {max_parallel: 3}\n"
        "jobs:\n  - name: spin\n    cmd: [python, spin.py]\n    grace: 2s\n"
    )
    env = f"PERFWATCH_CONFIG_DIR={tmp_path / 'cfg'} PYTHONPATH={Path(__file__).resolve().parents[1]}"
    cmd = (f"cd {tmp_path} && env {env} {sys.executable} -m perfwatch launch c.yaml --logdir logdir --theme dark;"
           " echo perfwatch-exited; sleep 60")
    tmux = Tmux(f"pw-keys-{os.getpid()}")
    logdir = tmp_path / "logdir"
    try:
        tmux("new-session", "-d", "-s", "pw", "-x", "160", "-y", "45", cmd)
        _wait(lambda: all("▶ running" in _row(tmux.screen(), r) for r in RUNS), "three running rows", tmux, 300)
        _wait(lambda: len(_pids(logdir)) == 3, "three pids in perfwatch.json", tmux)
        pids = _pids(logdir)

        # marking: the run two rows down is marked, not the one the cursor left
        tmux("send-keys", "-t", "pw", "Down", "Down", "Space")
        screen = tmux.wait_for("● spin.r2")
        assert "● spin.r0" not in screen and "● spin.r1" not in screen

        # stopping: back to the first run and two rows down, in one burst
        tmux("send-keys", "-t", "pw", "Home", "Down", "Down", "s")
        tmux.wait_for("stop: spin.r2")
        _wait(lambda: _state(pids["spin.r2"]) in ("gone", "zombie"), "spin.r2's process gone", tmux)
        _wait(lambda: "stopped" in _row(tmux.screen(), "spin.r2"), "spin.r2's row says stopped", tmux)
        assert _state(pids["spin.r0"]) in ("running", "sleeping")
        assert _state(pids["spin.r1"]) in ("running", "sleeping")

        # the same burst again: `s` is greyed out for the stopped spin.r2, so nothing is stopped
        tmux("send-keys", "-t", "pw", "Home", "Down", "Down", "s")
        time.sleep(2.0)  # what a wrong target would need to show (the engine polls every 0.5 s)
        screen = tmux.screen()
        assert "stop: spin.r0" not in screen and "stop: spin.r1" not in screen
        assert "▶ running" in _row(screen, "spin.r0") and "▶ running" in _row(screen, "spin.r1")
        assert _state(pids["spin.r0"]) in ("running", "sleeping")

        # pause through a burst too: the footer then offers `p resume` for that run
        tmux("send-keys", "-t", "pw", "Home", "Down", "p")
        tmux.wait_for("pause: spin.r1")
        _wait(lambda: "‖ paused" in _row(tmux.screen(), "spin.r1"), "spin.r1 paused", tmux)
        assert _state(pids["spin.r1"]) == psutil.STATUS_STOPPED
        tmux.wait_for("p resume")

        tmux("send-keys", "-t", "pw", "q")
        tmux.wait_for("still live")
        tmux("send-keys", "-t", "pw", "s")  # stop them
        screen = tmux.wait_for("perfwatch-exited")
        assert f"logs in {logdir.resolve()}" in screen and f"perfwatch attach {logdir.resolve()}" in screen
        assert all(_state(p) in ("gone", "zombie") for p in _pids(logdir).values())
    finally:
        cleanup(tmux, logdir)


def _owner_pid(logdir: Path) -> int | None:
    try:
        data = json.loads((logdir / "perfwatch.json").read_text())
    except (OSError, ValueError):
        return None
    return (data.get("scheduler") or {}).get("pid")


def _scrape_text(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def test_leaving_with_queued_runs_hands_the_campaign_to_a_background_owner(tmp_path):
    """`q`, then "leave them running": the queued run is not orphaned (a background perfwatch starts it
    when there is room), the metrics endpoint moves to it, and the terminal says where the LOGDIR is and how
    to attach again."""
    (tmp_path / "spin.py").write_text(WORKLOAD)
    (tmp_path / "c.yaml").write_text(
        "name: leave\ndefaults: {repeat: 2}\nscheduler: {max_parallel: 1}\n"
        "jobs:\n  - name: spin\n    cmd: [python, spin.py]\n    grace: 2s\n"
    )
    repo = Path(__file__).resolve().parents[1]
    env = f"PERFWATCH_CONFIG_DIR={tmp_path / 'cfg'} PYTHONPATH={repo}"
    logdir = tmp_path / "logdir"
    port = free_port()
    cmd = (f"cd {tmp_path} && env {env} {sys.executable} -m perfwatch launch c.yaml --logdir logdir --theme dark"
           f" --metrics-port {port} --metrics-grace 0; echo perfwatch-exited; sleep 60")
    tmux = Tmux(f"pw-leave-{os.getpid()}")
    owner = None
    try:
        tmux("new-session", "-d", "-s", "pw", "-x", "160", "-y", "45", cmd)
        _wait(lambda: "▶ running" in _row(tmux.screen(), "spin.r0"), "spin.r0 running", tmux, 300)
        assert "queued" in _row(tmux.screen(), "spin.r1")
        tui_owner = _owner_pid(logdir)
        tmux("send-keys", "-t", "pw", "q")
        screen = tmux.wait_for("still live")
        assert "2 run(s) still live (1 not started yet)" in screen
        assert "queued runs start as planned" in screen
        tmux("send-keys", "-t", "pw", "l")
        screen = tmux.wait_for("perfwatch-exited")
        assert f"logs in {logdir.resolve()}" in screen
        assert f"perfwatch attach {logdir.resolve()}" in screen
        _wait(lambda: _owner_pid(logdir) not in (None, tui_owner), "a background owner in perfwatch.json", tmux)
        owner = _owner_pid(logdir)
        assert owner is not None and _state(owner) not in ("gone", "zombie")
        # the endpoint the user named is the background owner's now, with the campaign's runs on it
        listening = [c for c in psutil.Process(owner).net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert [c.laddr.port for c in listening] == [port]
        _wait(lambda: 'run="spin.r0"' in _scrape_text(port), "spin.r0 on the moved endpoint", tmux)
        pid0 = _pids(logdir)["spin.r0"]
        assert _state(pid0) in ("running", "sleeping")  # the running run was left running
        # room for the queued run: the background owner starts it
        subprocess.run([sys.executable, "-m", "perfwatch", "control", str(logdir), "spin.r0", "stop"],
                       env={**os.environ, "PYTHONPATH": str(repo)}, check=True, timeout=90, capture_output=True)
        _wait(lambda: "spin.r1" in _pids(logdir) and _state(_pids(logdir)["spin.r1"]) in ("running", "sleeping"),
              "spin.r1 started by the background owner", tmux, 300)
        subprocess.run([sys.executable, "-m", "perfwatch", "control", str(logdir), "spin.r1", "stop"],
                       env={**os.environ, "PYTHONPATH": str(repo)}, check=True, timeout=90, capture_output=True)
        _wait(lambda: _state(owner) in ("gone", "zombie"), "the background owner done with the campaign", tmux, 300)
    finally:
        cleanup(tmux, logdir)
        if owner is not None:
            with contextlib.suppress(OSError):
                os.kill(owner, signal.SIGKILL)
