"""`perfwatch serve LOGDIR|CAMPAIGN.yaml`: the live view in a browser (textual-serve)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import urlsplit

from perfwatch.commands._options import path_arg

DEFAULT_PORT = 8000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_SESSIONS = 4  # each tab is one perfwatch process (~25 MB); a few tabs is what one person uses
MAX_SESSIONS = 64  # --max-sessions ceiling: each session is a perfwatch process


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="the live view in a web browser (the same app, keys and run control)",
        description="Serve the terminal app over HTTP with textual-serve: every browser tab gets its own "
        "`perfwatch attach LOGDIR`. A campaign YAML is launched first (in the background, as with "
        "--detach) and then served. Listens on 127.0.0.1 only unless --host says otherwise; from "
        "another machine use ssh -L (docs/serve.md). Needs the web extra: pip install 'perfwatch[web]'.",
    )
    p.add_argument("target", type=path_arg, help="a LOGDIR (or any folder of mllog files) or a campaign YAML")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--public-url", metavar="URL",
                   help="the URL browsers use to reach this server (behind a proxy or a port forward "
                   "to another port), default http://HOST:PORT")
    p.add_argument("--logdir", type=path_arg, help="with a campaign YAML: override its logdir")
    p.add_argument("--poll", action="store_true", help="poll files instead of inotify (NFS, Lustre)")
    p.add_argument("--readonly", "--no-control", dest="no_control", action="store_true",
                   help="only watch: the tabs never signal or start runs")
    p.add_argument("--no-token", action="store_true",
                   help="serve without the secret token in the URL (anyone who reaches the port can use it)")
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, metavar="N",
                   help=f"browser tabs served at once, one perfwatch process each (default {DEFAULT_MAX_SESSIONS})")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="another host name browsers use to reach this server (a proxy's, an alias); repeatable")
    p.add_argument("--theme", help="TUI theme name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfwatch.exporters import web
    from perfwatch.text.escape import one_line, printable

    target: Path = args.target
    if not target.exists():
        print(f"perfwatch serve: {target}: no such file or directory", file=sys.stderr)
        return 2
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        print("perfwatch serve: needs textual-serve: pip install 'perfwatch[web]'", file=sys.stderr)
        return 2
    if not 1 <= args.max_sessions <= MAX_SESSIONS:
        print(f"perfwatch serve: --max-sessions {args.max_sessions}: must be 1 to {MAX_SESSIONS}", file=sys.stderr)
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
    public_url = (args.public_url or f"http://{_url_host(args.host)}:{args.port}").rstrip("/")
    token = None if args.no_token else web.new_token()
    guard = web.Guard(web.allowed_hosts(args.host, public_url, args.allow_host), token, args.port,
                      max_sessions=args.max_sessions, public_netloc=urlsplit(public_url).netloc)
    url = public_url + "/" + (f"?{web.TOKEN_PARAM}={token}" if token else "")
    mode = "read-only" if args.no_control else "with run control"
    print(f"perfwatch serve: {printable(str(logdir))} on {url} ({mode}; Ctrl-C stops serving; runs keep running)",
          file=sys.stderr, flush=True)
    web.serve(argv, host=args.host, port=args.port, title=f"perfwatch — {one_line(logdir.name)}", guard=guard,
              public_url=public_url)
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
