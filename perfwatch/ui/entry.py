"""`run_tui`: what `perfwatch launch` and `perfwatch attach` call when stdout is a terminal."""

from __future__ import annotations

from perfwatch.core.engine import Session


def run_tui(session: Session, *, theme: str | None = None, sampler_interval: float = 1.0) -> int:
    """Open the live view over `session`; returns the process exit status.

    On quit the controller (if any) is closed, stopping the runs only when the user asked to.
    """
    from perfwatch.core.telemetry.sampling import default_sampler
    from perfwatch.ui.app import PerfwatchApp

    app = PerfwatchApp(session, theme=theme, sampler=default_sampler(), sampler_interval=sampler_interval)
    try:
        code = app.run()
    finally:
        if session.controller is not None:
            session.controller.close(stop_runs=app.stop_runs_on_exit)
    return int(code or 0)
