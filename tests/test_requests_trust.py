"""Control requests and take-over: what the user confirms is what runs; requests carry their sender and an
expiry, are withdrawn when they did not take effect and never replayed; an exposed trust key is refused.

Real `perfwatch attach`/`launch`/`control` processes, real signals; files of another account are made
with os.chown (as root), the way a received or shared LOGDIR arrives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from launch_helpers import FAKE, ROOT, campaign_file, group_members, kill_groups, wait_for
from test_trust import attach, pgids, planted

from perfwatch.core.control.controller import take_requests
from perfwatch.core.layout import request_name

OTHER_UID = 4242


def ended(logdir: Path) -> None:
    """Mark the planted LOGDIR's only run as finished long ago (its plan then starts nothing)."""
    path = logdir / "perfwatch.json"
    data = json.loads(path.read_text())
    rec = data["runs"][0]
    rec.update(state="succeeded", attempt=1, exit_code=0, started_at=time.time() - 99, ended_at=time.time() - 9)
    path.write_text(json.dumps(data))


def plant_request(logdir: Path, action: str, run_id: str, *, uid: int, file_uid: int | None = None,
                  ttl: float = 3600) -> Path:
    folder = logdir / "requests"
    folder.mkdir(exist_ok=True)
    now = time.time()
    path = folder / request_name(now, f"x{uid}{int(ttl)}")
    path.write_text(json.dumps({"action": action, "run_id": run_id, "sent_at": now, "expires_at": now + ttl,
                                "uid": uid, "pid": 1}))
    if file_uid is not None:
        os.chown(path, file_uid, file_uid)
    return path


def chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, uid)
    os.chown(root, uid, uid)


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="making files of another account needs root (chown)")


@needs_root
def test_a_received_logdir_with_a_planted_restart_never_runs_it(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker, sign=False)
    ended(logdir)
    plant_request(logdir, "restart", "job.r0", uid=OTHER_UID)
    chown_tree(logdir, OTHER_UID)  # the whole LOGDIR, as received from another account
    try:
        shown = attach(str(logdir), "--headless", "--take-over")
        assert shown.returncode == 2 and not marker.exists()
        assert "nothing: every run has ended" in shown.stderr, shown.stderr
        assert f"drop, never execute, the waiting request: restart job.r0 (file of user id {OTHER_UID}" \
            in shown.stderr, shown.stderr
        digest = shown.stderr.split("plan digest: ")[1].split()[0]

        ran = attach(str(logdir), "--headless", "--take-over", "--confirm", digest)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "dropped, not executed: the waiting request restart job.r0" in ran.stderr
        assert not marker.exists() and list((logdir / "requests").iterdir()) == []

        # now this user's: a request another account drops later (forging "uid": us) is still never run
        plant_request(logdir, "restart", "job.r0", uid=os.getuid(), file_uid=OTHER_UID)
        again = attach(str(logdir), "--headless")
        assert again.returncode == 0 and "not taking" not in again.stderr, again.stderr
        assert not marker.exists() and list((logdir / "requests").iterdir()) == []
        # and this user's own pending request is executed (the path above is really taken)
        plant_request(logdir, "restart", "job.r0", uid=os.getuid())
        mine = attach(str(logdir), "--headless")
        assert wait_for(marker.exists, timeout=30), mine.stdout + mine.stderr
    finally:
        kill_groups(pgids(logdir))


def test_expired_foreign_and_malformed_requests_are_dropped(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    plant_request(logdir, "kill", "a", uid=os.getuid())
    plant_request(logdir, "kill", "b", uid=os.getuid(), ttl=-1)  # expired a second ago
    plant_request(logdir, "kill", "c", uid=OTHER_UID)  # says another user sent it
    no_expiry = logdir / "requests" / request_name(time.time(), "noexp")
    no_expiry.write_text(json.dumps({"action": "kill", "run_id": "d", "sent_at": time.time(), "uid": os.getuid()}))
    (logdir / "requests" / request_name(time.time(), "junk")).write_text("{not json")
    if os.getuid() == 0:
        plant_request(logdir, "kill", "e", uid=0, file_uid=OTHER_UID)  # file of another account, forged uid
    assert [r["run_id"] for r in take_requests(logdir)] == ["a"]
    assert list((logdir / "requests").iterdir()) == []  # none is left to be replayed later


def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "perfwatch" / "trust.key"


def test_a_trust_key_others_can_read_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = key_env(tmp_path, monkeypatch)
    marker = tmp_path / "PWNED"
    logdir = planted(tmp_path, marker)  # signed with the key just made (mode 0600)
    assert key.stat().st_mode & 0o777 == 0o600
    try:
        key.chmod(0o644)
        out = attach(str(logdir), "--headless")
        assert not marker.exists() and "Watching only" in out.stderr, out.stderr
        assert "can be read or written by other users (mode 0644)" in out.stderr and f"chmod 600 {key}" in out.stderr
        (tmp_path / "c").mkdir()
        camp = campaign_file(tmp_path / "c", f"jobs:\n  - {{name: j, cmd: [python, {FAKE}, --epochs, 1]}}\n")
        launched = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(camp), "--logdir",
                                   str(tmp_path / "l2"), "--headless"], cwd=ROOT, capture_output=True, text=True,
                                  timeout=60)
        assert launched.returncode == 2 and f"chmod 600 {key}" in launched.stderr and "Traceback" not in launched.stderr
        key.chmod(0o600)  # the fix the message gives
        out = attach(str(logdir), "--headless")
        assert marker.read_text() == "ran" and out.returncode == 0, out.stdout + out.stderr
    finally:
        kill_groups(pgids(logdir))


def perfwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfwatch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def runs(logdir: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads((logdir / "perfwatch.json").read_text())["runs"]}


def detached(tmp_path: Path, body: str) -> Path:
    logdir = tmp_path / "logdir"
    done = perfwatch("launch", str(campaign_file(tmp_path, body)), "--detach", "--logdir", str(logdir))
    assert done.returncode == 0, done.stderr
    return logdir


def cleanup(logdir: Path) -> None:
    try:
        sched = json.loads((logdir / "perfwatch.json").read_text()).get("scheduler") or {}
        if sched.get("pid"):
            os.kill(sched["pid"], signal.SIGCONT)
            os.kill(sched["pid"], signal.SIGKILL)
        kill_groups({r["pgid"] for r in runs(logdir).values() if r.get("pgid")})
    except (OSError, ValueError):
        pass


def test_a_kill_that_did_not_take_effect_is_withdrawn_never_replayed(tmp_path: Path) -> None:
    logdir = detached(tmp_path, f"""
        scheduler: {{max_parallel: 2}}
        jobs:
          - {{name: long, repeat: 2, cmd: [python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]}}
        """)
    try:
        assert wait_for(lambda: all(r["state"] == "running" for r in runs(logdir).values()))
        owner = json.loads((logdir / "perfwatch.json").read_text())["scheduler"]["pid"]
        os.kill(owner, signal.SIGSTOP)  # the owner is frozen: the kill cannot be executed now
        late = perfwatch("control", str(logdir), "long.r0", "kill", "--timeout", "1")
        assert late.returncode == 1 and "the request is withdrawn: it will never be executed" in late.stderr, \
            late.stderr
        assert list((logdir / "requests").iterdir()) == []
        os.kill(owner, signal.SIGCONT)
        paused = perfwatch("control", str(logdir), "long.r1", "pause")  # an unrelated action, handled next
        assert paused.returncode == 0, paused.stderr
        time.sleep(1.5)  # several owner polls later
        assert runs(logdir)["long.r0"]["state"] == "running"  # the withdrawn kill never ran
        assert perfwatch("control", str(logdir), "long.r1", "resume").returncode == 0
    finally:
        cleanup(logdir)


def test_two_concurrent_stops_without_an_owner_both_get_a_definite_answer(tmp_path: Path) -> None:
    logdir = detached(tmp_path, f"""
        defaults: {{grace: 1s}}
        jobs:
          - {{name: stubborn, cmd: [python, {FAKE}, --mode, ignore_term, --epochs, 5, --step, 0.05]}}
        """)
    try:
        assert wait_for(lambda: runs(logdir)["stubborn.r0"]["state"] == "running")
        owner = json.loads((logdir / "perfwatch.json").read_text())["scheduler"]["pid"]
        os.kill(owner, signal.SIGKILL)  # nobody owns the campaign; the run keeps going
        assert wait_for(lambda: subprocess.run(["kill", "-0", str(owner)], capture_output=True).returncode != 0)
        pgid = runs(logdir)["stubborn.r0"]["pgid"]
        results: list[subprocess.CompletedProcess[str]] = []
        threads = [threading.Thread(target=lambda: results.append(
            perfwatch("control", str(logdir), "stubborn.r0", "stop", "--timeout", "30"))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
        assert all("stubborn.r0: stopped" in r.stdout for r in results), [r.stdout for r in results]
        assert runs(logdir)["stubborn.r0"]["state"] == "stopped"
        assert group_members({pgid}) == []  # SIGKILL after the grace: nothing of the run is left
    finally:
        cleanup(logdir)


def test_control_with_requests_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    logdir = detached(tmp_path, f"""
        jobs:
          - {{name: long, cmd: [python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]}}
        """)
    try:
        assert wait_for(lambda: runs(logdir)["long.r0"]["state"] == "running")
        (logdir / "requests").write_text("not a folder")
        out = perfwatch("control", str(logdir), "long.r0", "pause", "--timeout", "5")
        assert out.returncode == 2 and "cannot send pause" in out.stderr and "Traceback" not in out.stderr, out.stderr
    finally:
        cleanup(logdir)


def test_control_of_a_read_only_logdir_is_a_clear_error(tmp_path: Path) -> None:
    """LOGDIR on a read-only mount (a bind mount in a private mount namespace: root could write anywhere
    else): `control` cannot write its request and says so, exit 2, no traceback."""
    import shutil

    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--mount", "sh", "-c", f"mount --bind {tmp_path} {tmp_path}"], capture_output=True).returncode:
        pytest.skip("needs unshare --mount and bind mounts (root)")
    logdir = detached(tmp_path, f"""
        jobs:
          - {{name: long, cmd: [python, {FAKE}, --mode, hang, --epochs, 5, --step, 0.05]}}
        """)
    try:
        assert wait_for(lambda: runs(logdir)["long.r0"]["state"] == "running")
        script = (f"mount --bind {logdir} {logdir} && mount -o remount,bind,ro {logdir} && "
                  f"exec {sys.executable} -m perfwatch control {logdir} long.r0 pause --timeout 5")
        out = subprocess.run(["unshare", "--mount", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2 and "cannot send pause" in out.stderr and "Read-only" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert runs(logdir)["long.r0"]["state"] == "running"
    finally:
        cleanup(logdir)
