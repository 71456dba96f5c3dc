"""The progress line a long read prints on stderr (a terminal only; wiped when done)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from perfwatch.core.model import book as runbook
from perfwatch.text import progress as progress_mod

DATA = Path(__file__).parent / "data"


def test_a_long_read_shows_its_progress_and_wipes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr(progress_mod, "EVERY_S", 0.0)
    out = io.StringIO()
    shown = progress_mod.ReadProgress("reading", out, force=True)
    book = runbook.load(DATA / "mlperf-power", progress=shown)
    shown.done()
    text = out.getvalue()
    assert len(book.runs) == 10
    assert "\rreading 10/10 files" in text  # the power logs are not counted as files to read
    assert text.endswith("\r\033[K")


def test_nothing_is_printed_off_a_terminal() -> None:
    out = io.StringIO()  # not a terminal
    shown = progress_mod.ReadProgress("reading", out)
    runbook.load(DATA / "mlperf-power", progress=shown)
    shown.done()
    assert out.getvalue() == ""
