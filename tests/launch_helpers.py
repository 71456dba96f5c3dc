"""Shared helpers for the launch, scheduler, attach and metrics-endpoint tests: real processes and servers, always cleaned up."""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from perfwatch.core.control.campaign import load_campaign
from perfwatch.core.control.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[1]
FAKE = str(ROOT / "tests/workloads_fake/fake.py")


def wait_for(cond: Callable[[], object], timeout: float = 30.0, step: float = 0.05,
             tick: Callable[[], object] | None = None) -> bool:
    """Poll until `cond()` is true (a generous deadline only to never hang the suite)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if cond():
            return True
        time.sleep(step)
    return False


def campaign_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(textwrap.dedent(body).lstrip("\n"))
    return path


def scheduler(tmp_path: Path, body: str, gpus: tuple[int, ...] = ()) -> Scheduler:
    """A scheduler for `body` on a machine whose GPUs are `gpus` (none by default, on any host)."""
    campaign = load_campaign(campaign_file(tmp_path, body), base=ROOT, gpus=gpus)
    return Scheduler.create(campaign, tmp_path / "logdir", gpus=gpus)


def group_members(pgids: set[int]) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) in pgids:
                out.append(p.pid)
        except (OSError, psutil.Error):
            continue
    return out


def kill_groups(pgids: set[int]) -> None:
    for pgid in pgids:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def run_pgids(sched: Scheduler) -> set[int]:
    return {i.pgid for i in sched.procs().values() if i.pgid}


def scrape_once(snap) -> str:  # type: ignore[no-untyped-def]
    """Serve one fixed `ExportSnapshot` on a free loopback port and return one real HTTP scrape of it."""
    import socket
    import urllib.request

    from perfwatch.exporters import metrics

    class Fixed:
        def snapshot(self):  # type: ignore[no-untyped-def]
            return snap

        def close(self) -> None:
            pass

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = metrics.bind("127.0.0.1", port)
    server.serve(Fixed())
    try:
        with urllib.request.urlopen(server.url, timeout=30) as resp:
            assert resp.status == 200
            return resp.read().decode("utf-8")
    finally:
        server.close()
