"""The detail pane's log: it follows while at the bottom, scrolls back without jumping, and searches."""

from __future__ import annotations

import pytest
from textual.widgets import Input
from ui_helpers import attach_app, mllog, table, until

from perfwatch.ui.widgets.detail import LogTail


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


async def test_log_scrolls_follows_and_searches(tmp_path):
    log = tmp_path / "result_0.txt"
    lines = [f"step {k:03d} loss {1.0 / (k + 1):.4f}" + (" needle" if k in (20, 60, 100) else "") for k in range(120)]
    log.write_text(mllog("submission_benchmark", "resnet", 1) + mllog("run_start", None, 2) + "\n".join(lines) + "\n")
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["result_0"], "the run")
        tail = app.query_one(LogTail)
        await until(pilot, lambda: "step 119" in tail.text, "the log's last line in view")
        await pilot.press("tab")
        assert tail.has_focus and tail.following
        await pilot.press("pageup", "pageup")
        assert not tail.following and "step 119" not in tail.text
        shown = tail.text
        with log.open("a") as fh:
            fh.write("step 120 loss 0.0083\nstep 121 loss 0.0082\n")
        await until(pilot, lambda: "step 121 loss 0.0082" in tail.lines, "the new lines held")
        await pilot.pause()
        assert tail.text == shown  # scrolled back: the view stays on what the user reads
        await pilot.press("end")
        await until(pilot, lambda: "step 121" in tail.text, "following again")
        with log.open("a") as fh:
            fh.write("step 122 loss 0.0081\n")
        await until(pilot, lambda: "step 122" in tail.text, "a new line scrolled into view")

        await pilot.press("slash")
        box = app.query_one("#log-search", Input)
        assert box.has_focus
        await pilot.press(*"NEEDLE")
        assert tail.current is not None and tail.current.startswith("step 100")  # the nearest above the bottom
        assert "step 100" in tail.text
        await pilot.press("enter")
        assert tail.has_focus and box.display
        await pilot.press("N")
        assert tail.current is not None and tail.current.startswith("step 060")
        assert "step 060" in tail.text
        await pilot.press("N", "N")
        assert tail.current is not None and tail.current.startswith("step 100")  # wraps around
        await pilot.press("n")
        assert tail.current is not None and tail.current.startswith("step 020")
        await pilot.press("escape")
        assert tail.current is None and not box.display
        await pilot.press("escape")
        assert table(app).has_focus
