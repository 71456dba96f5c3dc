"""Hostile names through every output: a file name that is not UTF-8 (byte 0xff), a folder whose name holds
a newline and a fake `result_9`, a file named like a spreadsheet formula. Every format shows them escaped
on one line, never crashes, never forges a row; CSV cells never start a formula (OWASP's rule).

The commands run with a strict UTF-8 stdout (PYTHONIOENCODING=utf-8:strict, what an en_US.UTF-8 terminal
gives), where an unescaped 0xff is a UnicodeEncodeError."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import scrape_once
from prometheus_client.parser import text_string_to_metric_families

SRC = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    (root / "bench").mkdir(parents=True)
    shutil.copy(SRC, os.fsencode(root / "bench") + b"/r\xff.txt")
    forged = os.fsencode(root) + b"/bench\nresult_9"
    os.mkdir(forged)
    shutil.copy(SRC, forged + b"/result_0.txt")
    shutil.copy(SRC, root / "=HYPERLINK(1).txt")
    return root


def perfwatch(*args: str, ok: tuple[int, ...] = (0,)) -> str:
    out = subprocess.run([sys.executable, "-m", "perfwatch", *args], capture_output=True, timeout=300,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    text = out.stdout.decode("utf-8")  # strict: the output itself is valid UTF-8
    assert out.returncode in ok and b"Traceback" not in out.stderr, out.stderr.decode(errors="replace")[-3000:]
    return text


def no_forged_rows(text: str) -> None:
    assert not any(line.startswith("result_9") for line in text.splitlines()), text
    assert "bench\\xff" not in text  # the byte belongs to r\xff.txt only


def test_report_every_format(hostile: Path) -> None:
    table = perfwatch("report", str(hostile))
    assert "bench/r\\xff" in table and "bench\\nresult_9/result_0" in table
    no_forged_rows(table)
    md = perfwatch("report", str(hostile), "--format", "markdown")
    rows = [line for line in md.splitlines() if "resnet" in line and line.startswith("|")]
    assert len(rows) == 3 + 3 and all(r.endswith("|") for r in rows)  # 3 runs, 3 benchmark groups
    no_forged_rows(md)
    data = json.loads(perfwatch("report", str(hostile), "--format", "json"))
    assert {r["run_id"] for r in data["runs"]} == {"bench/r\\xff", "bench\nresult_9/result_0", "=HYPERLINK(1)"}
    cells = list(csv.reader(io.StringIO(perfwatch("report", str(hostile), "--format", "csv"))))
    assert len(cells) == 1 + 3 and len({len(r) for r in cells}) == 1
    assert all(not c.startswith(("=", "+", "-", "@")) for r in cells for c in r), cells
    assert any(r[:2] == ["'=HYPERLINK(1).txt", "'=HYPERLINK(1)"] for r in cells), cells
    assert any(r[1] == "bench\\nresult_9/result_0" for r in cells)
    html = perfwatch("report", str(hostile), "--format", "html")
    assert "bench/r\\xff" in html and "</html>" in html


def test_check_compare_and_attach_once(hostile: Path) -> None:
    table = perfwatch("check", str(hostile), ok=(0, 1))
    assert "bench/r\\xff" in table
    no_forged_rows(table)
    assert any(r["run_id"] == "bench/r\\xff" for r in json.loads(perfwatch("check", str(hostile), "--format", "json",
                                                                          ok=(0, 1))))
    compared = perfwatch("compare", str(hostile / "bench"), str(hostile / "bench"), ok=(0, 1))
    assert "r\\xff" in compared or "bench" in compared
    once = perfwatch("attach", str(hostile), "--once", ok=(0, 1))
    assert "bench/r\\xff" in once
    no_forged_rows(once)


def test_metrics_endpoint_escapes_names(hostile: Path) -> None:
    from perfwatch.core.model import book as runbook
    from perfwatch.exporters.source import ExportSnapshot, LiveRun

    book = runbook.load(hostile)
    snap = ExportSnapshot("camp\udcff", hostile, tuple(LiveRun(v.run_id, v, "job\udcfe", "succeeded", ())
                                                     for v in book.views()), None)

    text = scrape_once(snap)
    runs = {s.labels["run"] for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "perfwatch_run_info"}
    assert runs == {"bench/r\\xff", "bench\nresult_9/result_0", "=HYPERLINK(1)"}  # the parser un-escapes \n
    assert 'campaign="camp\\\\xff"' in text
