"""`perfwatch report --format html`: one self-contained page, checked as HTML and in headless chromium."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import browser
import pytest

from perfwatch.cli import main


class Page(HTMLParser):
    """Tags, attributes, and the text of every table cell, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def report(path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", str(path), "--format", fmt, "--no-cpu-peak"]) == 0
    return capsys.readouterr().out


def test_html_has_report_tables_and_inline_plots_and_nothing_external(
        mlperf_logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page_text = report(mlperf_logs, "html", capsys)
    expected = json.loads(report(mlperf_logs, "json", capsys))
    page = Page()
    page.feed(page_text)
    runs = page.tables["runs"]
    assert runs[0][:3] == ["run", "benchmark", "state"]
    assert [r[0] for r in runs[1:]] == [r["run_id"] for r in expected["runs"]]
    assert [r[2] for r in runs[1:]] == [r["status"] for r in expected["runs"]]
    benches = page.tables["benchmarks"]
    assert [r[0] for r in benches[1:]] == [b["folder"] for b in expected["benchmarks"]]
    assert "21.371" in {c for r in benches for c in r}  # MosaicML bert baseline: the official olympic score
    svgs = [a.get("id") for t, a in page.tags if t == "svg"]
    assert {"throughput-0", "eval-0"} <= set(svgs)
    assert sum(1 for t, _ in page.tags if t == "polyline") >= 35
    # self-contained: no script, no link, no attribute that fetches anything
    assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object")]
    assert not [(t, k) for t, a in page.tags for k in a if k in ("src", "href") or k.startswith("on")]


def test_strings_from_logs_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = '<script>alert(1)</script>\x1b]52;c;aGk=\x07"&'
    log = tmp_path / "evil" / "mllog.txt"
    log.parent.mkdir()
    lines = [("submission_benchmark", evil), ("run_start", None), ("eval_accuracy", 0.5), ("run_stop", None)]
    log.write_text("".join(
        ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1000 + 1000 * i, "event_type": "POINT_IN_TIME",
                                  "key": k, "value": v, "metadata": {"status": "success"} if k == "run_stop" else {}})
        + "\n" for i, (k, v) in enumerate(lines)))
    text = report(tmp_path, "html", capsys)
    assert "<script" not in text and "\x1b" not in text and "\x07" not in text
    page = Page()
    page.feed(text)
    assert page.tables["runs"][1][1] == '<script>alert(1)</script>\\x1b]52;c;aGk=\\x07"&'  # shown, not run


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def test_headless_chromium_shows_the_tables_and_the_throughput_plot(mlperf_logs: Path, tmp_path: Path) -> None:
    browser.chromium()
    html_file = tmp_path / "report.html"
    out = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(mlperf_logs), "--format", "html",
                          "--no-cpu-peak"], capture_output=True, text=True, check=True, timeout=120)
    html_file.write_text(out.stdout)
    url = html_file.as_uri()
    dom = browser.dump_dom(url, tmp_path / "profile", budget_ms=1000)
    page = Page()
    page.feed(dom)
    run_ids = [r[0] for r in page.tables["runs"][1:]]
    assert len(run_ids) == 35 and "v2.1/MosaicML/results/8xA100_80GB-methods/bert/result_9" in run_ids
    throughput = [a for t, a in page.tags if t == "svg" and (a.get("id") or "").startswith("throughput-")]
    assert sorted(a["aria-label"] for a in throughput) == [
        "Throughput — bert", "Throughput — llama2_70b_lora", "Throughput — resnet"]
    png = browser.screenshot(url, tmp_path / "profile", tmp_path / "report.png", size=(1280, 1600))
    assert png_size(png) == (1280, 1600)
