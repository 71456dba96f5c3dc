"""`perfwatch attach LOGDIR`: reopen a campaign (live or finished) or watch any folder of mllog files."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from perfwatch.commands import _metrics
from perfwatch.commands._options import add_ruleset, path_arg
from perfwatch.commands.launch import open_ui
from perfwatch.text.escape import printable

if TYPE_CHECKING:  # the engine is imported when attaching, not for `perfwatch --help`
    from perfwatch.core.engine import Session


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach",
        help="reopen a LOGDIR (re-adopting its runs) or watch any folder of mllog files",
        description="A perfwatch LOGDIR whose perfwatch is gone is taken over: live runs are re-adopted, "
        "queued ones start. One owned by a detached perfwatch is controlled through LOGDIR/requests/. "
        "Any other folder (an MLPerf results tree, logs a cluster job is writing) is only watched: "
        "--headless follows it until every run has logged run_stop (exit 0 if all succeeded).",
    )
    p.add_argument("logdir", type=path_arg, help="perfwatch LOGDIR, MLPerf results tree or mllog file")
    p.add_argument("--headless", action="store_true", help="plain progress lines and a final table (no TUI)")
    p.add_argument("--poll", action="store_true", help="poll files instead of inotify (NFS, Lustre)")
    p.add_argument("--no-control", action="store_true", help="only watch: never signal or start runs")
    p.add_argument("--once", action="store_true",
                   help="read every log once, print the report and exit (implies --headless --no-control)")
    p.add_argument("--take-over", action="store_true",
                   help="a LOGDIR you did not launch on this host: show what taking it over would run, "
                   "and run it once confirmed (interactively, or with --confirm DIGEST)")
    p.add_argument("--confirm", metavar="DIGEST",
                   help="with --take-over: the plan digest that --take-over printed; taken over only if "
                   "the plan is still exactly that one")
    p.add_argument("--owner", action="store_true", help=argparse.SUPPRESS)  # the --detach background process
    p.add_argument("--tui", action="store_true", help=argparse.SUPPRESS)  # perfwatch serve: a web driver, no tty
    p.add_argument("--theme", help="TUI theme name")
    _metrics.add_arguments(p)
    add_ruleset(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.control.registry import RegistryError
    from perfwatch.core.engine import attach_session

    if not args.logdir.exists():
        print(f"perfwatch attach: {args.logdir}: no such file or directory", file=sys.stderr)
        return 2
    if args.once:
        args.headless, args.no_control = True, True
    if args.confirm and not args.take_over:
        print("perfwatch attach: --confirm goes with --take-over", file=sys.stderr)
        return 2
    server, rc = _metrics.bind(args, "attach")
    if rc and not args.owner:
        return rc  # the detached owner runs the campaign anyway; its bind error is in scheduler.out
    try:
        session = attach_session(args.logdir, poll=args.poll, control=not args.no_control,
                                 confirm=args.confirm if args.take_over else None, ruleset=args.ruleset)
        if session.untrusted is not None:
            session = _untrusted(session, args)
    except (RegistryError, RuntimeError) as exc:  # RuntimeError: BackendError (no sbatch here for a Slurm campaign)
        print(printable(f"perfwatch attach: {exc}"), file=sys.stderr)
        if server is not None:
            server.close()
        return 2
    except _Refused as exc:
        if server is not None:
            server.close()
        return exc.code
    for req in getattr(session.controller, "dropped_requests", ()):
        print(printable(f"perfwatch attach: dropped, not executed: the waiting request {req}"), file=sys.stderr)
    if args.owner and not session.owns_campaign:
        print(f"perfwatch attach: {args.logdir} is already owned by another perfwatch", file=sys.stderr)
        if server is not None:
            server.close()
        return 2
    return _metrics.serving(server, session, lambda: open_ui(session, args, stop_on_interrupt=False, server=server),
                             args.metrics_grace)


class _Refused(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def describe_plan(data: dict, pending: list[str] | None = None) -> list[str]:
    """What taking this registry over would do: the runs it would start, the processes it would adopt,
    and the waiting control requests it would drop unexecuted."""
    import shlex

    from perfwatch.core.control.states import RunState

    lines = []
    for rec in data["runs"]:
        state, rid = RunState.of(rec.get("state")), rec.get("run_id")
        if state in (RunState.QUEUED, RunState.STARTING) and not rec.get("pid"):
            env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((rec.get("env") or {}).items()))
            lines.append(f"  start {rid}: {shlex.join(rec.get('argv') or [])}")
            lines.append(f"        in {rec.get('cwd')}" + (f" with {env}" if env else ""))
            if rec.get("cache_clear_cmd"):
                lines.append(f"        first: {shlex.join(rec['cache_clear_cmd'])}")
        elif rec.get("pid") and state.alive:
            lines.append(f"  adopt {rid}: pid {rec.get('pid')} (stop/kill would signal its process group)")
    lines = lines or ["  nothing: every run has ended"]
    for req in pending or ():
        lines.append(f"  drop, never execute, the waiting request: {req}")
    return lines


def _untrusted(session: Session, args: argparse.Namespace) -> Session:
    """Watch only, or show the plan and take it over once the user confirms this exact plan."""
    from perfwatch.core.control import trust
    from perfwatch.core.engine import attach_session

    exc = session.untrusted
    assert exc is not None
    where = args.logdir
    if not args.take_over:
        print(printable(f"perfwatch attach: not taking {where} over: {exc.reason}. Watching only: nothing "
                        f"is started or signalled. `perfwatch attach {where} --take-over` shows what would run."),
              file=sys.stderr)
        # nobody will ever start its queued runs: headless reports what the logs hold, it does not wait
        args.once = args.once or args.headless or not sys.stdout.isatty()
        return session
    if exc.changed:
        print(printable(f"perfwatch attach: the plan in {where} is not the one confirmed (digest "
                        f"{args.confirm}); not taken over. Run --take-over again to see it."), file=sys.stderr)
        raise _Refused(2)
    digest = trust.short_digest(exc.data)
    print(printable(f"{where}: {exc.reason}.\nTaking it over would:"), file=sys.stderr)
    from perfwatch.core.control.controller import describe_pending

    for line in describe_plan(exc.data, describe_pending(args.logdir)):
        print(printable(line), file=sys.stderr)
    print(f"plan digest: {digest}", file=sys.stderr)
    if sys.stdin.isatty():
        answer = input("Take it over and run this plan? Type 'yes': ").strip().lower()
        if answer != "yes":
            print("perfwatch attach: not taken over", file=sys.stderr)
            raise _Refused(1)
    else:
        print(printable(f"perfwatch attach: not taken over (no terminal to ask). To run exactly this plan: "
                        f"perfwatch attach {where} --take-over --confirm {digest}"), file=sys.stderr)
        raise _Refused(2)
    confirmed = attach_session(args.logdir, poll=args.poll, control=not args.no_control, confirm=digest,
                               ruleset=args.ruleset)
    if confirmed.untrusted is not None:
        print("perfwatch attach: the plan changed while you read it; not taken over", file=sys.stderr)
        raise _Refused(2)
    return confirmed
