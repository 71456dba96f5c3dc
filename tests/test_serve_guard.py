"""`perfwatch serve` refuses what a hostile web page or a DNS-rebinding name sends, with a real
websocket client (aiohttp's): a foreign Origin, a foreign Host, no token; caps its sessions; and
`--readonly` tabs start the app without run control."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("textual_serve", reason="perfwatch serve needs the web extra: pip install -e '.[web]'")
aiohttp = pytest.importorskip("aiohttp")

from test_serve import free_port, printed_url, stop  # noqa: E402

from perfwatch.exporters.web import Guard, allowed_hosts  # noqa: E402


def start_serve(logdir: Path, *extra: str) -> tuple[subprocess.Popen[str], int, str]:
    """The serve process, its port and the URL it printed (with the token unless --no-token)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "serve", str(logdir), "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return proc, port, printed_url(proc, port)


@pytest.fixture
def small_logdir(mlperf_logs: Path, tmp_path: Path) -> Path:
    src = mlperf_logs / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet"
    dst = tmp_path / "logs" / "resnet"
    dst.mkdir(parents=True)
    shutil.copy(src / "result_0.txt", dst / "result_0.txt")
    return dst.parent


async def ws_status(url: str, *, origin: str | None, host: str | None = None) -> int:
    """The HTTP status of a websocket handshake (101 when the session opened), reading the first frame."""
    headers = {}
    if origin is not None:
        headers["Origin"] = origin
    if host is not None:
        headers["Host"] = host
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(ws_close=5)) as ws:
                msg = await asyncio.wait_for(ws.receive(), 60)  # the app's first screen bytes
                assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def http_status(url: str, *, host: str | None = None, cookies: dict | None = None) -> tuple[int, str, dict]:
    headers = {"Host": host} if host else {}
    async with aiohttp.ClientSession(cookies=cookies) as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.text(), {k: v.value for k, v in resp.cookies.items()}


async def test_serve_refuses_foreign_origin_foreign_host_and_no_token(small_logdir: Path) -> None:
    proc, port, url = start_serve(small_logdir)
    try:
        token = url.split("?token=")[1]
        base, own = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
        ws = f"ws://127.0.0.1:{port}/ws"
        # the index: no token, a wrong one, a rebinding Host -> 403; the printed URL -> the page and a cookie
        assert (await http_status(base + "/"))[0] == 403
        assert (await http_status(base + "/?token=" + "x" * len(token)))[0] == 403
        status, text, _ = await http_status(url, host=f"evil.example:{port}")
        assert status == 403 and "evil.example" in text
        status, text, cookies = await http_status(url)
        assert status == 200 and "textual-terminal" in text and cookies[f"perfwatch_token_{port}"] == token
        assert (await http_status(base + "/", cookies=cookies))[0] == 200  # the cookie stands for the token
        # the websocket: a page on another origin, a rebinding Host, no Origin, no token -> refused
        assert await ws_status(f"{ws}?token={token}", origin="http://evil.example") == 403
        assert await ws_status(f"{ws}?token={token}", origin="http://evil.example", host="evil.example") == 403
        assert await ws_status(f"{ws}?token={token}", origin=f"http://127.0.0.1:{port + 1}") == 403
        assert await ws_status(f"{ws}?token={token}", origin=None) == 403
        assert await ws_status(ws, origin=own) == 403
        assert proc.stdout is not None
        # and our own page's websocket opens a session
        assert await ws_status(f"{ws}?token={token}", origin=own) == 101
    finally:
        stop(proc)
    out = proc.stdout.read() if proc.stdout else ""
    assert "refused GET /ws" in out and "Origin 'http://evil.example'" in out


def attach_children(proc: subprocess.Popen[str]) -> list[list[str]]:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            cmd = k.cmdline()
        except psutil.Error:
            continue
        if "attach" in cmd:
            out.append(cmd)
    return out


async def test_serve_caps_sessions_and_readonly_tabs_have_no_run_control(small_logdir: Path) -> None:
    proc, port, url = start_serve(small_logdir, "--no-token", "--readonly", "--max-sessions", "1")
    try:
        assert "?token=" not in url and "read-only" in url + " read-only"
        own, ws = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws"
        assert (await http_status(own + "/", host=f"rebind.example:{port}"))[0] == 403  # Host checked anyway
        async with aiohttp.ClientSession() as http, http.ws_connect(ws, headers={"Origin": own}) as first:
            await asyncio.wait_for(first.receive(), 60)
            assert await ws_status(ws, origin=own) == 503  # the second tab while the first is open
            cmds = attach_children(proc)
            assert cmds and all("--no-control" in c for c in cmds), cmds
        deadline = time.monotonic() + 90  # the first tab closed: its process ends, a new tab is served
        while attach_children(proc) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await ws_status(ws, origin=own) == 101
    finally:
        stop(proc)


def test_guard_rules() -> None:
    hosts = allowed_hosts("127.0.0.1", "http://127.0.0.1:8000")
    assert {"127.0.0.1", "localhost", "::1"} <= hosts and "evil.example" not in hosts
    g = Guard(hosts, "secret", 8000, max_sessions=2)
    ok = dict(query_token="secret", cookie_token=None, websocket=True)
    assert g.refusal("127.0.0.1:8000", "http://127.0.0.1:8000", **ok) is None  # type: ignore[arg-type]
    assert g.refusal("localhost:8000", "http://localhost:8000", **ok) is None  # type: ignore[arg-type]
    assert g.refusal("[::1]:8000", "http://[::1]:8000", **ok) is None  # type: ignore[arg-type]
    assert g.refusal("evil.example:8000", "http://evil.example:8000", **ok)  # type: ignore[arg-type]
    assert g.refusal("127.0.0.1:8000", "null", **ok)  # type: ignore[arg-type]  # a sandboxed iframe
    assert g.refusal("127.0.0.1:8000", "http://127.0.0.1:8000", "secreT", None, websocket=True)
    assert g.refusal("127.0.0.1:8000", None, None, "secret", websocket=False) is None  # cookie, plain GET
    # behind a port forward the page is http://127.0.0.1:9000 and the Host header says so
    fwd = Guard(allowed_hosts("127.0.0.1", "http://127.0.0.1:9000"), None, 8000, max_sessions=1,
                public_netloc="127.0.0.1:9000")
    assert fwd.refusal("127.0.0.1:9000", "http://127.0.0.1:9000", None, None, websocket=True) is None
    # listening everywhere: this machine's names are allowed, a rebinding name is not
    wide = allowed_hosts("0.0.0.0", None, ["proxy.internal"])
    assert "proxy.internal" in wide and "evil.example" not in wide and "localhost" in wide


async def test_serve_a_folder_whose_name_is_not_utf8(small_logdir: Path) -> None:
    """A LOGDIR named with byte 0xff: the page is served (its title shows the byte escaped), no HTTP 500."""
    odd = Path(os.fsdecode(os.fsencode(small_logdir.parent) + b"/logs\xff"))
    small_logdir.rename(odd)
    proc, port, url = start_serve(odd, "--no-token")
    try:
        status, text, _ = await http_status(f"http://127.0.0.1:{port}/")
        assert status == 200 and "logs\\xff" in text
        assert await ws_status(f"ws://127.0.0.1:{port}/ws", origin=f"http://127.0.0.1:{port}") == 101
    finally:
        stop(proc)
