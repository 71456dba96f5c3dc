"""`--headless`: plain progress lines on stdout, a final table, exit 0 only if every run succeeded.

For CI and ssh sessions without a TTY. Same data path as the TUI: LogWatcher -> queue ->
RunBook on this thread; the controller is polled on the same loop so `exit_at_target`
sees the latest views.
"""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Mapping
from typing import TextIO

from perfwatch.core.control import ProcInfo, RunState
from perfwatch.core.run import RunView
from perfwatch.core.runbook import RunBook, discover
from perfwatch.core.scheduler import Scheduler
from perfwatch.core.session import Session
from perfwatch.core.watch import LogWatcher

LAST_LINES = 5


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    return f"{seconds:.1f}s" if seconds < 120 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _eval_text(view: RunView | None) -> str:
    if view is None or view.last_eval is None:
        return ""
    text = f"{view.target.key if view.target else 'eval'} {view.last_eval:.4g}"
    if view.target is not None:
        text += f" ({'reached' if view.target_reached else 'target'} {view.target.describe()})"
    return text


class _Printer:
    def __init__(self, out: TextIO, t0: float) -> None:
        self.out, self.t0 = out, t0
        self.last: dict[str, RunState] = {}

    def line(self, text: str) -> None:
        print(f"[{_fmt_s(time.time() - self.t0):>7}] {text}", file=self.out, flush=True)

    def changes(self, procs: Mapping[str, ProcInfo], book: RunBook) -> None:
        for rid, info in procs.items():
            if self.last.get(rid) is info.state:
                continue
            first = rid not in self.last
            self.last[rid] = info.state
            if first and info.state is RunState.QUEUED:
                continue
            run = book.get(rid)
            parts = [f"{rid:<24} {info.state.value:<9}"]
            if info.state is RunState.RUNNING and info.pid:
                parts.append(f"pid {info.pid}" + (f" attempt {info.attempt}" if info.attempt > 1 else ""))
            if info.reason:
                parts.append(info.reason)
            if info.state.terminal and run is not None:
                parts.append(_eval_text(run.view()))
            self.line("  ".join(p for p in parts if p))
            if info.state in (RunState.FAILED, RunState.KILLED, RunState.TIMEOUT, RunState.UNKNOWN):
                for text in info.last_output[-LAST_LINES:]:
                    print(f"{'':>10}| {text}", file=self.out, flush=True)

    def status(self, procs: Mapping[str, ProcInfo]) -> None:
        counts: dict[str, int] = {}
        for info in procs.values():
            counts[info.state.value] = counts.get(info.state.value, 0) + 1
        self.line("status: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def final_book(session: Session) -> RunBook:
    """Every log read once from disk, so the table never misses the watcher's last batch."""
    book = RunBook(session.book.root, ruleset=session.book.ruleset, targets=session.book.targets)
    for path in discover(session.book.root):
        try:
            book.feed_file(path, path.read_bytes())
        except OSError:
            continue
    return book


def summary(procs: Mapping[str, ProcInfo], book: RunBook, out: TextIO) -> bool:
    """Print the final per-run table; True if every run succeeded."""
    header = f"{'run':<24} {'state':<9} {'exit':>5} {'target':<8} {'time-to-train':>13} {'attempt':>7}  reason"
    print(header, file=out)
    print("-" * len(header), file=out)
    ok = bool(procs)
    for rid, info in procs.items():
        run = book.get(rid)
        view = run.view() if run is not None else None
        reached = "-" if view is None or view.target is None else ("yes" if view.target_reached else "no")
        ttt = view.time_to_train_ms / 1000 if view and view.time_to_train_ms is not None else None
        code = "-" if info.exit_code is None else str(info.exit_code)
        print(f"{rid:<24} {info.state.value:<9} {code:>5} {reached:<8} {_fmt_s(ttt):>13} {info.attempt:>7}  "
              f"{info.reason or ''}", file=out)
        ok = ok and info.state is RunState.SUCCEEDED
    print(f"{'all runs succeeded' if ok else 'NOT all runs succeeded'}", file=out, flush=True)
    return ok


def run_headless(session: Session, out: TextIO, *, tick: float = 0.25, status_every: float = 15.0,
                 stop_on_interrupt: bool = True) -> int:
    """Drive the session until every run is over; returns the process exit status."""
    batches: queue.SimpleQueue = queue.SimpleQueue()
    watcher = LogWatcher(session.watcher_roots, batches.put, poll=session.poll).start()
    ctl = session.controller
    printer = _Printer(out, time.time())
    interrupted: list[int] = []
    old = {s: signal.signal(s, lambda n, _f: interrupted.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    printer.line(f"{session.title}: {session.logdir}" + ("" if ctl is not None else " (logs only)"))
    next_status = time.time() + status_every
    try:
        while True:
            while not batches.empty():
                session.book.apply(batches.get())
            if ctl is None:
                if watcher.ready.wait(timeout=tick):
                    break
                continue
            ctl.poll()
            procs = ctl.procs()
            printer.changes(procs, session.book)
            if interrupted:
                printer.line("interrupted: " + ("stopping every run" if stop_on_interrupt else
                                                "leaving the runs running; `perfwatch attach` reopens them"))
                ctl.close(stop_runs=stop_on_interrupt)
                printer.changes(ctl.procs(), session.book)
                return 130
            if procs and all(p.state.terminal for p in procs.values()):
                break
            if time.time() >= next_status:
                printer.status(procs)
                next_status = time.time() + status_every
            time.sleep(tick)
    finally:
        watcher.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
    if ctl is None:
        # logs nobody controls (an MLPerf results tree): one pass, success = every run_stop says success
        views = final_book(session).views()
        for v in views:
            printer.line(f"{v.run_id:<24} {v.phase:<8} {v.run_status or '-':<8} {_eval_text(v)}")
        ok = bool(views) and all(v.run_status == "success" for v in views)
        print(f"{len(views)} runs; {'all succeeded' if ok else 'NOT all succeeded'}", file=out, flush=True)
        return 0 if ok else 1
    ok = summary(ctl.procs(), final_book(session), out)
    if isinstance(ctl, Scheduler):
        ctl.close(stop_runs=False)
    return 0 if ok else 1

