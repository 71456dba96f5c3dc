"""The shipped demo campaign: real training, headless, from the checkout; every run reaches its target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import ROOT, group_members, kill_groups

from perfwatch.core.control.campaign import load_campaign


def test_shipped_campaigns_validate() -> None:
    for name in ("demo.yaml", "compare.yaml"):
        campaign = load_campaign(ROOT / "workloads" / name)
        assert campaign.runs and campaign.baseline


@pytest.mark.slow
@pytest.mark.gpu  # on a GPU machine the demo trains on its GPUs (devices: auto), as a user's would
def test_demo_campaign_headless_every_run_reaches_its_target(tmp_path: Path) -> None:
    logdir = tmp_path / "demo"
    pgids: set[int] = set()
    try:
        # a cache without a CPU peak: launch measures the one its runs need (1 thread, fp32) before they start
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
        done = subprocess.run([sys.executable, "-m", "perfwatch", "launch", "workloads/demo.yaml", "--headless",
                               "--logdir", str(logdir)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env=env)
        data = json.loads((logdir / "perfwatch.json").read_text())
        pgids = {r["pgid"] for r in data["runs"] if r.get("pgid")}
    finally:
        kill_groups(pgids)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    ids = [r["run_id"] for r in data["runs"]]
    assert {r["job"] for r in data["runs"]} == {"mlp", "cnn", "mlm", "mlp-ddp"}
    for rid in ids:
        row = next(line.split() for line in out.splitlines() if line.startswith(rid + " "))
        assert row[1] == "done" and row[3] == "reached", out
        assert b"run_stop" in (logdir / rid / "mllog.txt").read_bytes()
    assert "all runs succeeded" in out
    assert group_members(pgids) == []
    assert "measuring this host's CPU peak for 1 thread (fp32)" in done.stderr
    report = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(logdir), "--format", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    rows = json.loads(report.stdout)["runs"]
    # MFU with no extra step: every run is measured against the peak launch stored for its thread count
    # (a value, not a bound: a peak measured while other work loads the CPUs is low, flagged as such)
    assert all(r["mfu"] is not None and r["mfu"] > 0 for r in rows), [(r["run_id"], r["mfu"], r["mfu_reason"])
                                                                    for r in rows]
    # (on a GPU machine the runs that got a GPU are measured against its datasheet peak instead)
    assert all("measured CPU peak, 1 threads, fp32" in r["peak_used"] or "datasheet" in r["peak_used"]
               for r in rows), [r["peak_used"] for r in rows]
    # runs train long enough for the live view: every run evaluated at least 6 times before its target
    for rid in ids:
        evals = (logdir / rid / "mllog.txt").read_text().count('"key": "eval_accuracy"')
        assert evals >= 6, (rid, evals)
