"""Debian's chromium, headless, for the browser tests (skipped, saying why, where it is missing).

`.ci/run` installs it; `CHROMIUM` overrides the binary. Every start uses its own profile folder and
no network services of its own (no sync, no component updates, no background fetches).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--disable-dev-shm-usage")


def chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does it)")
    return found


def argv(profile: Path, *extra: str) -> list[str]:
    return [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra]


def dump_dom(url: str, profile: Path, *, budget_ms: int = 3000, timeout: float = 60) -> str:
    """The DOM after the page ran for `budget_ms` of virtual time, serialized."""
    out = subprocess.run(argv(profile, f"--virtual-time-budget={budget_ms}", "--dump-dom", url),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def screenshot(url: str, profile: Path, png: Path, *, size: tuple[int, int] = (1280, 1600),
               timeout: float = 60) -> Path:
    out = subprocess.run(argv(profile, f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", url),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0 and png.exists(), out.stderr[-2000:]
    return png


class DevTools:
    """A headless chromium driven over the DevTools protocol (one page), with aiohttp's websocket client.

    Use as `async with DevTools(profile) as dt:`; `send(method, **params)` returns the result.
    """

    def __init__(self, profile: Path, size: tuple[int, int] = (1400, 900)) -> None:
        self.profile, self.size = profile, size
        self.proc: subprocess.Popen[str] | None = None
        self._id = 0

    async def __aenter__(self) -> DevTools:
        import asyncio
        import json
        import re

        import aiohttp

        self.proc = subprocess.Popen(
            argv(self.profile, "--remote-debugging-port=0", f"--window-size={self.size[0]},{self.size[1]}",
                 "about:blank"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stderr is not None
        loop = asyncio.get_running_loop()
        port = None
        for _ in range(200):  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
            line = await loop.run_in_executor(None, self.proc.stderr.readline)
            if not line:
                break
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port is not None, "chromium did not start its DevTools endpoint"
        self.http = aiohttp.ClientSession()
        for _ in range(100):
            async with self.http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                pages = [t for t in json.loads(await resp.text()) if t.get("type") == "page"]
            if pages:
                break
            await asyncio.sleep(0.05)
        self.ws = await self.http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def send(self, method: str, **params: object) -> dict:
        self._id += 1
        ident = self._id
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=60)
            if msg.get("id") == ident:
                assert "error" not in msg, (method, msg["error"])
                return msg.get("result", {})

    async def evaluate(self, expression: str) -> object:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    async def __aexit__(self, *exc: object) -> None:
        import contextlib
        import signal

        try:
            with contextlib.suppress(Exception):  # a clean exit: chromium ends and reaps its own helpers
                await self.ws.send_json({"id": self._id + 1, "method": "Browser.close", "params": {}})
            await self.ws.close()
            await self.http.close()
        finally:
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # whatever is left of its process group
                self.proc.wait(timeout=10)
