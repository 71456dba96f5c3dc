"""End to end in a real terminal (tmux): runs stopped, killed and crashed in the TUI are then shown by
`perfwatch report` in the very states the TUI showed; a restart's first seconds show nothing of the earlier
attempt, and the new attempt finishes on its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_attempts import WORKLOAD as RESTARTED
from test_e2e_tmux import Tmux, cleanup

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests/workloads_fake/fake.py"
TARGET = "target: {key: eval_accuracy, value: 0.9, higher_is_better: true}"


def _start(tmp_path: Path, body: str, name: str) -> tuple[Tmux, Path]:
    (tmp_path / "c.yaml").write_text(body)
    env = f"PERFWATCH_CONFIG_DIR={tmp_path / 'cfg'} PYTHONPATH={ROOT}"
    # the terminal's size is the pane's: a COLUMNS/LINES inherited from the test runner would override it
    cmd = (f"cd {tmp_path} && env -u COLUMNS -u LINES {env} {sys.executable} -m perfwatch launch c.yaml "
           "--logdir logdir --theme dark")
    tmux = Tmux(f"pw-{name}-{os.getpid()}")
    tmux("new-session", "-d", "-s", "pw", "-x", "160", "-y", "45", cmd)
    return tmux, tmp_path / "logdir"


def _row(screen: str, rid: str) -> str:
    """The runs-table line of `rid` (the detail pane repeats the id further down)."""
    return next((ln for ln in screen.splitlines() if ln.startswith(rid + " ")), "")


def _state(screen: str, rid: str) -> str:
    """The state word the TUI shows for `rid` (after its symbol)."""
    words = _row(screen, rid).split()
    return words[2] if len(words) > 2 else ""


def _until(tmux: Tmux, cond, what: str, steps: int = 600) -> str:
    for _ in range(steps):
        screen = tmux.screen()
        if cond(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"never: {what}; the terminal shows:\n{tmux.screen()}")


def _quit(tmux: Tmux) -> None:
    tmux("send-keys", "-t", "pw", "q")
    for _ in range(100):
        if not tmux("list-sessions"):
            return
        if "still live" in tmux.screen():
            tmux("send-keys", "-t", "pw", "s")
        time.sleep(0.1)
    raise AssertionError("perfwatch did not quit")


def test_stop_kill_and_crash_in_the_tui_then_report_says_the_same(tmp_path):
    body = f"""name: states
defaults: {{repeat: 1, grace: 2s, exit_at_target: false, {TARGET}}}
jobs:
  - name: crash
    cmd: [{sys.executable}, {FAKE}, --mode, crash, --epochs, "5", --step, "0.2"]
  - name: early
    cmd: [{sys.executable}, -c, "import sys; sys.exit(2)"]
  - name: hang
    cmd: [{sys.executable}, {FAKE}, --mode, hang, --epochs, "5", --step, "0.05"]
  - name: reach
    cmd: [{sys.executable}, {FAKE}, --mode, no_stop, --epochs, "3", --step, "0.05"]
"""
    tmux, logdir = _start(tmp_path, body, "states")
    try:
        # the table is sorted by run id: crash.r0, early.r0, hang.r0, reach.r0; the cursor starts on the first
        _until(tmux, lambda s: _row(s, "reach.r0") and "✓" in _row(s, "reach.r0")
               and _state(s, "hang.r0") == "running" and "0.4/0.9" in _row(s, "hang.r0"),
               "reach.r0 at its target and hang.r0 hanging")
        tmux("send-keys", "-t", "pw", "Down")
        tmux("send-keys", "-t", "pw", "Down")
        _until(tmux, lambda s: "hang.r0   state" in s, "hang.r0 selected")
        tmux("send-keys", "-t", "pw", "k")
        tmux.wait_for("Kill hang.r0?")
        tmux("send-keys", "-t", "pw", "y")
        _until(tmux, lambda s: _state(s, "hang.r0") == "killed", "hang.r0 killed")
        tmux("send-keys", "-t", "pw", "Down")
        _until(tmux, lambda s: "reach.r0   state" in s, "reach.r0 selected")
        tmux("send-keys", "-t", "pw", "s")
        want = {"crash.r0": "crashed", "early.r0": "crashed", "hang.r0": "killed", "reach.r0": "stopped"}
        screen = _until(tmux, lambda s: all(_state(s, r) == w for r, w in want.items()), "every run ended")
        shown = {rid: _state(screen, rid) for rid in want}
        assert _row(screen, "reach.r0").split()[1] == "✓"  # stopped after reaching its target: not a failure
        assert "target: 1 reached, 3 not reached" in screen and "3 failed" in screen, screen
        _quit(tmux)
    finally:
        cleanup(tmux, logdir)
    out = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {r["run_id"]: r for r in json.loads(out.stdout)["runs"]}
    assert {rid: r["status"] for rid, r in rows.items()} == shown  # every run, in the state the TUI showed
    assert rows["crash.r0"]["reason"].startswith("crashed with exit 3")
    assert rows["early.r0"]["reason"] == "crashed with exit 2" and rows["early.r0"]["path"] is None  # no log
    assert "killed by user" in rows["hang.r0"]["reason"] and "stopped by user" in rows["reach.r0"]["reason"]
    assert rows["reach.r0"]["target_verdict"] == "reached" and not rows["reach.r0"]["failed"]


def test_a_restart_in_the_tui_shows_nothing_of_the_old_attempt_and_finishes_on_its_own(tmp_path):
    (tmp_path / "w.py").write_text(RESTARTED)
    body = f"""name: again
defaults: {{repeat: 1, exit_at_target: true, {TARGET}}}
jobs:
  - name: w
    cmd: [{sys.executable}, w.py]
"""
    tmux, logdir = _start(tmp_path, body, "restart")
    try:
        _until(tmux, lambda s: _state(s, "w.r0") == "done" and "0.95/0.9 ✓" in _row(s, "w.r0"), "attempt 1 done")
        tmux("send-keys", "-t", "pw", "r")
        first = _until(tmux, lambda s: _state(s, "w.r0") in ("queued", "starting", "running"),
                       "attempt 2 under way")
        screens = [first]
        while not (logdir / "w.r0" / "mllog.txt").exists():  # attempt 2 has not logged its first line yet
            screens.append(tmux.screen())
            time.sleep(0.1)
        assert len(screens) > 5  # seconds of it, not a glimpse
        for screen in screens:
            row = _row(screen, "w.r0")
            assert "0.95" not in row and "✓" not in row and _state(screen, "w.r0") != "done", row
        assert any("earlier: #1 done, eval 0.95 (reached)" in s for s in screens), screens[-1]
        screen = _until(tmux, lambda s: _state(s, "w.r0") == "done" and "0.95/0.9 ✓" in _row(s, "w.r0"),
                        "attempt 2 done")
        _quit(tmux)
    finally:
        cleanup(tmux, logdir)
    rec = json.loads((logdir / "perfwatch.json").read_text())["runs"][0]
    # finished by itself (exit 0, run_stop logged), never stopped for attempt 1's target
    assert (rec["attempt"], rec["state"], rec["exit_code"], rec["reason"]) == (2, "succeeded", 0, None), rec
    assert b'"run_stop"' in (logdir / "w.r0" / "mllog.txt").read_bytes()
