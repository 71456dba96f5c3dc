"""`--metrics-port` / `--metrics-host` shared by launch and attach (not a command: the leading underscore)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfwatch.core.engine import Session
    from perfwatch.exporters.metrics import MetricsServer

DEFAULT_HOST = "127.0.0.1"
# after the campaign: 2 x Prometheus's default scrape interval (1 min), ended early once 2 scrapes saw the end
DEFAULT_GRACE = 120.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus/OpenMetrics metrics on this port (docs/metrics.md)")
    p.add_argument("--metrics-host", default=DEFAULT_HOST, metavar="ADDR",
                   help=f"address the metrics endpoint listens on (default {DEFAULT_HOST}: this host only)")
    p.add_argument("--metrics-grace", type=_seconds, default=DEFAULT_GRACE, metavar="SECONDS",
                   help="after the campaign ends, keep the endpoint up until two more scrapes saw the final "
                   f"states, at most this long (default {DEFAULT_GRACE:g}; 0: close at once)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more seconds")
    return value


def forward(args: argparse.Namespace) -> list[str]:
    """The same options for a child perfwatch (the detached owner)."""
    if args.metrics_port is None:
        return []
    return ["--metrics-port", str(args.metrics_port), "--metrics-host", args.metrics_host,
            "--metrics-grace", f"{args.metrics_grace:g}"]


def bind(args: argparse.Namespace, command: str) -> tuple[MetricsServer | None, int]:
    """Listen now, before anything starts: (server or None, 0), or (None, 2) after printing why not."""
    if args.metrics_port is None:
        return None, 0
    from perfwatch.exporters.metrics import bind as bind_server

    try:
        return bind_server(args.metrics_host, args.metrics_port), 0
    except OSError as exc:
        print(f"perfwatch {command}: {exc}", file=sys.stderr)
        return None, 2


def serving(server: MetricsServer | None, session: Session, run: Callable[[], int], grace: float = 0.0) -> int:
    """Run the front end with the endpoint reading `session`; when the campaign is over the endpoint stays
    up for the `grace` period after it (so a scraper sees the final states), then closes."""
    if server is None:
        return run()
    from perfwatch.exporters.source import SessionSource

    server.serve(SessionSource(session))
    print(f"metrics: {server.url}", file=sys.stderr, flush=True)
    try:
        rc = run()
        if grace > 0 and server.campaign_over():  # quitting while runs go on: those states are not final
            print(f"metrics: serving the final states until two more scrapes, at most {grace:g} s "
                  "(--metrics-grace; Ctrl-C ends it)", file=sys.stderr, flush=True)
            server.linger(grace)
        return rc
    finally:
        server.close()
