"""`perfwatch serve`: the live view in a real headless chromium, through textual-serve.

chromium is driven over the DevTools protocol. The terminal in the page draws on a canvas, so the
test reads what the app sends to the page: a script added before the page loads records the
websocket's terminal output, and the text between escape sequences is what the screen shows.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import browser
import pytest

from perfwatch.cli import main

pytest.importorskip("textual_serve", reason="perfwatch serve needs the web extra: pip install -e '.[web]'")

RECORD = r"""
(() => {
  window.__screen = [];
  const decoder = new TextDecoder();
  const Original = window.WebSocket;
  function Recording(url, protocols) {
    const ws = protocols === undefined ? new Original(url) : new Original(url, protocols);
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") window.__screen.push(decoder.decode(new Uint8Array(e.data), {stream: true}));
    });
    return ws;
  }
  Recording.prototype = Original.prototype;
  Object.assign(Recording, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Recording;
})();
"""
_ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78]")


def screen_texts(stream: str) -> list[str]:
    """The runs of text the terminal output writes between its escape sequences."""
    return [t.strip() for t in _ESCAPES.sub("\x00", stream).split("\x00") if t.strip()]


def detail_headers(texts: list[str]) -> list[tuple[str, str]]:
    """(run id, status) of each time the detail pane's header was drawn: the run id, then (a few pieces on)
    the status word right before '<benchmark> · <org> · ...'."""
    out = []
    for i, t in enumerate(texts):
        if " · " not in t or i < 2:
            continue
        ids = [x for x in texts[max(i - 4, 0):i - 1] if "/result_" in x]
        if ids:
            out.append((ids[-1], texts[i - 1].split()[-1]))
    return out


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the serve process's group, SIGKILL after 10 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"perfwatch serve did not listen on {port}")


def printed_url(proc: subprocess.Popen[str], port: int) -> str:
    """The URL `perfwatch serve` printed (with its secret token unless --no-token), once it listens.
    serve prints it before it listens; an exit before that ends the read (EOF)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        found = re.search(r" on (http://\S+)", line)
        if found:
            wait_listening(port, proc)
            return found.group(1)
    raise AssertionError("perfwatch serve printed no URL: " + "".join(seen))


async def wait_screen(dt: browser.DevTools, cond, start: int = 0, timeout: float = 45) -> list[str]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    texts: list[str] = []
    while time.monotonic() < deadline:
        stream = await dt.evaluate("window.__screen ? window.__screen.join('') : ''")
        texts = screen_texts(str(stream)[start:])
        if cond(texts):
            return texts
        await asyncio.sleep(0.2)
    raise AssertionError(f"the page never showed it; last texts: {texts[-40:]}")


async def test_serve_renders_the_runs_table_and_keys_reach_the_app(mlperf_logs: Path, tmp_path: Path) -> None:
    browser.chromium()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "serve", str(mlperf_logs), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url = printed_url(proc, port)
        with urllib.request.urlopen(url, timeout=10) as resp:
            page = resp.read().decode()
        assert "textual-terminal" in page and "googleapis" not in page  # our page: nothing from other hosts
        async with browser.DevTools(tmp_path / "profile", size=(1400, 900)) as dt:
            await dt.send("Page.enable")
            await dt.send("Page.addScriptToEvaluateOnNewDocument", source=RECORD)
            await dt.send("Page.navigate", url=url)
            resnet = [f"v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_{i}" for i in range(5)]
            texts = await wait_screen(dt, lambda t: all(r in t for r in resnet) and detail_headers(t))
            assert "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0" in texts
            assert any(t.startswith("perfwatch · mlperf-logs  35 runs") for t in texts)
            assert detail_headers(texts)[-1] == (resnet[0], "done")  # the first row is selected
            shown = len(str(await dt.evaluate("window.__screen.join('')")))
            # a key press in the page reaches the app: down arrow selects the next run (the aborted one)
            await dt.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
            for kind in ("rawKeyDown", "keyUp"):
                await dt.send("Input.dispatchKeyEvent", type=kind, key="ArrowDown", code="ArrowDown",
                              windowsVirtualKeyCode=40)
            texts = await wait_screen(dt, lambda t: (resnet[1], "aborted") in detail_headers(t), start=shown)
    finally:
        stop(proc)


def test_serve_refuses_a_taken_port_and_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(tmp_path), "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert f"--port {port}" in err and "in use" in err and "Traceback" not in err
    assert main(["serve", str(tmp_path), "--port", "70000"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def registry_state(logdir: Path, run_id: str) -> str | None:
    """The run's state as the campaign owner wrote it to LOGDIR/perfwatch.json (read as plain JSON)."""
    import json

    try:
        data = json.loads((logdir / "perfwatch.json").read_text())
    except (OSError, ValueError):
        return None
    return next((r.get("state") for r in data.get("runs", []) if r.get("run_id") == run_id), None)


async def press(dt: browser.DevTools, char: str) -> None:
    await dt.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
    await dt.send("Input.insertText", text=char)


@pytest.mark.slow
async def test_serve_a_campaign_yaml_and_pause_and_resume_a_run_from_the_browser(tmp_path: Path) -> None:
    """Run control in the page is the terminal's: `p` pauses the live run (the owner SIGSTOPs it), `p` resumes."""
    from launch_helpers import ROOT, campaign_file, wait_for

    browser.chromium()
    gate = tmp_path / "gate"
    camp = campaign_file(tmp_path, f"""
        name: web
        jobs:
          - name: hold
            cmd: [{sys.executable}, {ROOT}/tests/workloads_fake/fake.py, --gate, {gate}, --epochs, "2"]
        """)
    logdir, port = tmp_path / "logdir", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfwatch", "serve", str(camp), "--logdir", str(logdir),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        url = printed_url(proc, port)
        assert wait_for(lambda: registry_state(logdir, "hold.r0") == "running", timeout=30)
        async with browser.DevTools(tmp_path / "profile", size=(1400, 900)) as dt:
            await dt.send("Page.enable")
            await dt.send("Page.addScriptToEvaluateOnNewDocument", source=RECORD)
            await dt.send("Page.navigate", url=url)
            await wait_screen(dt, lambda t: "hold.r0" in t)  # the app is up, its only run selected
            shown = len(str(await dt.evaluate("window.__screen.join('')")))
            await press(dt, "p")
            assert wait_for(lambda: registry_state(logdir, "hold.r0") == "paused", timeout=20)
            # like a user, press again once the page shows the run paused (`p` toggles on the shown state)
            await wait_screen(dt, lambda t: any("paused" in x for x in t), start=shown)
            await press(dt, "p")
            assert wait_for(lambda: registry_state(logdir, "hold.r0") == "running", timeout=20)
        gate.touch()
        assert wait_for(lambda: registry_state(logdir, "hold.r0") == "succeeded", timeout=30)
    finally:
        gate.touch()
        if registry_state(logdir, "hold.r0") not in ("succeeded", None):  # failed midway (maybe paused)
            import json

            from launch_helpers import kill_groups

            data = json.loads((logdir / "perfwatch.json").read_text())
            kill_groups({r["pgid"] for r in data["runs"] if r.get("pgid")})  # the owner then ends on its own
        stop(proc)
