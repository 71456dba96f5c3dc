"""The live engine both front ends drive: real files, a real watcher, its own thread."""

from __future__ import annotations

import os
import threading
import time

import pytest
from ui_helpers import attach_app, mllog, screen_text, table, until

from perfwatch.core.engine import LiveEngine, attach_session


def _wait(cond, what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def test_engine_wakes_once_per_update_and_loses_nothing(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text(mllog("run_start", None, 0))
    wakes: list[int] = []
    engine = LiveEngine(attach_session(tmp_path, control=False))
    engine.start(lambda: wakes.append(threading.get_ident()))
    try:
        _wait(lambda: engine.ready.is_set() and wakes, "the first read")
        first = engine.take()
        assert first is not None and "result_0" in first.snapshot.views
        assert first.snapshot.views["result_0"].phase == "running"
        wakes.clear()
        for k in range(1, 301):  # 300 appends, nobody takes the updates meanwhile
            with log.open("a") as fh:
                fh.write(mllog("eval_accuracy", k / 1000, 1000 * k, epoch_num=k))
        _wait(lambda: (s := engine.snapshot) is not None and s.views["result_0"].epoch == 300, "the last line")
        assert len(wakes) == 1, "one wake-up until the update is taken, however many lines arrived"
        assert wakes[0] != threading.get_ident()  # called on the engine's thread
        update = engine.take()
        assert update is not None and update.changed == {"result_0"}
        assert update.snapshot.views["result_0"].key_counts["eval_accuracy"] == 300
        assert engine.take() is None  # nothing new since
    finally:
        engine.stop()


def test_a_log_that_fell_silent_long_ago_is_not_running_in_the_live_view(tmp_path):
    """`attach` on a results tree whose file ends without run_stop, its last record from 2024: the engine
    judges it as `report` does (core/model/status.py), not `running`."""
    last = 1728590477170  # 2024-10-10 20:01:17 UTC
    (tmp_path / "result_2.txt").write_text(mllog("run_start", None, last - 60_000)
                                          + mllog("eval_accuracy", 0.71, last, epoch_num=3))
    (tmp_path / "result_3.txt").write_text(mllog("run_start", None, int(time.time() * 1000)))  # just now
    engine = LiveEngine(attach_session(tmp_path, control=False)).start(threaded=False)
    try:
        _wait(lambda: engine.step() is not None and (s := engine.snapshot) is not None
              and {"result_2", "result_3"} <= set(s.statuses), "both logs judged")
        statuses = engine.snapshot.statuses
        assert statuses["result_2"].word == "unknown", statuses["result_2"]
        assert statuses["result_2"].reason == "the log ends without run_stop (last record 2024-10-10 20:01 UTC)"
        assert statuses["result_3"].word == "running"
        assert engine.snapshot.counts.states == {"running": 1, "unknown": 1}
    finally:
        engine.stop()


def _run_with_bad_telemetry(tmp_path):
    run = tmp_path / "mlp.r0"
    run.mkdir()
    (run / "mllog.txt").write_text(mllog("run_start", t=1000) + mllog("eval_accuracy", 0.5, t=2000))
    os.symlink("telemetry.jsonl", run / "telemetry.jsonl")  # a link to itself: unreadable, even for root
    return run


def test_an_unreadable_file_reaches_the_error_channel_once(tmp_path):
    _run_with_bad_telemetry(tmp_path)
    engine = LiveEngine(attach_session(tmp_path, control=False), follow_interval=0.05)
    engine.start(None)
    try:
        _wait(engine.ready.is_set, "the first read")
        engine.select("mlp.r0")
        _wait(lambda: (s := engine.snapshot) is not None and s.errors, "an error")
        time.sleep(0.3)  # several more follow passes: the same problem is not repeated
        snap = engine.snapshot
        assert snap is not None
        assert len(snap.errors) == 1
        err = snap.errors[0]
        assert err.source == "telemetry"
        assert f"cannot read {tmp_path / 'mlp.r0' / 'telemetry.jsonl'}" in err.message
        assert "symbolic links" in err.message  # the OS's reason, not a traceback
        assert snap.selected.run_id == "mlp.r0" and snap.selected.telemetry == ()
    finally:
        engine.stop()


@pytest.fixture
def _config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.usefixtures("_config_home")
async def test_the_tui_shows_engine_errors_to_the_user(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _run_with_bad_telemetry(logdir)
    app = attach_app(logdir, theme="dark")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await until(pilot, lambda: table(app).visible_ids == ["mlp.r0"], "the run")
        await until(pilot, lambda: "cannot read" in screen_text(app), "the error as a notification")
        assert "symbolic" in screen_text(app)  # the reason (the toast wraps the long path)


def test_a_new_eval_refits_the_eta_at_most_every_interval_but_the_target_shows_at_once(tmp_path, monkeypatch):
    """A fit per run per eval would cost a core on a log with an eval a second: a new eval alone is refitted
    no sooner than `refit_gap_ms` after the last fit (then it is, without any further line), reaching the
    target at once."""
    import math

    from perfwatch.core import engine as engine_mod

    monkeypatch.setattr(engine_mod, "refit_gap_ms", lambda elapsed_ms: 3000.0)
    log = tmp_path / "result_0.txt"
    curve = [0.8 - 0.5 * math.exp(-0.35 * k) for k in range(1, 12)]  # reaches resnet's 0.759 at epoch 8
    head = mllog("submission_benchmark", "resnet", 0) + mllog("run_start", None, 0)
    log.write_text(head + "".join(mllog("eval_accuracy", curve[k], 60_000 * (k + 1), epoch_num=k + 1)
                                  for k in range(4)))
    engine = LiveEngine(attach_session(tmp_path, control=False))
    engine.start()

    def state() -> tuple[int, object]:
        snap = engine.snapshot
        if snap is None or "result_0" not in snap.views:
            return 0, None
        return len(snap.views["result_0"].evals), snap.etas.get("result_0")

    try:
        _wait(lambda: state()[0] == 4 and state()[1] is not None, "the first fit")
        first = state()[1]
        assert first.status == "converging"  # type: ignore[union-attr]
        with log.open("a") as fh:
            fh.write(mllog("eval_accuracy", curve[4], 5 * 60_000, epoch_num=5))
        _wait(lambda: state()[0] == 5, "the fifth eval")
        assert state()[1] is first, "refitted at once for a new eval"
        _wait(lambda: state()[1] is not first, "the deferred refit, with no further line", timeout=15)
        assert state()[1] != first  # the fit saw the fifth eval
        with log.open("a") as fh:  # the target: shown at once, though the last fit is less than 3 s old
            fh.write("".join(mllog("eval_accuracy", curve[k], 60_000 * (k + 1), epoch_num=k + 1)
                             for k in range(5, 8)))
        _wait(lambda: (e := state()[1]) is not None and e.status == "reached", "reached", timeout=2.5)
    finally:
        engine.stop()


DEMO_LOGS = os.path.join(os.path.dirname(__file__), "data", "demo-logs")


@pytest.mark.parametrize(("run", "target"), [("mlm.r0", 0.90), ("mlp.bs64.r1", 0.92)])
def test_a_demo_run_shows_its_eta_while_it_trains(tmp_path, monkeypatch, run, target):
    """A real log of the demo (tests/data/demo-logs), fed into the engine line by line on its own clock
    (the engine's monotonic clock is the log's time): from the first eval past half the run on, the ETA
    column shows an estimate at most evals, and every one of them holds against the real crossing (read
    here from the log itself: the first eval at the demo's target). Earlier, on 4-6 evals of a warm-up, a
    lower bound can still be too late (mlm.r0 says `≥0:47` at 5 s)."""
    import json
    from types import SimpleNamespace

    from perfwatch.core import engine as engine_mod
    from perfwatch.core.ingest.tail import LineBatch

    with open(os.path.join(DEMO_LOGS, run, "mllog.txt"), "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    records = [json.loads(line.split(b":::MLLOG", 1)[1]) for line in lines]
    start = next(r["time_ms"] for r in records if r["key"] == "run_start")
    crossing = next(r["time_ms"] for r in records if r["key"] == "eval_accuracy" and r["value"] >= target) - start
    clock = [0.0]
    monkeypatch.setattr(engine_mod, "time", SimpleNamespace(monotonic=lambda: clock[0], time=lambda: clock[0]))

    class Handed:  # the watcher: the test hands every line in itself
        def __init__(self, roots, sink, **_kw):
            self.sink, self.ready = sink, threading.Event()
            self.ready.set()

        def start(self):
            pass

        def stop(self):
            pass

    log = tmp_path / run / "mllog.txt"
    log.parent.mkdir()
    log.write_bytes(b"")
    engine = LiveEngine(attach_session(tmp_path, control=False), watcher_factory=Handed).start(threaded=False)
    shown: list[tuple[float, str, object]] = []  # (time since run_start, ETA column, Eta) at each eval
    try:
        for line, rec in zip(lines, records, strict=True):
            with log.open("ab") as fh:
                fh.write(line)
            clock[0] = rec["time_ms"] / 1000.0
            engine._watcher.sink([LineBatch(str(log), [line], False)])
            engine.step()
            if rec["key"] == "eval_accuracy" and rec["time_ms"] - start < crossing:
                snap = engine.snapshot
                assert snap is not None
                eta = snap.etas.get(run)
                elapsed = rec["time_ms"] - start
                shown.append((elapsed, eta.text(elapsed) if eta is not None else "–", eta))
    finally:
        engine.stop()
    late = [s for s in shown if s[0] >= crossing / 2]
    assert late and late[0][1][0] in "≈≥", shown  # an estimate at the first eval past half the run
    assert sum(text[0] in "≈≥" for _, text, _ in late) * 2 > len(late), shown
    for elapsed, text, eta in late:
        if text.startswith("≈"):  # the real crossing lies inside the interval, to the log's second
            assert eta.at_ms - eta.plus_minus_ms - 1000 <= crossing <= eta.at_ms + eta.plus_minus_ms + 1000, \
                (elapsed, text, crossing)
        elif text.startswith("≥"):  # a lower bound that held
            assert crossing >= eta.at_ms - 1000, (elapsed, text, crossing)


def test_a_launch_samples_the_devices_on_one_thread_only(tmp_path, monkeypatch):
    """The campaign owner records telemetry.jsonl with its sampler thread; the live view shows that thread's
    samples instead of starting a second sampler."""
    from launch_helpers import ROOT, campaign_file

    from perfwatch.core.control.campaign import load_campaign
    from perfwatch.core.engine import launch_session
    from perfwatch.core.telemetry.sampling import default_sampler

    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))
    body = "name: one\njobs:\n  - name: s\n    cmd: [python, -c, 'import time; time.sleep(2)']\n"
    session = launch_session(load_campaign(campaign_file(tmp_path, body), base=ROOT), tmp_path / "logdir")
    engine = LiveEngine(session, sampler=default_sampler()).start(threaded=False)
    try:
        samplers = [t for t in threading.enumerate() if t.name == "perfwatch-telemetry"]
        assert len(samplers) == 1, samplers
        _wait(lambda: engine.step() is not None and engine.snapshot is not None
              and engine.snapshot.devices is not None, "a device sample in the live view")
    finally:
        engine.stop()
        assert session.controller is not None
        session.controller.close(stop_runs=True)
    assert not [t for t in threading.enumerate() if t.name == "perfwatch-telemetry" and t.is_alive()]


def test_a_killed_run_shows_no_eta_though_its_log_never_says_run_stop(tmp_path, monkeypatch):
    """The ETA of a run whose process is gone (killed here) is "–": nothing will reach the target."""
    from launch_helpers import ROOT, campaign_file

    from perfwatch.core.control.campaign import load_campaign
    from perfwatch.core.engine import launch_session

    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))
    # a workload that logs a converging curve short of its target, then keeps training (sleeps)
    script = tmp_path / "curve.py"
    script.write_text(
        "import json, math, os, time\n"
        "out = open(os.environ['PERFWATCH_MLLOG'], 'a', buffering=1)\n"
        "def log(key, value=None, **md):\n"
        "    rec = {'time_ms': time.time() * 1000, 'key': key, 'value': value, 'metadata': md}\n"
        "    out.write(':::MLLOG ' + json.dumps(rec) + '\\n')\n"
        "log('run_start')\n"
        "for k in range(1, 8):\n"
        "    time.sleep(0.2)\n"
        "    log('eval_accuracy', 0.95 - 0.5 * math.exp(-0.2 * k), epoch_num=k)\n"
        "time.sleep(120)\n")
    body = f"""
        name: one
        defaults: {{target: {{key: eval_accuracy, value: 0.9}}}}
        jobs:
          - name: c
            cmd: [python, {script}]
    """
    session = launch_session(load_campaign(campaign_file(tmp_path, body), base=ROOT), tmp_path / "logdir")
    engine = LiveEngine(session).start()
    ctl = session.controller
    assert ctl is not None

    def eta():  # type: ignore[no-untyped-def]
        snap = engine.snapshot
        return None if snap is None else snap.etas.get("c.r0")

    try:
        _wait(lambda: (e := eta()) is not None and e.status == "converging", "an ETA while it trains", timeout=90)
        ctl.kill("c.r0")
        _wait(lambda: eta() is None or eta().status == "stopped", "no ETA once killed", timeout=30)
        snap = engine.snapshot
        assert snap is not None and "run_stop" not in snap.views["c.r0"].key_counts
    finally:
        engine.stop()
        ctl.close(stop_runs=True)
