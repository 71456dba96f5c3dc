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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus/OpenMetrics metrics on this port (docs/metrics.md)")
    p.add_argument("--metrics-host", default=DEFAULT_HOST, metavar="ADDR",
                   help=f"address the metrics endpoint listens on (default {DEFAULT_HOST}: this host only)")


def forward(args: argparse.Namespace) -> list[str]:
    """The same options for a child perfwatch (the detached owner)."""
    if args.metrics_port is None:
        return []
    return ["--metrics-port", str(args.metrics_port), "--metrics-host", args.metrics_host]


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


def serving(server: MetricsServer | None, session: Session, run: Callable[[], int]) -> int:
    """Run the front end with the endpoint reading `session`; the endpoint closes with it."""
    if server is None:
        return run()
    from perfwatch.exporters.source import SessionSource

    server.serve(SessionSource(session))
    print(f"metrics: {server.url}", file=sys.stderr, flush=True)
    try:
        return run()
    finally:
        server.close()
