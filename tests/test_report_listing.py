"""`report` on a campaign's LOGDIR lists every run of its perfwatch.json in the state the live view shows,
read without taking the campaign over: runs that ended while no perfwatch watched are judged by their
exit.json, queued runs stay queued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from launch_helpers import FAKE, ROOT, campaign_file, kill_groups, wait_for
from test_attach import perfwatch, registry

from perfwatch.core.control.process import same_process


def _report(logdir: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_report_after_perfwatch_was_killed_reads_the_runs_exit_records(tmp_path: Path) -> None:
    gate, crash_gate = tmp_path / "gate", tmp_path / "crash-gate"
    path = campaign_file(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        defaults: {{target: {{value: 0.9}}}}
        jobs:
          - {{name: ok, cmd: [python, {FAKE}, --epochs, 3, --step, 0.05, --gate, {gate}]}}
          - {{name: bad, cmd: [python, -c, "import os, sys, time\\nwhile not os.path.exists('{crash_gate}'): time.sleep(0.05)\\nsys.exit(4)"]}}
          - {{name: later, cmd: [python, {FAKE}, --epochs, 3, --step, 0.05]}}
        """)
    logdir = tmp_path / "logdir"
    pw = perfwatch("launch", str(path), "--headless", "--logdir", str(logdir), out=tmp_path / "launch.out")
    pgids: set[int] = set()
    try:
        assert wait_for(lambda: (logdir / "perfwatch.json").exists() and
                        sum(r["state"] == "running" for r in registry(logdir)["runs"]) == 2, timeout=60)
        os.killpg(pw.pid, signal.SIGKILL)  # perfwatch only: the runs go on in their own process groups
        pw.wait()
        pgids = {r["pgid"] for r in registry(logdir)["runs"] if r.get("pgid")}
        rows = {r["run_id"]: r for r in _report(logdir)["runs"]}
        # nobody watches, the runs live: the states perfwatch.json holds
        assert {rid: r["status"] for rid, r in rows.items()} == {"ok.r0": "running", "bad.r0": "running",
                                                                 "later.r0": "queued"}
        gate.touch()
        crash_gate.touch()
        assert wait_for(lambda: (logdir / "ok.r0" / "exit.json").exists()
                        and (logdir / "bad.r0" / "exit.json").exists(), timeout=60)
        assert wait_for(lambda: not any(same_process(r["pid"], r["create_time"])
                                        for r in registry(logdir)["runs"] if r.get("pid")), timeout=30)
        rep = _report(logdir)
        rows = {r["run_id"]: r for r in rep["runs"]}
        # perfwatch.json still says running; their exit records say how they ended, as an attach would read them
        assert registry(logdir)["runs"][0]["state"] == "running"
        assert (rows["ok.r0"]["status"], rows["ok.r0"]["target_verdict"]) == ("done", "reached")
        assert (rows["bad.r0"]["status"], rows["bad.r0"]["reason"], rows["bad.r0"]["path"]) == (
            "crashed", "crashed with exit 4", None)  # never logged a record, listed all the same
        assert (rows["later.r0"]["status"], rows["later.r0"]["target_verdict"]) == ("queued", "not reached")
        assert rep["counts"]["states"] == {"queued": 1, "done": 1, "crashed": 1} and rep["counts"]["failed"] == 1
        assert not (logdir / "later.r0").exists()  # report took nothing over: the queued run never started
    finally:
        kill_groups(pgids)
