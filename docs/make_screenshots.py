"""Pictures for the README, made by the real app on the bundled MLPerf logs (so they stay true).

    python docs/make_screenshots.py          # writes docs/tui-*.png (needs rsvg-convert; else leaves the .svg)
    python docs/make_screenshots.py --demo   # docs/tui-demo.png: the demo campaign mid-run (about a minute)

Each picture is the real `PerfwatchApp` over `perfwatch attach tests/data/mlperf-logs`, driven by
Textual's Pilot like a user: the main screen (runs + detail with plots), the campaign view with the
MosaicML baseline chosen (`g`, `b`), and the compare screen of three marked runs (space, `c`).
No device sampler: the pictures show no GPU that the logs did not come from.

`--demo` launches `workloads/demo.yaml` for real (in a temporary LOGDIR, as `perfwatch launch` does, the
CPU peak for its thread count measured first) and takes the main screen once a run has reached its
target while another, with an ETA, is still training; the runs are stopped afterwards.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "mlperf-logs"
OUT = REPO / "docs"


async def _shot(name: str, size: tuple[int, int], keys: list[str], ready) -> Path:  # type: ignore[no-untyped-def]
    from perfwatch.core.engine import attach_session
    from perfwatch.ui.app import PerfwatchApp

    app = PerfwatchApp(attach_session(LOGS, control=False), theme="dark")
    async with app.run_test(size=size) as pilot:
        for _ in range(400):
            snap = app.main.snapshot
            if snap is not None and len(snap.views) == 35 and app.main.settled:
                break
            await pilot.pause(0.05)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.05)
        for _ in range(400):
            if ready(app):
                break
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        path = OUT / f"tui-{name}.svg"
        app.save_screenshot(filename=path.name, path=str(path.parent))
    return path


def _is_groups(app) -> bool:  # type: ignore[no-untyped-def]
    rows = getattr(app.screen, "rows", ())
    return len(rows) == 4 and any(r.speedup for r in rows)


async def main() -> list[Path]:
    os.environ.setdefault("PERFWATCH_CONFIG_DIR", tempfile.mkdtemp())  # never the user's saved theme
    shots = [await _shot("main", (120, 40), ["down", "down"], lambda app: app.main.settled)]

    async def groups() -> Path:
        from perfwatch.core.engine import attach_session
        from perfwatch.ui.app import PerfwatchApp

        app = PerfwatchApp(attach_session(LOGS, control=False), theme="dark")
        async with app.run_test(size=(150, 16)) as pilot:
            for _ in range(400):
                if app.main.snapshot is not None and len(app.main.snapshot.views) == 35:
                    break
                await pilot.pause(0.05)
            await pilot.press("g")
            for _ in range(400):
                if len(getattr(app.screen, "rows", ())) == 4:
                    break
                await pilot.pause(0.05)
            app.screen.query_one("DataTable").move_cursor(row=1)
            await pilot.press("b")
            for _ in range(400):
                if _is_groups(app):
                    break
                await pilot.pause(0.05)
            await pilot.pause(0.3)
            path = OUT / "tui-campaign.svg"
            app.save_screenshot(filename=path.name, path=str(path.parent))
        return path

    shots.append(await groups())
    shots.append(await _shot("compare", (120, 32), ["space", "down", "space", "down", "space", "c"],
                             lambda app: type(app.screen).__name__ == "CompareScreen"))
    return shots


async def demo_shot() -> Path:
    """The demo campaign mid-run: one run at its target, another still training with an ETA shown."""
    from perfwatch.core.control.campaign import load_campaign
    from perfwatch.core.engine import launch_session
    from perfwatch.core.measure import host_peak
    from perfwatch.ui.app import PerfwatchApp

    campaign = load_campaign(REPO / "workloads" / "demo.yaml")
    host_peak.ensure(host_peak.campaign_needs(campaign), say=print)
    logdir = Path(tempfile.mkdtemp()) / "demo"
    os.chdir(REPO)  # the campaign's commands are relative to the checkout
    session = launch_session(campaign, logdir)
    app = PerfwatchApp(session, theme="dark")
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            def live_with_eta() -> list[str]:
                snap = app.main.snapshot
                if snap is None or not any(v.target_reached for v in snap.views.values()):
                    return []
                return [rid for rid, v in snap.views.items() if v.phase in ("running", "eval") and
                        not v.target_reached and len(v.evals) >= 6 and (eta := snap.etas.get(rid)) is not None
                        and eta.status == "converging" and eta.remaining_ms(v.elapsed_ms) is not None]

            for _ in range(12000):  # up to 10 minutes on a busy machine
                chosen = live_with_eta()
                if chosen:
                    app.query_one("RunsTable").select(chosen[0])  # type: ignore[attr-defined]
                    await pilot.pause(0.5)  # painted; still so after the paint?
                    if chosen[0] in live_with_eta():
                        break
                await pilot.pause(0.05)
            path = OUT / "tui-demo.svg"
            app.save_screenshot(filename=path.name, path=str(path.parent))
    finally:
        if session.controller is not None:
            session.controller.close(stop_runs=True)
    return path


_TEXT_RUN = re.compile(r'(<text [^>]*?x=")([0-9.]+)("[^>]*?textLength=")([0-9.]+)("[^>]*>)((?:&#160;)+)([^<]*</text>)')


def keep_leading_spaces(svg: str) -> str:
    """rsvg-convert draws a text run's leading no-break spaces after its text (`id   state` came out as
    `idstate   `): start such a run that many cells to the right, without them."""

    def shift(m: re.Match[str]) -> str:
        spaces = m.group(6).count("&#160;")
        rest = m.group(7)[: -len("</text>")]
        if not rest.strip():
            return m.group(0)  # only spaces: nothing is drawn anyway
        cell = float(m.group(4)) / (spaces + len(html.unescape(rest)))
        x, length = float(m.group(2)) + spaces * cell, float(m.group(4)) - spaces * cell
        return f"{m.group(1)}{x:g}{m.group(3)}{length:g}{m.group(5)}{m.group(7)}"

    return _TEXT_RUN.sub(shift, svg)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    paths = [asyncio.run(demo_shot())] if "--demo" in sys.argv[1:] else asyncio.run(main())
    converter = shutil.which("rsvg-convert")
    for svg in paths:
        if converter:  # the README shows PNGs; the SVG is only the intermediate
            svg.write_text(keep_leading_spaces(svg.read_text()))
            subprocess.run([converter, str(svg), "-o", str(svg.with_suffix(".png"))], check=True)
            svg.unlink()
        print(svg.with_suffix(".png") if converter else svg)
