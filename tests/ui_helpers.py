"""Helpers shared by the UI tests: sessions over real folders, waiting for the app to catch up."""

from __future__ import annotations

import json
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from perfwatch.core.engine import attach_session
from perfwatch.ui.app import PerfwatchApp
from perfwatch.ui.widgets.runs_table import RunsTable

# a workload that logs forever (run_start, then tracked_stats every 0.1 s) until signalled
WORKLOAD = textwrap.dedent(
    """
    import json, os, time
    path = os.environ["PERFWATCH_MLLOG"]
    def log(fh, key, value=None, **md):
        rec = {"namespace": "", "time_ms": time.time() * 1000, "event_type": "POINT_IN_TIME",
               "key": key, "value": value, "metadata": md}
        fh.write(":::MLLOG " + json.dumps(rec) + "\\n"); fh.flush()
    with open(path, "a") as fh:
        log(fh, "run_start")
        step = 0
        while True:
            step += 1
            log(fh, "tracked_stats", {"throughput": 100.0 + step}, step=step, samples_count=step * 32)
            time.sleep(0.1)
    """
)


def mllog(key: str, value: object = None, t: int = 0, **metadata: object) -> str:
    body = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key, "value": value,
            "metadata": metadata}
    return ":::MLLOG " + json.dumps(body) + "\n"


_TIME_MS = re.compile(r'"time_ms": (\d+)')


def written_now(lines: list[str]) -> str:
    """Lines of a real, old log as a run writing them now would: every record's time_ms moved by the same
    amount so the last is this moment (a log nobody controls, silent for a day, has ended)."""
    times = [int(m[1]) for line in lines if (m := _TIME_MS.search(line))]
    shift = int(time.time() * 1000) - max(times)
    return "".join(_TIME_MS.sub(lambda m: f'"time_ms": {int(m[1]) + shift}', line) for line in lines)


def attach_app(path: Path, **kw: object) -> PerfwatchApp:
    """The real app over `perfwatch attach PATH` (a folder nobody controls)."""
    session = attach_session(Path(path).resolve(), control=False)
    return PerfwatchApp(session, **kw)  # type: ignore[arg-type]


async def until(pilot, cond: Callable[[], bool], what: str, patience_s: float = 60.0) -> None:
    """Let the app run until `cond()` holds, in short pauses. `patience_s` only bounds a test that would
    otherwise hang (a loaded CI machine can be many times slower than a laptop); no timing is asserted."""
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        if cond():
            await pilot.pause()
            return
        await pilot.pause(0.025)
    if cond():
        await pilot.pause()
        return
    raise AssertionError(f"the app never showed: {what}")


def table(app: PerfwatchApp) -> RunsTable:
    return app.query_one(RunsTable)


def screen_text(app: PerfwatchApp) -> str:
    """What the terminal shows, as plain text lines."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
