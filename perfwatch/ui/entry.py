"""`run_tui`: what `perfwatch launch` and `perfwatch attach` call when stdout is a terminal."""

from __future__ import annotations

from collections.abc import Callable

from perfwatch.core.engine import Session


def run_tui(session: Session, *, theme: str | None = None, sampler_interval: float = 1.0,
            handoff: Callable[[], list[str]] | None = None) -> int:
    """Open the live view over `session`; returns the process exit status.

    On quit the controller (if any) is closed, stopping the runs only when the user asked to.
    Runs left going in a campaign this process owned are handed to a background owner (the one
    `launch --detach` starts), so queued runs still start and limits still hold. The terminal
    then says where the LOGDIR is and how to open it again. `handoff()` gives that owner's extra
    options (the metrics endpoint, which it serves from then on).
    """
    from perfwatch.core.telemetry.sampling import default_sampler
    from perfwatch.ui.app import PerfwatchApp

    app = PerfwatchApp(session, theme=theme, sampler=default_sampler(), sampler_interval=sampler_interval)
    ctl = session.controller
    left = False
    try:
        code = app.run()
    finally:
        if ctl is not None:
            left = not app.stop_runs_on_exit and any(not p.state.terminal for p in ctl.procs().values())
            ctl.close(stop_runs=app.stop_runs_on_exit)
    logdir = session.logdir.resolve()
    if left and session.owns_campaign:
        from perfwatch.commands.launch import detach

        detach(logdir, handoff() if handoff is not None else None)  # says where the campaign and its logs are, and how to attach again
    elif left:
        print(f"runs left to the perfwatch that owns {logdir}\n  perfwatch attach {logdir}")
    else:
        print(f"logs in {logdir}\n  perfwatch attach {logdir}")
    return int(code or 0)
