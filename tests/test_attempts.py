"""Restarts: a new attempt's view begins empty, nothing of the earlier attempt's log counts for it (its
target above all: `exit_at_target` must not stop the new attempt for the old one's reaching it), and the
earlier attempts stay listed, the same in the live engine and in `report`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from launch_helpers import ROOT, campaign_file, kill_groups

from perfwatch.core.control.campaign import load_campaign
from perfwatch.core.control.scheduler import AT_TARGET_GRACE
from perfwatch.core.engine import LiveEngine, launch_session

# reaches its target and logs run_stop at once; a later attempt first sleeps longer than perfwatch's grace
# after a target (a training script importing torch on a busy machine), so an old attempt's "reached" would
# stop it before it trained
WORKLOAD = textwrap.dedent(f"""
    import json, os, time
    path = os.environ["PERFWATCH_MLLOG"]
    if os.path.exists(os.path.join(os.path.dirname(path), ".attempt-1.mllog.txt")):
        time.sleep({AT_TARGET_GRACE + 2.0})
    def log(fh, key, value=None, **md):
        rec = {{"namespace": "", "time_ms": time.time() * 1000, "event_type": "POINT_IN_TIME",
               "key": key, "value": value, "metadata": md}}
        fh.write(":::MLLOG " + json.dumps(rec) + "\\n"); fh.flush()
    with open(path, "a") as fh:
        log(fh, "run_start")
        for epoch, acc in enumerate((0.5, 0.8, 0.95), 1):
            time.sleep(0.1)
            log(fh, "eval_accuracy", acc, epoch_num=epoch)
        log(fh, "run_stop", status="success")
""")


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


def test_a_restart_begins_empty_and_the_new_attempt_exits_on_its_own(tmp_path):
    (tmp_path / "w.py").write_text(WORKLOAD)
    body = f"""
        name: again
        defaults: {{repeat: 1, exit_at_target: true, target: {{key: eval_accuracy, value: 0.9}}}}
        jobs:
          - name: w
            cmd: [{sys.executable}, {tmp_path / "w.py"}]
    """
    logdir = (tmp_path / "logdir").resolve()
    session = launch_session(load_campaign(campaign_file(tmp_path, body), base=ROOT), logdir)
    ctl = session.controller
    assert ctl is not None
    engine = LiveEngine(session, control_interval=0.05, watch_min_interval=0.0).start(threaded=False)
    rid = "w.r0"

    def step_until(cond, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            engine.step()
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError(f"never: {what}; the run: {engine.snapshot.statuses.get(rid)}")

    def status():
        return engine.snapshot.statuses.get(rid)

    try:
        step_until(lambda: status() is not None and status().word == "done"
                   and engine.snapshot.views[rid].run_status == "success", "the first attempt done")
        assert status().verdict.value == "reached" and status().reason == ""  # it stopped by itself
        restart = engine.act("restart", rid)  # executed at the engine's next step
        step_until(lambda: engine.snapshot.procs[rid].attempt == 2, "attempt 2 listed")
        assert restart.result(timeout=0) is None
        seen_old = []
        # the new attempt's first seconds: nothing of attempt 1 (no eval, no mark, no "reached")
        while engine.snapshot.procs[rid].state.alive or engine.snapshot.procs[rid].state.value == "queued":
            engine.step()
            view, st = engine.snapshot.views.get(rid), status()
            if not (logdir / rid / "mllog.txt").exists():  # attempt 2 has not logged a line yet
                if view is not None and (view.evals or view.target_reached or view.run_start_ms is not None):
                    seen_old.append(view)
                eta = engine.snapshot.etas.get(rid)
                if st.verdict.value == "reached" or (eta is not None and eta.status != "too_early"):
                    seen_old.append(st)
            time.sleep(0.05)
        step_until(lambda: engine.snapshot.views[rid].run_status == "success", "attempt 2's run_stop read")
        assert seen_old == []
        final = status()
        info = engine.snapshot.procs[rid]
        # it trained and stopped on its own: never SIGTERMed for attempt 1's target
        assert (final.word, final.reason, info.exit_code, info.attempt) == ("done", "", 0, 2), final
        assert final.verdict.value == "reached"
        earlier = engine.snapshot.attempts[rid]
        assert [(a.attempt, a.state, a.verdict, a.last_eval) for a in earlier] == [(1, "done", "reached", 0.95)]
    finally:
        engine.stop()
        ctl.close(stop_runs=True)
        kill_groups({i.pgid for i in ctl.procs().values() if i.pgid})
    rep = json.loads(subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                                    capture_output=True, text=True, timeout=120, check=True).stdout)
    row = next(r for r in rep["runs"] if r["run_id"] == rid)
    assert (row["status"], row["target_verdict"], row["attempt"]) == ("done", "reached", 2)
    assert [(a["attempt"], a["state"], a["verdict"]) for a in row["earlier_attempts"]] == [(1, "done", "reached")]
