"""Official MLPerf code, run with a time budget in a worker process perfwatch can kill.

mlperf_logging's checkers are the reference, but not hardened: the RCP checker and the compliance
checker's parser apply `re.sub(".*:::MLLOG", ...)` to every line holding the token, quadratic in the
line's length (a 20 MB line runs for hours), and the package's code runs the rule files' Python. So:

- perfwatch hands them only files it parsed as valid mllog (`unreadable`: no line that carries
  `:::MLLOG` without decoding); a file that is not is named instead of being handed over;
- each call runs in one worker process (`python -m perfwatch.core.mlperf.bounded_worker`, started on first
  use and reused, so scipy and the checkers are imported once per command) under a deadline: past
  it the worker's process group is killed, the call raises `OfficialTimeout`, and the next call
  starts a fresh worker;
- the worker runs in an empty temporary folder, so nothing the official code writes by a relative
  path lands in the user's tree (perfwatch also calls it with `set_scaling=False`).

Requests and answers are one JSON object per line on the worker's stdin and stdout.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

RCP_BUDGET_S = 300.0  # one folder's RCP check: about a minute for a 200k-line log on a slow core
CHECK_BUDGET_S = 300.0  # one file's compliance check


class OfficialTimeout(RuntimeError):
    """The official code did not answer within its budget (the worker was killed)."""


class OfficialFailure(RuntimeError):
    """The worker died or answered something that is not an answer."""


def unreadable(path: str) -> str | None:
    """Why `path` is not handed to official code (None: perfwatch parsed it as valid mllog)."""
    from perfwatch.core.ingest.mllog import parse_path

    try:
        _, parser = parse_path(path)
    except OSError as exc:
        return f"{os.path.basename(path)}: cannot be read ({exc.strerror or exc})"
    return refusal(path, parser.bad_count, parser.bad[0] if parser.bad else None)


def refusal(path: str, bad_count: int, first: Any = None) -> str | None:
    """The reason a file with `bad_count` undecodable record lines (`first`: a `BadLine`) is not handed over."""
    if not bad_count:
        return None
    where = f" (line {first.lineno}: {first.reason})" if first is not None else ""
    return (f"{os.path.basename(path)}: {bad_count} line(s) carry :::MLLOG but do not parse{where}; "
            "not handed to mlperf_logging (its per-line regex is unbounded on such lines)")


class Worker:
    """One worker process running official code; `call` with a deadline."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._home: tempfile.TemporaryDirectory[str] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._home is None:
            self._home = tempfile.TemporaryDirectory(prefix="perfwatch-official-")
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "perfwatch.core.mlperf.bounded_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self._home.name, env=env, start_new_session=True)
        return self._proc

    def call(self, name: str, args: dict[str, Any], budget_s: float) -> Any:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"call": name, "args": args}).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            self.close()
            raise OfficialFailure(f"the worker for mlperf_logging is gone ({exc})") from exc
        try:
            line = self._read_line(proc, budget_s)
        except OfficialFailure:
            self.close()
            raise
        if line is None:
            self.close()
            raise OfficialTimeout(f"mlperf_logging did not finish within {budget_s:g} s")
        try:
            answer = json.loads(line)
        except ValueError as exc:
            self.close()
            raise OfficialFailure("the worker for mlperf_logging answered no JSON") from exc
        if not isinstance(answer, dict) or "result" not in answer:
            raise OfficialFailure(str(answer.get("error") if isinstance(answer, dict) else answer))
        return answer["result"]

    @staticmethod
    def _read_line(proc: subprocess.Popen[bytes], budget_s: float) -> bytes | None:
        """One answer line, or None when the deadline passes first (OfficialFailure: the worker died)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + budget_s
        parts: list[bytes] = []
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise OfficialFailure(f"the worker for mlperf_logging exited ({proc.poll()})")
                parts.append(chunk)
                if chunk.endswith(b"\n"):
                    return b"".join(parts)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):  # its own session: the official code and anything it started
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._home is not None:
            self._home.cleanup()
            self._home = None


_SHARED: Worker | None = None


def shared() -> Worker:
    """The command's worker (started on first call, killed at exit)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Worker()
        atexit.register(_SHARED.close)
    return _SHARED


def rcp_verdict(paths: Sequence[str], benchmark: str, ruleset: str, as_benchmark: bool,
                budget_s: float = RCP_BUDGET_S) -> dict[str, Any]:
    """`rcp.run_checker_here` in the worker: the verdict as `RcpVerdict.to_json()`."""
    return shared().call("rcp", {"paths": list(paths), "benchmark": benchmark, "ruleset": ruleset,
                                 "as_benchmark": as_benchmark}, budget_s)


def compliance(path: str, ruleset: str | None, root: str | None, budget_s: float = CHECK_BUDGET_S) -> dict[str, Any]:
    """`checker.check_here` in the worker: the result as `CheckResult.to_json()`."""
    return shared().call("check", {"path": path, "ruleset": ruleset, "root": root}, budget_s)
