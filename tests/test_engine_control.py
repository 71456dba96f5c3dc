"""Run control through the live engine: actions are queued and executed on the engine's thread (the only
caller of the controller), their outcome comes back as a future, and each snapshot says which actions
apply to which run. Real processes, started by the real scheduler."""

from __future__ import annotations

import time

import psutil
import pytest
from ui_helpers import WORKLOAD

from perfwatch.core.control.campaign import load_campaign
from perfwatch.core.control.states import ACTIONS, RunState, allowed
from perfwatch.core.engine import LiveEngine, attach_session, launch_session


@pytest.fixture
def session(tmp_path):
    (tmp_path / "spin.py").write_text(WORKLOAD)
    (tmp_path / "c.yaml").write_text(
        "name: engctl\ndefaults: {repeat: 2}\nscheduler: {max_parallel: 1}\n"
        "jobs:\n  - name: spin\n    cmd: [python, spin.py]\n    grace: 2s\n"
    )
    s = launch_session(load_campaign(tmp_path / "c.yaml", base=tmp_path), (tmp_path / "logdir").resolve())
    yield s
    assert s.controller is not None
    s.controller.close(stop_runs=True)


def _step_until(engine: LiveEngine, cond, what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        engine.step()
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_actions_run_on_the_engines_step_and_say_why_not(session):
    engine = LiveEngine(session, control_interval=0.05).start(threaded=False)
    try:
        _step_until(engine, lambda: (s := engine.snapshot) is not None and "spin.r0" in s.procs
                    and s.procs["spin.r0"].state is RunState.RUNNING, "spin.r0 running")
        snap = engine.snapshot
        assert snap is not None
        for rid, proc in snap.procs.items():  # the snapshot's actions are the states table's (local backend)
            assert snap.actions[rid] == {a for a in ACTIONS if allowed(a, proc.state)}
        assert engine.can("stop", "spin.r0") and not engine.can("resume", "spin.r0")

        stop = engine.act("stop", "spin.r0")
        refused = engine.act("restart", "spin.r1")  # queued: restart applies to finished runs only
        assert not stop.done() and not refused.done()  # nothing happens before the engine's step
        assert session.controller.procs()["spin.r0"].state is RunState.RUNNING
        engine.step()
        assert stop.result(timeout=0) is None
        assert refused.result(timeout=0) == "restart spin.r1: not possible now (it is queued)"
        snap = engine.snapshot
        assert snap is not None and snap.procs["spin.r0"].state in (RunState.STOPPING, RunState.STOPPED)
        assert "stop" not in snap.actions["spin.r0"]  # published with the new state, at the same step
        pid = snap.procs["spin.r0"].pid
        _step_until(engine, lambda: engine.snapshot.procs["spin.r0"].state is RunState.STOPPED, "spin.r0 stopped")
        assert pid is None or not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"

        late = engine.act("stop", "spin.r1")
    finally:
        engine.stop()
    assert late.result(timeout=0) == "stop spin.r1: perfwatch is closing"  # never left waiting


def test_without_a_controller_nothing_is_queued(tmp_path):
    (tmp_path / "result_0.txt").write_text("")
    engine = LiveEngine(attach_session(tmp_path, control=False))
    assert engine.act("stop", "result_0").result(timeout=0) == "nobody controls these runs"
    assert not engine.can("stop", "result_0")


def test_a_request_that_cannot_reach_the_owner_says_so(session):
    """Attached to a campaign another perfwatch owns, an action is a request file; when LOGDIR/requests
    cannot be written (here: a plain file is in its way) the action's outcome says why."""
    from perfwatch.core.control.controller import ClientController

    logdir = session.logdir
    (logdir / "requests").write_text("in the way")
    client = ClientController(logdir)
    engine = LiveEngine(session, controller=client).start(threaded=False)
    try:
        _step_until(engine, lambda: engine.can("stop", "spin.r1"), "spin.r1 listed by the owner's perfwatch.json")
        outcome = engine.act("stop", "spin.r1")
        engine.step()
        why = outcome.result(timeout=0)
        assert why is not None and why.startswith("stop spin.r1: cannot send stop:")
    finally:
        engine.stop()
