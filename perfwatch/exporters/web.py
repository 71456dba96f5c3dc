"""`perfwatch serve`: the live view in a browser, through textual-serve.

textual-serve starts one app process per browser tab (`perfwatch attach LOGDIR --tui`) and relays
the terminal over a websocket, so a tab is the terminal app: same keys, same run control (the
first tab on a campaign nobody owns takes it over, the others control it through the owner's
requests, exactly like a second `perfwatch attach`). Our own page template loads nothing from
other hosts (textual-serve's default one fetches a web font from Google).
"""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

TEMPLATES = Path(__file__).with_name("web_templates")


def check_port(host: str, port: int) -> None:
    """OSError with a user-facing message when host:port cannot be listened on (taken, out of range)."""
    if not 1 <= port <= 65535:
        raise OSError(f"--port {port}: out of range (1-65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise OSError(f"--host {host}: {exc.strerror or exc}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            raise OSError(f"--port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(argv: list[str], *, host: str, port: int, title: str, public_url: str | None = None) -> None:
    """Serve the app `argv` starts until Ctrl-C. textual-serve takes one command string: every
    argument is quoted with shlex.join, so a path with spaces or `;` stays one argument."""
    from textual_serve.server import Server

    server = Server(shlex.join(argv), host=host, port=port, title=title, public_url=public_url,
                    templates_path=TEMPLATES)
    server.serve()
