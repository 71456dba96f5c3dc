"""`perfwatch serve`: the live view in a browser, through textual-serve.

textual-serve starts one app process per browser tab (`perfwatch attach LOGDIR --tui`) and relays
the terminal over a websocket, so a tab is the terminal app: same keys, same run control (the
first tab on a campaign nobody owns takes it over, the others control it through the owner's
requests, exactly like a second `perfwatch attach`). Our own page template loads nothing from
other hosts (textual-serve's default one fetches a web font from Google).

A tab can stop and kill runs, so every request passes `Guard` first (threat model in
docs/serve.md): the `Host` header must name this server (no DNS rebinding), a request that
carries an `Origin` (every browser websocket does) must come from this server's own page, and the
per-launch secret token must be in the URL or in the cookie the first page view sets. At most
`max_sessions` tabs run at once.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import secrets
import shlex
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TEMPLATES = Path(__file__).with_name("web_templates")
TOKEN_PARAM = "token"

log = logging.getLogger(__name__)


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


def new_token() -> str:
    """A per-launch secret (192 bits), URL-safe."""
    return secrets.token_urlsafe(24)


def _host_only(netloc: str) -> str:
    """`[::1]:8000` -> `::1`, `Example.org:80` -> `example.org`; '' when it cannot be parsed."""
    try:
        return (urlsplit("//" + netloc).hostname or "").lower()
    except ValueError:
        return ""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def allowed_hosts(bind: str, public_url: str | None, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a browser may use for this server in `Host` and `Origin`: the address it binds, the
    public URL's host, the loopback names when it listens on loopback or everywhere, and this
    machine's names when it listens everywhere. Any other name is a DNS-rebinding attempt."""
    hosts = {bind.lower().strip("[]")}
    if public_url:
        hosts.add(_host_only(urlsplit(public_url).netloc))
    if _is_loopback(bind) or _is_wildcard(bind):
        hosts |= {"127.0.0.1", "localhost", "::1"}
    if _is_wildcard(bind):
        name = socket.gethostname().lower()
        hosts |= {name, socket.getfqdn(name).lower()}
        with contextlib.suppress(OSError):
            hosts |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    hosts |= {h.lower() for h in extra}
    hosts.discard("")
    return frozenset(hosts)


@dataclass
class Guard:
    """The checks every HTTP request and websocket passes before it reaches textual-serve."""

    hosts: frozenset[str]
    token: str | None  # None: --no-token
    port: int
    max_sessions: int  # browser tabs at once (each is a perfwatch process)
    public_netloc: str = ""  # host:port of the URL browsers use, when a proxy or a port forward differs
    sessions: int = field(default=0)

    @property
    def cookie(self) -> str:
        # cookies are shared by every port of a host: the port keeps two servers' tokens apart
        return f"perfwatch_token_{self.port}"

    def refusal(self, host_header: str | None, origin: str | None, query_token: str | None,
                cookie_token: str | None, *, websocket: bool) -> str | None:
        """Why this request is refused (the HTTP 403 text), or None to let it through."""
        host = _host_only(host_header or "")
        if host not in self.hosts:
            return f"Host {host_header!r} is not a name of this server (allowed: {', '.join(sorted(self.hosts))})"
        if origin is not None or websocket:
            parts = urlsplit(origin or "")
            if origin is None:
                return "a websocket without an Origin header"
            same = {(host_header or "").lower(), self.public_netloc.lower()}
            if parts.scheme not in ("http", "https") or _host_only(parts.netloc) not in self.hosts \
                    or parts.netloc.lower() not in same:
                return f"Origin {origin!r} is not this server's page"
        if self.token is not None:
            given = query_token if query_token is not None else cookie_token
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                return "no valid token: open the URL perfwatch serve printed (it ends with ?token=...)"
        return None


def serve(argv: list[str], *, host: str, port: int, title: str, guard: Guard,
          public_url: str | None = None) -> None:
    """Serve the app `argv` starts until Ctrl-C. textual-serve takes one command string: every
    argument is quoted with shlex.join, so a path with spaces or `;` stays one argument."""
    _server_class()(shlex.join(argv), host=host, port=port, title=title, public_url=public_url,
                    templates_path=TEMPLATES, guard=guard).serve()


def _server_class() -> Any:
    """textual-serve's Server with the guard in front (built here: textual-serve is an optional import)."""
    from aiohttp import web
    from textual_serve.server import Server

    @web.middleware
    async def guarded(request: web.Request, handler: Any) -> web.StreamResponse:
        guard: Guard = request.app["perfwatch_guard"]
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        why = guard.refusal(request.headers.get("Host"), request.headers.get("Origin"),
                            request.query.get(TOKEN_PARAM), request.cookies.get(guard.cookie), websocket=websocket)
        if why is not None:
            print(f"perfwatch serve: refused {request.method} {request.path} from {request.remote}: {why}",
                  file=sys.stderr, flush=True)
            return web.Response(status=403, text=f"perfwatch serve: refused: {why}\n")
        response = await handler(request)
        if guard.token is not None and request.query.get(TOKEN_PARAM) is not None and not response.prepared:
            response.set_cookie(guard.cookie, guard.token, httponly=True, samesite="Strict", path="/")
        return response

    class GuardedServer(Server):
        def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.guard = guard

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app["perfwatch_guard"] = self.guard
            app.middlewares.append(guarded)
            return app

        async def on_startup(self, app: web.Application) -> None:
            pass  # perfwatch serve prints its own line (with the token URL) before serving

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            if self.guard.sessions >= self.guard.max_sessions:
                print(f"perfwatch serve: refused a session: {self.guard.max_sessions} already open "
                      "(--max-sessions)", file=sys.stderr, flush=True)
                raise web.HTTPServiceUnavailable(text=f"perfwatch serve: {self.guard.max_sessions} sessions "
                                                 "already open (--max-sessions); close a tab\n")
            self.guard.sessions += 1
            try:
                return await super().handle_websocket(request)
            finally:
                self.guard.sessions -= 1

    return GuardedServer
