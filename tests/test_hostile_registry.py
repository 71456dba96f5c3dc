"""A registry's process facts are not signed: pids in perfwatch.json (init, a stranger, nonsense) are
never adopted or signalled unless they are this run's supervisor; hostile request files cannot hang
the owner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import psutil
from launch_helpers import FAKE, ROOT, campaign_file, wait_for

from perfwatch.core.control import registry, trust
from perfwatch.core.control.campaign import load_campaign


def signed_logdir(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    path = campaign_file(tmp_path, f"""
        jobs:
          - {{name: j, cmd: [python, {FAKE}, --epochs, 1]}}
        """)
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    plain = json.loads(msgspec.json.encode(registry.new_registry(load_campaign(path, base=ROOT), logdir)))
    edit(plain)
    trust.sign(plain)  # the plan is ours; only the process facts were edited by someone else
    (logdir / "perfwatch.json").write_text(json.dumps(plain))
    return logdir


def attach(logdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_pids_that_are_not_the_runs_supervisor_are_never_adopted(tmp_path: Path) -> None:
    init = psutil.Process(1)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = psutil.Process(stranger.pid)
        for i, (pid, created) in enumerate([(1, init.create_time()), (stranger.pid, me.create_time()), (-1, 1.0)]):
            def edit(plain: dict, pid: int = pid, created: float = created) -> None:
                plain["runs"][0].update(state="running", pid=pid, pgid=pid, create_time=created,
                                        descendants=[[pid, created]])
            (tmp_path / str(i)).mkdir()
            logdir = signed_logdir(tmp_path / str(i), edit)
            out = attach(logdir)  # before: adopted pid 1 as the run and waited for it forever
            assert "Traceback" not in out.stderr, out.stderr
            row = next(ln.split() for ln in out.stdout.splitlines() if ln.startswith("j.r0 "))
            assert row[1] == "unknown", out.stdout
            assert stranger.poll() is None  # never signalled
    finally:
        stranger.kill()


def test_a_fifo_or_dev_zero_request_does_not_hang_the_owner(tmp_path: Path) -> None:
    logdir = signed_logdir(tmp_path, lambda plain: None)
    requests = logdir / "requests"
    requests.mkdir()
    os.mkfifo(requests / "0001-x.json")
    (requests / "0002-y.json").symlink_to("/dev/zero")
    out = attach(logdir)
    assert out.returncode == 0 and "all runs succeeded" in out.stdout, out.stdout + out.stderr
    assert wait_for(lambda: not any(requests.iterdir()))


def test_fifos_named_like_perfwatchs_own_files_never_hang(tmp_path: Path) -> None:
    logdir = tmp_path / "a"
    logdir.mkdir()
    os.mkfifo(logdir / "perfwatch.json")
    out = attach(logdir)  # was: blocked forever reading it
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr
    (tmp_path / "b").mkdir()
    logdir = signed_logdir(tmp_path / "b", lambda plain: None)
    (logdir / "j.r0").mkdir()
    os.mkfifo(logdir / "j.r0" / "exit.json")
    os.mkfifo(logdir / "j.r0" / "output.log")
    out = attach(logdir)  # taking it over starts j.r0: its output.log cannot be opened, the run fails
    assert "Traceback" not in out.stderr and out.returncode == 1, out.stdout + out.stderr
    assert "not a regular file" in out.stdout or "No such device" in out.stdout, out.stdout


def test_a_requests_symlink_never_makes_the_owner_delete_files_elsewhere(tmp_path: Path) -> None:
    elsewhere = tmp_path / "config"
    elsewhere.mkdir()
    (elsewhere / "settings.json").write_text('{"action": "stop_all"}')
    logdir = signed_logdir(tmp_path, lambda plain: None)
    (logdir / "requests").symlink_to(elsewhere)
    out = attach(logdir)
    assert out.returncode == 0 and "all runs succeeded" in out.stdout, out.stdout + out.stderr
    assert (elsewhere / "settings.json").exists()  # neither read as a request nor deleted


BROKEN = {
    "runs that are not mappings": lambda p: p.update(runs=[1, 2]),
    "attempt of the wrong type": lambda p: p["runs"][0].update(attempt="x"),
    "no cwd": lambda p: p["runs"][0].pop("cwd"),
    "empty argv": lambda p: p["runs"][0].update(argv=[]),
    "max_parallel below 1": lambda p: p.update(max_parallel=-5),  # was: waited forever, nothing started
}


def test_broken_registries_are_refused_with_the_reason(tmp_path: Path) -> None:
    for i, (what, edit) in enumerate(BROKEN.items()):
        (tmp_path / str(i)).mkdir()
        out = attach(signed_logdir(tmp_path / str(i), edit))
        assert out.returncode == 2 and "perfwatch.json: " in out.stderr, (what, out.stderr)
        assert "Traceback" not in out.stderr, (what, out.stderr)
