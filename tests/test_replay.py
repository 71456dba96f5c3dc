"""The ETA replay harness (benchmarks/replay.py) on the bundled real MLPerf logs: what the live view
would have said at 25/50/75 % of each run that reached its target, scored against the real crossing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_replayed_etas_cover_the_real_crossing_and_do_not_swing(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    done = subprocess.run([sys.executable, "benchmarks/replay.py", "tests/data/mlperf-logs", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    runs = json.loads(out.read_text())
    assert len(runs) == 34  # every bundled run that reached MLPerf's target (one resnet run never does)
    for key in ("25", "50", "75"):
        shown = [r["at"][key] | {"real": r["real_ms"]} for r in runs if r["at"][key]["kind"] != "none"]
        good = 0
        for s in shown:
            if s["kind"] == "interval":
                good += s["lo_ms"] <= s["real"] <= s["hi_ms"]
            elif s["kind"] == "bound":
                good += s["real"] >= s["lo_ms"] - 1000.0
                assert not s["text"].startswith(("≥0:0", "≥0:1"))  # never a bound that says nothing
        if key != "25":
            assert len(shown) >= 20 and good >= 0.8 * len(shown), (key, good, len(shown))
    assert sum(r["swings"] for r in runs) == 0
    assert "| 50 % | 34 |" in done.stdout
