"""End to end in a real terminal: tmux runs `perfwatch launch`, keys pause and resume a run, open the
campaign view and the compare screen."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from ui_helpers import WORKLOAD

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One private tmux server (its own socket), killed at the end whatever happens."""

    def __init__(self, name: str) -> None:
        self.sock = name

    def __call__(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=10)
        return out.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "pw")

    def wait_for(self, text: str, steps: int = 300) -> str:
        for _ in range(steps):
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.screen()}")


def cleanup(tmux: Tmux, logdir: Path) -> None:
    """The tmux server gone and every run's process group killed, whatever the test left."""
    tmux("kill-server")
    for pid in _pids(logdir).values():
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _pids(logdir: Path) -> dict[str, int]:
    try:
        data = json.loads((logdir / "perfwatch.json").read_text())
    except (OSError, ValueError):
        return {}
    return {r["run_id"]: r["pid"] for r in data.get("runs", []) if r.get("pid")}


def _state(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"


def test_launch_pause_resume_in_tmux(tmp_path):
    (tmp_path / "spin.py").write_text(WORKLOAD)
    (tmp_path / "c.yaml").write_text(
        "name: e2e\ndefaults: {repeat: 2}\njobs:\n  - name: spin\n    cmd: [python, spin.py]\n    grace: 2s\n"
    )
    env = f"PERFWATCH_CONFIG_DIR={tmp_path / 'cfg'} PYTHONPATH={Path(__file__).resolve().parents[1]}"
    cmd = f"cd {tmp_path} && env {env} {sys.executable} -m perfwatch launch c.yaml --logdir logdir --theme dark"
    tmux = Tmux(f"pw-e2e-{os.getpid()}")
    logdir = tmp_path / "logdir"
    try:
        tmux("new-session", "-d", "-s", "pw", "-x", "120", "-y", "40", cmd)
        tmux.wait_for("spin.r1")
        tmux.wait_for("▶ running")
        for _ in range(100):
            if len(_pids(logdir)) == 2:
                break
            time.sleep(0.1)
        pid = _pids(logdir)["spin.r0"]
        tmux("send-keys", "-t", "pw", "p")
        screen = tmux.wait_for("‖ paused")
        assert "spin.r0" in next(line for line in screen.splitlines() if "‖ paused" in line)
        assert _state(pid) == psutil.STATUS_STOPPED
        tmux("send-keys", "-t", "pw", "p")
        tmux.wait_for("resume: spin.r0")
        for _ in range(50):
            if "‖ paused" not in tmux.screen():
                break
            time.sleep(0.1)
        assert "‖ paused" not in tmux.screen()
        assert _state(pid) in ("running", "sleeping")
        tmux("send-keys", "-t", "pw", "g")  # the campaign view: one group, the job's two repeats
        screen = tmux.wait_for("campaign: run groups")
        tmux.wait_for("0/2")  # none stopped yet, of two runs
        tmux("send-keys", "-t", "pw", "Enter")  # compare the group's runs
        screen = tmux.wait_for("compare: spin")
        assert "spin.r0" in screen and "spin.r1" in screen
        tmux("send-keys", "-t", "pw", "Escape")
        tmux.wait_for("campaign: run groups")
        tmux("send-keys", "-t", "pw", "Escape")
        tmux.wait_for("ttt/elapsed")  # back on the main screen
        tmux("send-keys", "-t", "pw", "q")
        tmux.wait_for("still live")
        tmux("send-keys", "-t", "pw", "s")  # stop them
        for _ in range(150):
            if not tmux("list-sessions"):
                break
            time.sleep(0.1)
        assert not tmux("list-sessions"), "perfwatch did not exit"
        assert all(_state(p) in ("gone", "zombie") for p in _pids(logdir).values())
    finally:
        cleanup(tmux, logdir)
