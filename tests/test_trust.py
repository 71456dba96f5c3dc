"""Security: `attach` never runs a plan this user did not launch on this host; run folders stay in LOGDIR.

A LOGDIR from elsewhere (a tarball, a shared folder) is written here by hand, the way an attacker
would, and opened with the real `perfwatch attach` command in a subprocess. The proof that nothing
ran is a marker file the planted argv would create.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
from launch_helpers import FAKE, ROOT, campaign_file, kill_groups

from perfwatch.core.control import registry
from perfwatch.core.control.campaign import load_campaign


def planted(tmp_path: Path, marker: Path, *, run_id: str | None = None, sign: bool = True) -> Path:
    """A LOGDIR whose one queued run would create `marker`; signed by this user unless `sign=False`."""
    path = campaign_file(tmp_path, f"""
        jobs:
          - {{name: job, cmd: [python, {FAKE}, --epochs, 1]}}
        """)
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    data = msgspec.to_builtins(registry.new_registry(load_campaign(path, base=ROOT), logdir))  # the file's plain data
    rec = data["runs"][0]
    rec["argv"] = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    if run_id is not None:
        rec["run_id"] = run_id
    if sign:
        from perfwatch.core.control import trust

        trust.sign(data)
    else:
        data.pop("trust", None)
    (logdir / "perfwatch.json").write_text(json.dumps(data))
    return logdir


def attach(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfwatch", "attach", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def pgids(logdir: Path) -> set[int]:
    try:
        return {r["pgid"] for r in json.loads((logdir / "perfwatch.json").read_text())["runs"] if r.get("pgid")}
    except (OSError, ValueError):
        return set()


def test_a_planted_registry_is_only_watched_and_take_over_shows_the_plan_first(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker, sign=False)
    try:
        watched = attach(str(logdir), "--headless")
        assert not marker.exists()
        assert "not taking" in watched.stderr and "Watching only" in watched.stderr, watched.stderr
        assert json.loads((logdir / "perfwatch.json").read_text())["runs"][0]["state"] == "queued"

        shown = attach(str(logdir), "--headless", "--take-over")  # stdin is not a terminal: show, do not run
        assert shown.returncode == 2 and not marker.exists()
        assert "PWNED" in shown.stderr and "start job.r0" in shown.stderr, shown.stderr
        digest = shown.stderr.split("plan digest: ")[1].split()[0]

        wrong = attach(str(logdir), "--headless", "--take-over", "--confirm", "0" * 16)
        assert wrong.returncode == 2 and not marker.exists() and "not the one confirmed" in wrong.stderr

        ran = attach(str(logdir), "--headless", "--take-over", "--confirm", digest)
        assert marker.read_text() == "ran", ran.stdout + ran.stderr
        assert ran.returncode == 0 and "all runs succeeded" in ran.stdout
        again = attach(str(logdir), "--headless")  # confirmed once: now this user's, taken over silently
        assert "not taking" not in again.stderr and again.returncode == 0
    finally:
        kill_groups(pgids(logdir))


def test_a_registry_signed_here_runs_but_not_once_changed_copied_or_from_another_host(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker)
    path = logdir / "perfwatch.json"
    signed = json.loads(path.read_text())
    try:
        other_key = attach(str(logdir), "--headless", env={"XDG_STATE_HOME": str(tmp_path / "someone-else")})
        assert not marker.exists() and "signature does not match" in other_key.stderr, other_key.stderr

        changed = json.loads(json.dumps(signed))
        changed["runs"][0]["env"] = {"LD_PRELOAD": "/tmp/evil.so"}
        path.write_text(json.dumps(changed))
        out = attach(str(logdir), "--headless")
        assert not marker.exists() and "was changed after it was launched" in out.stderr, out.stderr

        moved = json.loads(json.dumps(signed))
        moved["trust"]["host"] = "elsewhere"
        path.write_text(json.dumps(moved))
        out = attach(str(logdir), "--headless")
        assert not marker.exists() and "host 'elsewhere'" in out.stderr, out.stderr

        path.write_text(json.dumps(signed))
        out = attach(str(logdir), "--headless")
        assert marker.read_text() == "ran" and out.returncode == 0, out.stdout + out.stderr
    finally:
        kill_groups(pgids(logdir))


def test_run_ids_that_leave_logdir_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker, run_id="../escaped/x")
    out = attach(str(logdir), "--headless")
    assert out.returncode == 2 and "run id '../escaped/x'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "escaped").exists() and not marker.exists()


def test_a_run_folder_symlinked_outside_logdir_is_never_written(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker)
    outside = tmp_path / "outside"
    outside.mkdir()
    (logdir / "job.r0").symlink_to(outside)
    try:
        out = attach(str(logdir), "--headless")
        assert out.returncode == 1 and "resolves outside" in out.stdout, out.stdout + out.stderr
        assert list(outside.iterdir()) == [] and not marker.exists()
    finally:
        kill_groups(pgids(logdir))


def test_a_truncated_registry_is_an_error_not_logs_only(tmp_path: Path) -> None:
    logdir = planted(tmp_path, tmp_path / "PWNED")
    text = (logdir / "perfwatch.json").read_text()
    (logdir / "perfwatch.json").write_text(text[: len(text) // 2])
    out = attach(str(logdir), "--headless", timeout=30)
    assert out.returncode == 2 and "unreadable" in out.stderr and "Traceback" not in out.stderr, out.stderr
