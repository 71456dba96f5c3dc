"""`perfwatch serve LOGDIR|CAMPAIGN.yaml`: the live view in a browser (textual-serve)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_PORT = 8000
DEFAULT_HOST = "127.0.0.1"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="the live view in a web browser (the same app, keys and run control)",
        description="Serve the terminal app over HTTP with textual-serve: every browser tab gets its own "
        "`perfwatch attach LOGDIR`. A campaign YAML is launched first (in the background, as with "
        "--detach) and then served. Listens on 127.0.0.1 only unless --host says otherwise; from "
        "another machine use ssh -L (docs/serve.md). Needs the web extra: pip install 'perfwatch[web]'.",
    )
    p.add_argument("target", type=Path, help="a LOGDIR (or any folder of mllog files) or a campaign YAML")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--public-url", metavar="URL",
                   help="the URL browsers use to reach this server (behind a proxy or a port forward "
                   "to another port), default http://HOST:PORT")
    p.add_argument("--logdir", type=Path, help="with a campaign YAML: override its logdir")
    p.add_argument("--poll", action="store_true", help="poll files instead of inotify (NFS, Lustre)")
    p.add_argument("--no-control", action="store_true", help="only watch: never signal or start runs")
    p.add_argument("--theme", help="TUI theme name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfwatch.exporters import web

    target: Path = args.target
    if not target.exists():
        print(f"perfwatch serve: {target}: no such file or directory", file=sys.stderr)
        return 2
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        print("perfwatch serve: needs textual-serve: pip install 'perfwatch[web]'", file=sys.stderr)
        return 2
    try:
        web.check_port(args.host, args.port)
    except OSError as exc:
        print(f"perfwatch serve: {exc}", file=sys.stderr)
        return 2
    if target.is_file() and target.suffix in (".yaml", ".yml"):
        logdir, rc = _launch(target, args)
        if logdir is None:
            return rc
    else:
        logdir = target
    argv = [sys.executable, "-m", "perfwatch", "attach", str(logdir.resolve()), "--tui"]
    for flag in ("poll", "no_control"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    if args.theme:
        argv += ["--theme", args.theme]
    url = args.public_url or f"http://{args.host}:{args.port}"
    print(f"perfwatch serve: {logdir} on {url} (Ctrl-C stops serving; runs keep running)", file=sys.stderr,
          flush=True)
    web.serve(argv, host=args.host, port=args.port, title=f"perfwatch — {logdir.name}", public_url=args.public_url)
    return 0


def _launch(campaign_path: Path, args: argparse.Namespace) -> tuple[Path | None, int]:
    """Validate and start the campaign with a background owner (like launch --detach)."""
    from perfwatch.commands.launch import detach
    from perfwatch.core.control.campaign import CampaignError, load_campaign
    from perfwatch.core.engine import expand_logdir, launch_session

    try:
        campaign = load_campaign(campaign_path)
    except CampaignError as exc:
        print(f"perfwatch serve: {exc}", file=sys.stderr)
        return None, 2
    logdir = args.logdir or expand_logdir(campaign.logdir, campaign.name)
    try:
        session = launch_session(campaign, logdir, poll=args.poll)
    except (FileExistsError, RuntimeError, OSError) as exc:
        print(f"perfwatch serve: {exc}", file=sys.stderr)
        return None, 2
    assert session.controller is not None
    session.controller.close(stop_runs=False)
    detach(logdir)
    return logdir, 0
