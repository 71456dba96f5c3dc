"""The live view over finished MLPerf logs (`perfwatch attach`): driven by Pilot like a user would."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_helpers import attach_app, mllog, screen_text, table, until

from perfwatch.ui.screens.dialogs import HelpScreen
from perfwatch.ui.widgets.detail import LogTail

LLAMA = "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora/result_0"


@pytest.fixture(autouse=True)
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


async def test_attach_lists_every_run_and_details_the_selected_one(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        text = screen_text(app)
        assert "35 runs" in text
        assert "✗ aborted" in text and "✓ done" in text
        assert table(app).selected == table(app).visible_ids[0]
        await pilot.press("down")
        second = table(app).visible_ids[1]
        await until(pilot, lambda: second in screen_text(app).split("─" * 20)[-1], "detail of the 2nd run")
        # an aborted run: how long it ran, never a "time-to-train" (MLPerf gives it none)
        assert "ran 5:36:36 (run_stop aborted)" in screen_text(app) and "time-to-train" not in screen_text(app)
        assert "state aborted (run_stop status aborted)" in screen_text(app)
        assert "╌ target 0.759" in screen_text(app)  # the eval plot draws the target line
        await pilot.press("l")  # log-only: the plots make room for the log tail
        await until(pilot, lambda: "╌ target 0.759" not in screen_text(app), "the log without plots")
        await pilot.press("l")
        await until(pilot, lambda: "╌ target 0.759" in screen_text(app), "the plots back")
        # nobody controls these runs: the control keys are not offered at all
        footer = screen_text(app).splitlines()[-1]
        assert "quit" in footer and "pause" not in footer and "kill" not in footer
        assert app.main.check_action("kill", ()) is False


async def test_filter_narrows_the_table_and_escape_restores_it(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        await pilot.press("slash", *"llama")
        await until(pilot, lambda: len(table(app).visible_ids) == 10, "10 llama runs")
        assert all("llama" in rid for rid in table(app).visible_ids)
        await pilot.press("enter")  # keeps the filter, back to the table
        assert len(table(app).visible_ids) == 10
        await pilot.press("slash", "escape")
        assert len(table(app).visible_ids) == 35
        await pilot.press("slash", *"aborted")
        await until(pilot, lambda: len(table(app).visible_ids) == 1, "the one aborted run")


async def test_help_lists_the_keys_and_closes(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for words in ("pause the", "resume the", "kill", "filter", "theme", "restart", "queued run now"):
            assert words in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_theme_key_cycles_and_the_choice_is_remembered(mlperf_logs, tmp_path):
    app = attach_app(mlperf_logs)
    async with app.run_test(size=(100, 30)) as pilot:
        first = app.theme
        assert first == "dark"
        await pilot.press("t")
        assert app.theme != first
        chosen = app.theme
        assert app.theme_variables["status-running"] != ""
    app2 = attach_app(mlperf_logs)
    async with app2.run_test(size=(100, 30)):
        assert app2.theme == chosen
    assert {"dark", "light", "colorblind"} <= set(app2._themes)


async def test_sort_key_reorders_runs(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        by_id = table(app).visible_ids
        assert by_id == sorted(by_id)
        await pilot.press("o")  # by state: the failed run sorts after the successful ones
        ids = table(app).visible_ids
        assert ids != by_id and "aborted" in app.main.snapshot.views[ids[-1]].run_status
        assert "state ▲" in screen_text(app)


async def test_log_tail_marks_bad_lines(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text(
        mllog("submission_benchmark", "resnet", 1) + mllog("run_start", None, 2)
        + ':::MLLOG {"key": "eval_accuracy", broken\n' + "plain shell noise\n"
    )
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["result_0"], "the run")
        await until(pilot, lambda: "broken" in screen_text(app), "the log tail")
        tail = app.query_one(LogTail)
        rendered = tail.text
        assert '✗ :::MLLOG {"key": "eval_accuracy", broken' in rendered
        assert "  plain shell noise" in rendered
        assert "bad lines 1" in screen_text(app)


async def test_lines_appended_while_running_show_up(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text(mllog("submission_benchmark", "resnet", 1_000) + mllog("run_start", None, 2_000))
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "running" in screen_text(app), "a running run")
        with log.open("a") as fh:
            fh.write(mllog("eval_accuracy", 0.5123, 62_000, epoch_num=1))
        await until(pilot, lambda: "0.5123/0.759" in screen_text(app), "the new eval value against the target")
        assert "1:00" in screen_text(app)  # elapsed since run_start
        with log.open("a") as fh:
            fh.write(mllog("eval_accuracy", 0.7701, 122_000, epoch_num=2))
            fh.write(mllog("run_stop", None, 123_000, status="success"))
        await until(pilot, lambda: "✓ done" in screen_text(app), "the finished run")
        assert "0.7701/0.759 ✓" in screen_text(app)


async def test_256_runs_filter_sort_scroll(tmp_path):
    for i in range(256):
        (tmp_path / f"run{i:03d}.txt").write_text(
            mllog("run_start", None, 0) + mllog("eval_accuracy", i / 1000, 1000, epoch_num=1)
        )
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 256, "256 runs")
        await pilot.press("end")
        assert table(app).selected == "run255"
        assert "run255" in screen_text(app)
        await pilot.press("home", "pagedown")
        assert table(app).selected not in ("run000", None)
        await pilot.press("slash", *"run12", "enter")
        assert table(app).visible_ids == [f"run12{i}" for i in range(10)]


async def test_small_terminal_keeps_the_essentials(mlperf_logs):
    app = attach_app(mlperf_logs, theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 35, "35 runs")
        text = screen_text(app)
        assert "eval/target" in text and "state" in text
        assert "MFU" not in text  # dropped first when narrow
        assert text.splitlines()[-1].strip().startswith("o sort") or "quit" in text.splitlines()[-1]


def test_bundled_logs_are_untouched(mlperf_logs):
    # the UI only reads: attaching must not have written anything into the data folder
    assert not any(p.name in ("perfwatch.json", "telemetry.jsonl") for p in Path(mlperf_logs).rglob("*"))


async def test_mfu_from_logged_flops_and_the_gpu_telemetry_sees(tmp_path):
    from perfwatch.core.measure.peaks import peak_for_sample
    from perfwatch.core.telemetry.fake import FakeSampler

    (tmp_path / "result_0.txt").write_text(
        mllog("perfwatch_flops_per_sample", 2.0e10, 0) + mllog("perfwatch_precision", "bf16", 0)
        + mllog("run_start", None, 0)
        + "".join(mllog("tracked_stats", {"throughput": 1000.0}, 1000 * k, step=k) for k in range(1, 6))
    )
    app = attach_app(tmp_path, theme="dark", sampler=FakeSampler())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "GPU0 NVIDIA H100" in screen_text(app), "the GPU in the device panel")
        snap = app.main.snapshot.devices
        peak, _ = peak_for_sample(snap.gpu.gpus[0], "bf16")
        assert peak is not None
        expected = 2.0e10 * 1000.0 / peak.flops
        cell = f"{expected * 100:.1f}%" if expected < 0.1 else f"{expected * 100:.0f}%"
        await until(pilot, lambda: cell in screen_text(app), f"MFU {cell}")


async def test_eta_to_target_shows_in_the_table_and_the_detail(tmp_path):
    import math

    def evals(values, start=0):
        return "".join(mllog("eval_accuracy", v, 60_000 * (k + 1), epoch_num=k + 1)
                       for k, v in enumerate(values) if k >= start)

    closing = [0.8 - 0.5 * math.exp(-0.35 * k) for k in range(1, 7)]  # reaches 0.759 at epoch 8
    flat = [0.30, 0.50, 0.60, 0.65, 0.67, 0.68, 0.685, 0.687, 0.688, 0.688]  # levels off at 0.688
    head = mllog("submission_benchmark", "resnet", 0) + mllog("run_start", None, 0)
    (tmp_path / "closing.txt").write_text(head + evals(closing))
    (tmp_path / "flat.txt").write_text(head + evals(flat))
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 2, "both runs")
        await until(pilot, lambda: "not converging" in screen_text(app), "the flat run's verdict")
        row = next(line for line in screen_text(app).splitlines() if line.startswith("closing"))
        assert "≈" in row and "±" in row  # time left with its uncertainty, never "ETA 0" or "100%"
        assert "%" not in row  # no budget in the log: no percentage
        table(app).select("closing")
        await until(pilot, lambda: "ETA ≈" in screen_text(app), "the ETA in the detail pane")
        assert "from the target" in screen_text(app)
        with (tmp_path / "closing.txt").open("a") as fh:  # two more evals: the target is reached
            fh.write(mllog("eval_accuracy", 0.755, 7 * 60_000, epoch_num=7))
            fh.write(mllog("eval_accuracy", 0.762, 8 * 60_000, epoch_num=8))
        await until(pilot, lambda: "0.762/0.759 ✓" in screen_text(app), "the target reached")
        row = next(line for line in screen_text(app).splitlines() if line.startswith("closing"))
        assert "≈" not in row and "reached" in row
