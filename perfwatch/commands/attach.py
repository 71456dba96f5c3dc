"""`perfwatch attach LOGDIR`: reopen a campaign (live or finished) or watch any folder of mllog files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfwatch.commands.launch import open_ui
from perfwatch.core.engine import attach_session


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach",
        help="reopen a LOGDIR (re-adopting its runs) or watch any folder of mllog files",
        description="A perfwatch LOGDIR whose perfwatch is gone is taken over: live runs are re-adopted, "
        "queued ones start. One owned by a detached perfwatch is controlled through LOGDIR/requests/. "
        "Any other folder (an MLPerf results tree, logs a cluster job is writing) is only watched: "
        "--headless follows it until every run has logged run_stop (exit 0 if all succeeded).",
    )
    p.add_argument("logdir", type=Path, help="perfwatch LOGDIR, MLPerf results tree or mllog file")
    p.add_argument("--headless", action="store_true", help="plain progress lines and a final table (no TUI)")
    p.add_argument("--poll", action="store_true", help="poll files instead of inotify (NFS, Lustre)")
    p.add_argument("--no-control", action="store_true", help="only watch: never signal or start runs")
    p.add_argument("--once", action="store_true",
                   help="read every log once, print the report and exit (implies --headless --no-control)")
    p.add_argument("--owner", action="store_true", help=argparse.SUPPRESS)  # the --detach background process
    p.add_argument("--theme", help="TUI theme name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.logdir.exists():
        print(f"perfwatch attach: {args.logdir}: no such file or directory", file=sys.stderr)
        return 2
    if args.once:
        args.headless, args.no_control = True, True
    session = attach_session(args.logdir, poll=args.poll, control=not args.no_control)
    if args.owner and not session.owns_campaign:
        print(f"perfwatch attach: {args.logdir} is already owned by another perfwatch", file=sys.stderr)
        return 2
    return open_ui(session, args, stop_on_interrupt=False)
