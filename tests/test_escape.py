"""Security: control sequences in logs (OSC 52 clipboard write, screen clear, bidi override) never reach
the terminal raw from any text output: report, check, compare, attach --once, launch --headless."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from launch_helpers import ROOT, campaign_file

from perfwatch.text.escape import printable

REAL = ROOT / "tests/data/mlperf-logs/v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt"
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes "pwned" to the clipboard of terminals that allow it
CLEAR = "\x1b[2J\x1b[H"
BIDI = "\u202e"


def hostile_tree(tmp_path: Path) -> Path:
    """A results tree whose folder name and submission_benchmark carry control sequences."""
    root = tmp_path / "tree"
    folder = root / f"sys{CLEAR}" / "bert"
    folder.mkdir(parents=True)
    text = REAL.read_text().replace('"value": "bert"', '"value": "bert\\u001b]52;c;cHduZWQ=\\u0007\\u001b[2J"')
    text = text.replace('"value": "MosaicML"', '"value": "Mosaic\\u202eLMsoft"')
    (folder / "result_0.txt").write_text(text)
    (folder / "result_1.txt").write_text(text)
    return root


def perfwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})


def raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or c == BIDI]


def test_printable_shows_every_control_character_and_keeps_lines() -> None:
    assert printable(f"a{OSC52}b\n\tc{BIDI}") == "a\\x1b]52;c;cHduZWQ=\\x07b\n\tc\\u202e"
    assert printable("plain ascii, ünïcode ✓") == "plain ascii, ünïcode ✓"
    assert raw_controls(printable("".join(map(chr, range(0x100))))) == []


def test_report_check_compare_attach_escape_log_strings(tmp_path: Path) -> None:
    root = hostile_tree(tmp_path)
    outputs = {
        "report": perfwatch("report", str(root), "--no-cpu-peak"),
        "report md": perfwatch("report", str(root), "--format", "markdown", "--no-cpu-peak"),
        "report csv": perfwatch("report", str(root), "--format", "csv", "--no-cpu-peak"),
        "check": perfwatch("check", str(root)),
        "compare": perfwatch("compare", str(root), str(root)),
        "attach --once": perfwatch("attach", str(root), "--once"),
        "attach --headless": perfwatch("attach", str(root), "--headless"),
    }
    for name, out in outputs.items():
        assert "Traceback" not in out.stderr, (name, out.stderr)
        assert raw_controls(out.stdout) == [], (name, out.stdout)
        assert "\\x1b" in out.stdout, (name, out.stdout)  # shown, not hidden: the reader sees what is there


def test_launch_headless_escapes_a_failing_runs_output(tmp_path: Path) -> None:
    code = f"print({OSC52 + CLEAR + 'boom'!r}); raise SystemExit(3)"
    path = campaign_file(tmp_path, f"""
        jobs:
          - {{name: evil, cmd: [python, -c, {code!r}]}}
        """)
    out = perfwatch("launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert raw_controls(out.stdout) == [] and "\\x1b]52;c;" in out.stdout and "boom" in out.stdout, out.stdout


async def test_the_live_view_shows_no_raw_control_character(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Textual strips only BEL/BS/VT/FF/CR: an ESC in a run id, a log string or a log line would reach
    the terminal. The table, the summary and the log tail show U+FFFD instead."""
    from ui_helpers import attach_app, screen_text, table, until

    from perfwatch.ui.widgets.detail import LogTail

    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))
    root = hostile_tree(tmp_path)
    (root / f"sys{CLEAR}" / "bert" / "output.log").write_text(f"progress {OSC52}{CLEAR}50%\n")
    app = attach_app(root, theme="dark")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) >= 2, "the runs")
        await pilot.pause()
        text = screen_text(app) + app.main.query_one(LogTail).text
        assert raw_controls(text) == [], [c for c in text if ord(c) < 32 and c != "\n"]
        assert "\ufffd" in text
