"""`--headless`: plain progress lines on stdout, a final table, exit 0 only if every run succeeded.

For CI and ssh sessions without a TTY. Same data path as the TUI: the `LiveEngine`
(core/engine.py) follows the logs, polls the controller and publishes snapshots on its
thread; this module only prints what changed (and the engine's errors).

Logs nobody controls (an MLPerf results tree, a folder a cluster job is writing) are
followed live: a line when a run appears, starts, reports an eval result or logs
`run_stop`, until every run found has logged `run_stop` (or Ctrl-C / SIGTERM); with
`once` they are read once and reported. A perfwatch LOGDIR watched with `--no-control`
is followed through its perfwatch.json, read-only, until every run has ended.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from perfwatch.core.control import registry
from perfwatch.core.control.controller import ClientController, Controller, ProcInfo, RunState
from perfwatch.core.control.scheduler import Scheduler
from perfwatch.core.engine import LiveEngine, Session, Update, energy_path, reread, run_figures
from perfwatch.core.ingest.sanitize import one_line
from perfwatch.core.measure.energy import RunEnergy, run_energy
from perfwatch.core.measure.eta import Eta
from perfwatch.core.measure.mfu import overrides_from_registry
from perfwatch.core.model.book import RunBook
from perfwatch.core.model.run import RunView
from perfwatch.core.model.status import Counts, RunStatus, State, count, judge
from perfwatch.core.telemetry.jsonl import read_telemetry
from perfwatch.core.telemetry.ranks import RankReport

if TYPE_CHECKING:
    from perfwatch.core.model.view import EvalPoint

LAST_LINES = 5
# a run's process ended: how long its last log lines may take to be read before its line is printed anyway
# (the line says how it ended against its target, and is printed once: never before the log is read)
SETTLE_S = 2.0


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


def _energy_text(energy: RunEnergy | None) -> str:
    """GPU energy-to-train, how it was measured, samples per joule: the numbers `report` shows."""
    ett = energy.to_train if energy is not None else None
    if ett is None:
        return ""
    text = f"{'energy-to-train' if ett.finished else 'energy so far'} {ett.energy.kj:.3f} kJ ({ett.energy.how})"
    spj = ett.samples_per_joule
    return text + (f"  {spj:.4g} samples/J" if spj is not None else "")


def _disk_energy(view: RunView) -> RunEnergy:
    """A run's energy from its whole telemetry.jsonl, as `report` reads it (final lines and tables)."""
    return run_energy(view, read_telemetry(energy_path(view)))


class _Printer:
    def __init__(self, out: TextIO, t0: float) -> None:
        self.out, self.t0 = out, t0
        self.last: dict[str, tuple[str, str | None]] = {}
        self.ended_at: dict[str, float] = {}  # runs whose process ended, their line not printed yet
        self.energy_shown: set[str] = set()
        self.stragglers: dict[str, tuple[int, str] | None] = {}  # run -> (rank, cause) last printed
        self.stopped: set[str] = set()  # runs whose run_stop was seen (their group's RCP projection printed)
        self.projected: dict[str, str] = {}  # group -> the RCP projection printed last

    def rcp(self, views: Mapping[str, RunView]) -> None:
        """A run logged run_stop: where its group's RCP verdict is heading, when that changed (groups
        that no RCP rule covers print nothing; a job's `mlperf:` makes its runs covered)."""
        for rid, v in views.items():
            if v.phase != "stopped" or rid in self.stopped:
                continue
            from perfwatch.core.results.summary import group_of

            self.stopped.add(rid)
            text = _rcp_text(views, rid)
            group = group_of(v)
            if text and text != self.projected.get(group):
                self.projected[group] = text
                self.line(f"{group:<24} {text}")

    def line(self, text: str) -> None:
        print(f"[{_fmt_s(time.time() - self.t0):>7}] {one_line(text)}", file=self.out, flush=True)

    def ranks(self, ranks: Mapping[str, RankReport]) -> None:
        """A line when a distributed run's straggler appears, changes rank or cause, or goes away."""
        for rid, rep in ranks.items():
            now = (rep.straggler.rank, rep.straggler.cause) if rep.straggler is not None else None
            if self.stragglers.get(rid) == now or (now is None and rid not in self.stragglers):
                continue
            self.stragglers[rid] = now
            text = f"straggler {rep.straggler.text}" if rep.straggler is not None else "no straggler any more"
            self.line(f"{rid:<24} {'ranks':<9} {text}")

    def energy(self, energy: Mapping[str, RunEnergy]) -> None:
        """A line per run once its energy-to-train is final (run_stop logged, the samples reach it)."""
        for rid, e in energy.items():
            if rid not in self.energy_shown and e.to_train is not None and e.to_train.complete:
                self.energy_shown.add(rid)
                self.line(f"{rid:<24} {'energy':<8}  {_energy_text(e)}")

    def changes(self, procs: Mapping[str, ProcInfo], views: Mapping[str, RunView],
                statuses: Mapping[str, RunStatus]) -> None:
        """A line per run whose state (core/model/status.py: the words every front end shows) changed."""
        for rid, info in procs.items():
            status = statuses.get(rid) or judge(views.get(rid), info)
            # a new state, or a new reason of a live run (Slurm: "pending in Slurm: Resources", "Slurm status stale")
            seen = (status.word, status.reason if info.state.alive else None)
            if self.last.get(rid) == seen:
                continue
            view = views.get(rid)
            if status.state.ended and (view is None or view.phase != "stopped"):
                since = self.ended_at.setdefault(rid, time.monotonic())
                if time.monotonic() - since < SETTLE_S:
                    continue  # its log's last lines may still be on their way: print it a moment later
            self.ended_at.pop(rid, None)
            first = rid not in self.last
            self.last[rid] = seen
            if first and info.state is RunState.QUEUED:
                continue
            parts = [f"{rid:<24} {status.word:<9}"]
            if info.state is RunState.RUNNING and info.pid:
                parts.append(f"pid {info.pid}" + (f" attempt {info.attempt}" if info.attempt > 1 else "")
                             + (f" gpu {','.join(map(str, info.devices))}" if info.devices else ""))
            if status.reason:
                parts.append(status.reason)
            if status.state.ended:
                parts.append(f"target {status.verdict.value}")
            if info.state.terminal and view is not None:
                parts.append(_eval_text(view))
            self.line("  ".join(p for p in parts if p))
            if info.state in (RunState.FAILED, RunState.KILLED, RunState.TIMEOUT, RunState.CANCELLED,
                              RunState.UNKNOWN):
                for text in info.last_output[-LAST_LINES:]:
                    print(f"{'':>10}| {text}", file=self.out, flush=True)

    def status(self, counts: Counts) -> None:
        self.line("status: " + counts_text(counts))


def counts_text(counts: Counts) -> str:
    """"3 running, 1 done; target: 1 reached, 3 to go; 0 failed": the engine's counts, as the TUI's header."""
    states = ", ".join(f"{n} {s}" for s, n in counts.states.items()) or "no runs"
    return f"{states}; target: {counts.target_text() or 'none'}; {counts.failed} failed"


def final_book(session: Session) -> RunBook:
    """Every log read once from disk, so the table never misses the watcher's last batch."""
    return reread(session)


def summary(procs: Mapping[str, ProcInfo], book: RunBook, out: TextIO) -> bool:
    """Print the final per-run table; True if every run ended and none failed (core/model/status.py)."""
    header = (f"{'run':<24} {'state':<9} {'exit':>5} {'target':<11} {'time-to-train':>13} {'energy kJ':>10} "
              f"{'attempt':>7}  reason")
    print(header, file=out)
    print("-" * len(header), file=out)
    statuses = []
    for rid, info in procs.items():
        run = book.get(rid)
        view = run.view() if run is not None else None
        status = judge(view, info, book.targets.get(rid))
        statuses.append(status)
        ttt = view.time_to_train_ms / 1000 if view and view.time_to_train_ms is not None else None
        code = "-" if info.exit_code is None else str(info.exit_code)
        ett = _disk_energy(view).to_train if view is not None else None
        kj = f"{ett.energy.kj:.3f}" if ett is not None else "-"  # GPU energy-to-train; "-": no GPU energy
        print(f"{one_line(rid):<24} {status.word:<9} {code:>5} {status.verdict.value:<11} {_fmt_s(ttt):>13} {kj:>10} "
              f"{info.attempt:>7}  {status.reason}", file=out)
    counts = count(statuses)
    ok = bool(procs) and counts.ended == counts.runs and not counts.failed
    print(counts_text(counts), file=out)
    print(f"{'all runs succeeded' if ok else 'NOT all runs succeeded'}", file=out, flush=True)
    return ok


class _LogPrinter:
    """Progress lines for runs known only from their logs: appeared, started, eval, run_stop."""

    def __init__(self, printer: _Printer) -> None:
        self.p = printer
        self.seen: dict[str, tuple[str, int]] = {}  # run id -> (phase, evals printed)

    def snapshot(self, views: Mapping[str, RunView], etas: Mapping[str, Eta] | None = None) -> None:
        self.p.line(f"{len(views)} runs so far, waiting for run_stop" if views else "no runs yet, waiting for logs")
        for v in views.values():
            self.seen[v.run_id] = (v.phase, len(v.evals))
            self.p.line("  ".join(x for x in (f"{v.run_id:<24} {v.phase:<8}", _eval_text(v), _elapsed(v),
                                              _eta((etas or {}).get(v.run_id), v)) if x))

    def changes(self, views: Mapping[str, RunView], changed: Iterable[str],
                etas: Mapping[str, Eta] | None = None) -> None:
        for rid in sorted(changed):
            v = views.get(rid)
            if v is None:
                continue
            phase, evals = self.seen.get(rid, ("", 0))
            self.seen[rid] = (v.phase, len(v.evals))
            if not phase:
                self.p.line(f"{rid:<24} {'found':<8}  {v.phase}")
            if len(v.evals) > evals and v.phase != "stopped":
                text = _eval_text(v) if v.target is not None else f"{v.evals[-1].value:.4g}"
                self.p.line("  ".join(x for x in (f"{rid:<24} {'eval':<8}", text, _epoch(v.evals[-1]),
                                                  _elapsed(v), _eta((etas or {}).get(rid), v)) if x))
            if v.phase == "stopped" and phase != "stopped":
                status = judge(v)
                ran = f"time-to-train {_fmt_s(_ttt(v))}" if status.state is State.DONE else f"ran {_fmt_s(_ttt(v))}"
                self.p.line("  ".join(x for x in (f"{rid:<24} {'stopped':<8}", status.word, _eval_text(v), ran) if x))
                self._rcp(views, rid)
            elif phase in ("waiting", "init") and v.phase in ("running", "eval"):
                self.p.line(f"{rid:<24} {'running':<8}  run_start logged")

    def _rcp(self, views: Mapping[str, RunView], rid: str) -> None:
        """Where the folder's RCP verdict is heading (core/results/live_rcp.py), after each run_stop."""
        text = _rcp_text(views, rid)
        if text:
            self.p.line(f"{'':<24} {text}")

    def status(self, counts: Counts) -> None:
        self.p.line(f"status: {counts_text(counts)}" if counts.runs else "status: no runs yet")


def _rcp_text(views: Mapping[str, RunView], rid: str) -> str | None:
    """The RCP projection of `rid`'s group from its stopped runs (core/results/live_rcp.py); None: no RCP rule."""
    from perfwatch.core.results.live_rcp import projection_for

    try:
        proj = projection_for(views.values(), rid)
    except Exception as exc:  # the RCP checker raises on logs it cannot read; never stop following
        return f"RCP: cannot project ({type(exc).__name__}: {exc})"
    return proj.text if proj is not None else None


def _ttt(v: RunView) -> float | None:
    return v.time_to_train_ms / 1000 if v.time_to_train_ms is not None else None


def _elapsed(v: RunView) -> str:
    return f"elapsed {_fmt_s(v.elapsed_ms / 1000)}" if v.elapsed_ms is not None and v.phase != "stopped" else ""


def _numbers(v: RunView, status: RunStatus, overrides: Mapping[str, Any]) -> str:
    """Time-to-train, throughput now and on average, MFU: the numbers the TUI's table and `report` show
    (core/engine.py `run_figures`)."""
    parts = []
    if v.time_to_train_ms is not None:
        what = "time-to-train" if status.state is State.DONE else "ran"
        parts.append(f"{what} {v.time_to_train_ms / 60_000:.4f} min")
    fig = run_figures(v, overrides=overrides.get(v.run_id))
    per_s = f"{fig.unit}/s"  # samples/s, or tokens/s where the benchmark counts tokens
    if fig.tp_now is not None:
        parts.append(f"now {fig.tp_now:.2f} {per_s}")
    if fig.mfu is not None and fig.mfu.value is not None:
        parts.append(f"MFU {fig.mfu.value * 100:.2f}%")
    if fig.tp_avg is not None:
        parts.append(f"avg {fig.tp_avg:.2f} {per_s}")
    return "  ".join(parts)


def _eta(eta: Eta | None, v: RunView) -> str:
    """The same ETA to target the TUI shows (core/measure/eta.py)."""
    if eta is None or eta.status not in ("converging", "not_converging"):
        return ""
    return f"ETA {eta.text(v.elapsed_ms, _fmt_ms)}" if eta.status == "converging" else "not converging"


def _fmt_ms(ms: float | None) -> str:
    return _fmt_s(ms / 1000 if ms is not None else None)


def _epoch(point: EvalPoint) -> str:
    return f"epoch {point.epoch:g}" if point.epoch is not None else ""


def _all_stopped(views: Mapping[str, RunView]) -> bool:
    return bool(views) and all(v.phase == "stopped" for v in views.values())


def _report_logs(session: Session, printer: _Printer, out: TextIO) -> bool:
    """One pass over every log on disk (and, in a campaign's LOGDIR, every run of its perfwatch.json, as
    `report` reads it): a line per run; True if every run ended and none failed."""
    from perfwatch.core.results.summary import recorded_runs

    views = final_book(session).views()
    recorded = recorded_runs(Path(session.logdir), attempts=False)
    overrides = overrides_from_registry(session.logdir)
    statuses = []
    for v in views:
        st = judge(v, recorded.get(v.run_id), now_ms=time.time() * 1000.0)
        statuses.append(st)
        printer.line("  ".join(x for x in (f"{v.run_id:<24} {st.word:<9} {st.verdict.value:<11}", st.reason,
                                           _eval_text(v), _numbers(v, st, overrides),
                                           _energy_text(_disk_energy(v))) if x))
    seen = {v.run_id for v in views}
    for rid, rec in recorded.items():
        if rid not in seen:  # never logged a record: queued, cancelled, crashed at start-up
            st = judge(None, rec, rec.target)
            statuses.append(st)
            printer.line("  ".join(x for x in (f"{rid:<24} {st.word:<9} {st.verdict.value:<11}", st.reason) if x))
    counts = count(statuses)
    ok = counts.runs > 0 and counts.ended == counts.runs and not counts.failed
    print(counts_text(counts), file=out)
    print(f"{counts.runs} runs; {'all succeeded' if ok else 'NOT all succeeded'}", file=out, flush=True)
    return ok


class _Driver:
    """Runs the engine on its thread; this (main) thread waits for its updates and prints them."""

    def __init__(self, engine: LiveEngine, out: TextIO, tick: float) -> None:
        self.engine, self.out, self.tick = engine, out, tick
        self._woke = threading.Event()
        self.interrupted: list[int] = []
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Driver:
        self._old = {s: signal.signal(s, lambda n, _f: self._interrupt(n)) for s in (signal.SIGINT, signal.SIGTERM)}
        self.engine.start(self._woke.set)
        return self

    def _interrupt(self, signum: int) -> None:
        self.interrupted.append(signum)
        self._woke.set()

    def __exit__(self, *exc: object) -> None:
        self.engine.stop()
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def next(self) -> Update | None:
        """The next update (None after `tick` seconds without one); errors are printed here."""
        self._woke.wait(self.tick)
        self._woke.clear()
        update = self.engine.take()
        if update is not None:
            for err in update.errors:
                print(f"perfwatch: {err.message}", file=self.out, flush=True)
        return update


def follow_logs(session: Session, out: TextIO, *, tick: float = 0.25, status_every: float = 15.0,
                once: bool = False) -> int:
    """Logs nobody controls: follow them until every run has logged run_stop (see module docstring)."""
    printer = _Printer(out, time.time())
    mode = "one pass" if once else "following until every run has logged run_stop; Ctrl-C to stop"
    printer.line(f"{session.title}: {session.logdir} (logs only, {mode})")
    if once:  # one streamed pass, as `report` reads: no watcher queue holding a whole log's batches
        return 0 if _report_logs(session, printer, out) else 1
    engine = LiveEngine(session, controller=None, watch_min_interval=tick)  # coalesced reads, as the TUI
    logs = _LogPrinter(printer)
    with _Driver(engine, out, tick) as drive:
        while not engine.ready.is_set() and not drive.interrupted:
            drive.next()  # the backlog: every existing file from its start
        update = drive.next()
        views: Mapping[str, RunView] = update.snapshot.views if update else _views(engine)
        if not once and not drive.interrupted and not _all_stopped(views):
            logs.snapshot(views, engine.snapshot.etas if engine.snapshot is not None else None)
            if engine.snapshot is not None:  # the backlog's updates were taken above: the latest snapshot
                printer.energy(engine.snapshot.energy)
            next_status = time.time() + status_every
            while not _all_stopped(views) and not drive.interrupted:
                update = drive.next()
                if update is not None:
                    views = update.snapshot.views
                    logs.changes(views, update.changed, update.snapshot.etas)
                    printer.energy(update.snapshot.energy)
                    printer.ranks(update.snapshot.ranks)
                if time.time() >= next_status and engine.snapshot is not None:
                    logs.status(engine.snapshot.counts)
                    next_status = time.time() + status_every
    if drive.interrupted:
        printer.line(f"interrupted ({signal.Signals(drive.interrupted[0]).name}): stopped following; the runs so far:")
    ok = _report_logs(session, printer, out)
    if drive.interrupted:
        return 130
    return 0 if ok else 1


def _views(engine: LiveEngine) -> Mapping[str, RunView]:
    snap = engine.snapshot
    return snap.views if snap is not None else {}


def run_headless(session: Session, out: TextIO, *, tick: float = 0.25, status_every: float = 15.0,
                 stop_on_interrupt: bool = True, once: bool = False) -> int:
    """Drive the session until every run is over; returns the process exit status."""
    ctl: Controller | None = session.controller
    read_only = False
    if ctl is None:
        if once or registry.read(session.logdir) is None:
            return follow_logs(session, out, tick=tick, status_every=status_every, once=once)
        ctl, read_only = ClientController(session.logdir), True  # --no-control: follow perfwatch.json
    engine = LiveEngine(session, controller=ctl, control_interval=tick, watch_min_interval=tick)
    printer = _Printer(out, time.time())
    printer.line(f"{session.title}: {session.logdir}" + (" (watch only)" if read_only else ""))
    stop_runs = stop_on_interrupt and not read_only
    next_status = time.time() + status_every
    views: Mapping[str, RunView] = {}
    shown_problem: str | None = None
    with _Driver(engine, out, tick) as drive:
        while True:
            update = drive.next()
            snap = update.snapshot if update is not None else engine.snapshot
            procs = snap.procs if snap is not None else {}
            views = snap.views if snap is not None else views
            printer.changes(procs, views, snap.statuses if snap is not None else {})
            printer.rcp(views)
            if snap is not None:
                printer.energy(snap.energy)
                printer.ranks(snap.ranks)
            problem = getattr(ctl, "write_error", None)  # the owner could not write perfwatch.json
            if problem != shown_problem:
                printer.line(f"cannot write perfwatch.json: {problem}; the runs go on, retrying" if problem
                             else "perfwatch.json written again")
                shown_problem = problem
            if drive.interrupted:
                break
            if procs and all(p.state.terminal for p in procs.values()) and not printer.ended_at:
                break
            if time.time() >= next_status and snap is not None:
                printer.status(snap.counts)
                next_status = time.time() + status_every
    if drive.interrupted:  # the engine has stopped: the controller is ours alone now
        printer.line("interrupted: " + ("stopping every run" if stop_runs else
                                        "leaving the runs running; `perfwatch attach` reopens them"))
        ctl.close(stop_runs=stop_runs)
        printer.changes(ctl.procs(), views, {})
        return 130
    book = final_book(session)
    printer.rcp({v.run_id: v for v in book.views()})  # the last run_stop may have come after the last update
    ok = summary(ctl.procs(), book, out)
    if isinstance(ctl, Scheduler):
        ctl.close(stop_runs=False)
    return 0 if ok else 1
