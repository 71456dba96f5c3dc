"""Memory stays bounded on a log with a huge stretch without newline: the tail keeps at most
DEFAULT_MAX_LINE bytes of one line and drops the rest as it reads (FileTail and the static reader), so
`report`, `attach --once` and `attach --headless` read a 192 MiB line in a few tens of MB (RSS measured
from outside with psutil) and still find every record after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_tree_links import peak_rss

SRC = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"
STRETCH_MB = 192
CAP = 150 * 2**20  # before: ~3x the stretch; the interpreter and the app themselves need ~40 MB


@pytest.fixture(scope="module")
def long_line_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("longline")
    (root / "bench").mkdir()
    lines = SRC.read_bytes().split(b"\n")
    with open(root / "bench" / "result_0.txt", "wb") as fh:
        fh.write(b"\n".join(lines[:20]) + b"\n")
        block = b"y" * (1 << 20)
        for _ in range(STRETCH_MB):
            fh.write(block)
        fh.write(b"\n" + b"\n".join(lines[20:]))
    return root


@pytest.mark.parametrize("argv", [["report", "--format", "json"], ["attach", "--once"], ["attach", "--headless"]])
def test_a_huge_line_is_never_held(long_line_log: Path, argv: list[str]) -> None:
    cmd = [sys.executable, "-m", "perfwatch", argv[0], str(long_line_log), *argv[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_rss(proc, timeout=120)
    out = proc.stdout.read() if proc.stdout else ""
    assert peak < CAP, f"{argv}: RSS {peak / 2**20:.0f} MB"
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    if argv[0] == "report":
        run = json.loads(out)["runs"][0]
        assert run["time_to_train_min"] == 319.2185 and run["evals"] == 9  # the records after the line
    else:
        assert "bench/result_0" in out and "time-to-train 319.2185 min" in out, out
