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
