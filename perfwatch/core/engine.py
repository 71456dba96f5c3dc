"""The live side of perfwatch: a `Session` (what a LOGDIR is) and the `LiveEngine` that follows it.

`launch_session` creates the LOGDIR and a `Scheduler` that owns it. `attach_session`
opens an existing folder: if it is a perfwatch LOGDIR whose scheduler is gone (perfwatch
was killed, or the campaign finished) it takes the campaign over and re-adopts its runs;
if a detached scheduler still owns it, it controls it through requests
(`ClientController`); any other folder of mllog files is watched with no controller.

`LiveEngine` is the one data path both front ends drive (the TUI and `--headless`): it owns
the log watcher, the `RunBook`, controller polling, device telemetry and the selected run's
telemetry (its `telemetry.jsonl`, or every compute node's file of a Slurm run, with each node's
figures and their total), every run's GPU energy (core/measure/energy.py), all on its own thread, and hands out immutable `LiveSnapshot`s plus typed
`EngineError`s ("cannot read X: why") for the front end to show. Front ends only present.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from perfwatch.core.control import registry
from perfwatch.core.control.campaign import Campaign
from perfwatch.core.control.controller import ClientController, Controller, ProcInfo, action_method
from perfwatch.core.control.scheduler import Scheduler, Untrusted
from perfwatch.core.control.states import ACTIONS, RunState
from perfwatch.core.ingest.discover import discover
from perfwatch.core.ingest.watch import LogWatcher
from perfwatch.core.layout import RANKS_DIR, REGISTRY_FILE, RUN_LOGS, TELEMETRY_FILE
from perfwatch.core.measure.energy import EnergyFollower, RunEnergy
from perfwatch.core.measure.eta import Eta, eta_to_target, refit_gap_ms
from perfwatch.core.measure.mfu import Mfu, Overrides, overrides_from_registry, run_mfu
from perfwatch.core.measure.nodes import NodeTelemetry, node_telemetry
from perfwatch.core.measure.throughput import rolling_throughput, samples_rate
from perfwatch.core.model.attempts import Attempt, earlier_attempts
from perfwatch.core.model.book import RunBook, iter_blocks
from perfwatch.core.model.status import Counts, ProcFacts, RunStatus, count, judge, silent
from perfwatch.core.model.view import RunView
from perfwatch.core.results.summary import RecordedRun, recorded_runs
from perfwatch.core.telemetry.follow import RunTelemetryFollower
from perfwatch.core.telemetry.ranks import RankReport, rank_report
from perfwatch.core.telemetry.types import Sampler, Snapshot

log = logging.getLogger(__name__)


# a periodic task due within this many seconds is done now, with whatever woke the engine (a sample,
# lines, the user): the 1 Hz telemetry, the 1 s follow and the 2 s energy poll then share one wake-up
ALIGN = 0.3
SILENCE_CHECK_S = 60.0  # how often logs nobody controls are checked for silence (core/model/status.py)
# a run's ETA is refitted for a new eval no sooner than `refit_gap_ms` (core/measure/eta.py: 5 % of the
# run's time so far, 1-10 s) after its last fit; reaching the target or stopping is shown at once


@dataclass
class Session:
    logdir: Path
    title: str
    book: RunBook
    watcher_roots: list[Path]
    poll: bool
    controller: Controller | None
    host: dict = field(default_factory=dict)
    baseline: str | None = None
    untrusted: Untrusted | None = None  # a registry not signed by this user here: watched only
    engine: LiveEngine | None = field(default=None, repr=False)  # the engine following it, for other readers
    # run id -> the attempt whose log the book holds (the engine's thread moves it on at a restart)
    attempts: dict[str, int] = field(default_factory=dict)

    def target_reached(self, run_id: str, attempt: int | None = None) -> bool:
        """What `exit_at_target` asks: does this run's log, of attempt `attempt` (None: whichever the book
        holds), say its target was reached? An earlier attempt's log never answers for a later one."""
        if attempt is not None and self.attempts.get(run_id, 1) != attempt:
            return False
        run = self.book.get(run_id)
        return run is not None and run.view().target_reached

    @property
    def owns_campaign(self) -> bool:
        return isinstance(self.controller, Scheduler)


def expand_logdir(template: str, name: str, now: float | None = None) -> Path:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.localtime(now if now is not None else time.time()))
    return Path(template.format(name=name, timestamp=stamp))


def launch_session(campaign: Campaign, logdir: Path, *, poll: bool = False) -> Session:
    """Create LOGDIR, write the plan, own it. Nothing is started until `controller.poll()`."""
    targets = {r.run_id: r.target for r in campaign.runs if r.target is not None}
    stand_ins = {r.run_id: r.mlperf for r in campaign.runs if r.mlperf is not None}
    book = RunBook(logdir, targets=targets, stand_ins=stand_ins)
    session = Session(logdir, campaign.name, book, [logdir], poll, None, baseline=campaign.baseline)
    session.controller = Scheduler.create(campaign, logdir, target_reached=session.target_reached)
    session.controller.record_telemetry()
    session.host = session.controller.data.host
    return session


def attach_session(path: Path, *, poll: bool = False, control: bool = True, confirm: str | None = None,
                   ruleset: str | None = None) -> Session:
    """Open LOGDIR (take over / client / plain logs, see module docstring).

    A registry this user did not launch on this host is only watched (`session.untrusted` says
    why) unless `confirm` is its plan's short digest. `registry.RegistryError` when perfwatch.json
    exists but is unreadable or unsafe.
    """
    path = Path(path)
    data = registry.load(path) if path.is_dir() else None
    if data is None:
        root = path.parent if path.is_file() else path
        return Session(root, path.name, RunBook(root, ruleset=ruleset), [path], poll, None)
    book = RunBook(path, ruleset=ruleset, targets=data.targets(), stand_ins=data.stand_ins())
    session = Session(path, data.name or path.name, book, [path], poll, None, host=data.host, baseline=data.baseline,
                      attempts={r.run_id: r.attempt for r in data.runs})
    if control:
        try:
            owner = Scheduler.take_over(path, target_reached=session.target_reached, confirm=confirm)
        except Untrusted as exc:
            session.untrusted = exc
            return session
        if owner is not None:
            owner.record_telemetry()
        session.controller = owner if owner is not None else ClientController(path)
    return session


def reread(session: Session) -> RunBook:
    """Every log of the session read once from disk (final tables never miss the watcher's last batch)."""
    book = RunBook(session.book.root, ruleset=session.book.ruleset, targets=session.book.targets,
                   stand_ins=session.book.stand_ins)
    for path in discover(session.book.root):
        try:  # streamed in 256 KiB blocks, as `report` reads: a 600 MB log never sits in memory whole
            for block in iter_blocks(path):
                book.feed_file(path, block)
        except OSError:
            continue
    return book


def telemetry_path(view: RunView | None, proc: ProcInfo | None) -> Path | None:
    """LOGDIR/<run>/telemetry.jsonl for a launched run or a run folder; None for plain result logs.
    The run's telemetry is that file and, sampled on compute nodes (Slurm), the node files beside it
    (`jsonl.telemetry_files`)."""
    if proc is not None:
        folder = Path(proc.folder)
    elif view is not None and Path(view.path).name in RUN_LOGS:
        folder = Path(view.path).parent
    else:
        return None
    return folder / TELEMETRY_FILE


def energy_path(view: RunView) -> Path:
    """The telemetry.jsonl beside a run's log (with the node files beside it, `jsonl.telemetry_files`):
    where `report` reads its energy too (one number)."""
    return Path(view.path).parent / TELEMETRY_FILE


# ---- what the engine hands out ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EngineError:
    """Something the user should know ("cannot read X: why"), shown by the front end, not only logged."""

    source: str  # "logs", "telemetry", "control" or "engine"
    message: str
    time: float  # wall clock


@dataclass(frozen=True, slots=True)
class SelectedRun:
    """The data the engine follows for one run only (the one the user looks at)."""

    run_id: str | None
    tail: tuple[str, ...] = ()
    # the last records of its telemetry.jsonl (a run sampled on compute nodes: of its first node);
    # None: the run has no such file (plain result logs)
    telemetry: tuple[Mapping[str, Any], ...] | None = None
    # a run sampled on compute nodes (Slurm): each node's last records, by node name
    nodes: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=lambda: _EMPTY)
    # ... and each node's figures now with the run's total (core/measure/nodes.py); None: no node's record
    by_node: NodeTelemetry | None = None


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_NO_SELECTION = SelectedRun(None)


@dataclass(frozen=True, slots=True)
class RunFigures:
    """A run's speed as every front end shows it (the numbers `report` puts in its row)."""

    tp_now: float | None  # per second over the rolling window, in `unit` (report: rate_window)
    tp_avg: float | None  # per second on average over the run, in `unit` (report: throughput_mean)
    mfu: Mfu | None  # against THE peak resolver's peak, from tp_now's window (report: mfu)
    unit: str = "samples"  # what the benchmark counts (RunView.count_unit): "samples", or "tokens" (GPT-3)
    # the same window and mean in both units (the metrics endpoint exports both): samples/s (a GPT-3 sample is
    # a sequence of the logged max_sequence_length) and tokens/s (where the log or the campaign gives tokens)
    samples_now: float | None = None  # report: samples_per_s_window
    tokens_now: float | None = None  # report: tokens_per_s
    samples_avg: float | None = None  # report: samples_per_s_mean


def run_figures(view: RunView, *, overrides: Overrides | None = None, gpu: Any = None,
                telemetry: Sequence[Mapping[str, Any]] = (), scheduled_devices: int | None = None) -> RunFigures:
    """Throughput now and on average and MFU of one run: the live view's computation (`report` makes the
    same calls through measure/columns.py; tests/test_one_number.py holds them equal). `gpu`: the live
    sample of the run's GPU; `telemetry`: the records of its telemetry.jsonl that name its GPU (the peak
    when there is no live sample, as `report` finds it)."""
    avg = view.throughput_avg
    now = rolling_throughput(view, flops_per_sample=overrides.flops_per_sample if overrides else None)
    return RunFigures(
        now.rate,
        avg,
        run_mfu(view, overrides=overrides, gpu=gpu, telemetry=telemetry, cpu="cached",
                scheduled_devices=scheduled_devices),
        view.count_unit,
        now.samples_per_s,
        now.tokens_per_s,
        samples_rate(view, avg),
    )


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """Everything a front end shows at one instant; immutable, safe on any thread."""

    seq: int
    title: str
    host: Mapping[str, Any]
    controlled: bool  # a controller steers these runs (keys like pause apply)
    views: Mapping[str, RunView]  # by run id, in the order the runs were found
    etas: Mapping[str, Eta]  # by run id: when the eval metric reaches the target (core/measure/eta.py)
    procs: Mapping[str, ProcInfo]  # by run id; empty when nobody controls the runs
    devices: Snapshot | None  # the latest device sample (None before the first, or without a sampler)
    selected: SelectedRun
    errors: tuple[EngineError, ...]  # the most recent ones, oldest first
    ready: bool  # the first full read of every log is done
    # by run id: GPU energy-to-train and whole-run energy from the telemetry.jsonl beside its log
    # (core/measure/energy.py, the computation `report` uses); no entry: no GPU energy recorded
    energy: Mapping[str, RunEnergy]
    # by run id, every run of run_ids(): its state, reason and verdict (core/model/status.py)
    statuses: Mapping[str, RunStatus] = field(default_factory=lambda: _EMPTY)
    counts: Counts = field(default_factory=lambda: count(()))  # the statuses added up
    figures: Mapping[str, RunFigures] = field(default_factory=lambda: _EMPTY)  # by run id, runs with a log
    # by run id: a restarted run's earlier attempts, oldest first (core/model/attempts.py)
    attempts: Mapping[str, tuple[Attempt, ...]] = field(default_factory=lambda: _EMPTY)
    # by run id, runs that write rank files: per-rank timing and the straggler (core/telemetry/ranks.py)
    ranks: Mapping[str, RankReport] = field(default_factory=lambda: _EMPTY)
    # by run id: the control actions (states.ACTIONS) the controller allows for it as `procs` shows it
    actions: Mapping[str, frozenset[str]] = field(default_factory=lambda: _EMPTY)

    def run_ids(self) -> list[str]:
        """Every run known from its log, its process or perfwatch.json, logs' order first."""
        out = list(self.views) + [rid for rid in self.procs if rid not in self.views]
        return out + [rid for rid in self.statuses if rid not in self.views and rid not in self.procs]


@dataclass(frozen=True, slots=True)
class Update:
    """What changed since the front end last called `LiveEngine.take()`."""

    snapshot: LiveSnapshot
    changed: frozenset[str]  # runs whose view or process facts changed
    devices: bool  # a new device sample
    selected: bool  # the selected run's tail or telemetry changed (or the selection itself)
    errors: tuple[EngineError, ...]  # new since the last take


class WatcherFactory(Protocol):
    def __call__(self, roots: Iterable[Path], sink: Callable[[list[Any]], None], *, poll: bool,
                 min_interval: float, on_error: Callable[[str], None]) -> Any: ...


KEEP_ERRORS = 50


class LiveEngine:
    """Owns the live data path of one session; see the module docstring.

    Threaded use (the TUI): `start(on_update)`; `on_update()` is called on the engine's thread when a
    new `Update` waits and the previous one was taken (at most one wake-up outstanding, however fast
    lines arrive); the front end calls `take()` on its own thread. Stepped use (tests, a caller with
    its own loop): `start(threaded=False)` and `step()` on one thread.
    """

    def __init__(
        self,
        session: Session,
        *,
        controller: Controller | None = None,
        sampler: Sampler | None = None,
        sampler_interval: float = 1.0,
        control_interval: float = 0.5,
        follow_interval: float = 1.0,
        energy_interval: float = 2.0,
        ranks_interval: float = 5.0,
        watch_min_interval: float = 0.0,
        watcher_factory: WatcherFactory | None = None,
    ) -> None:
        self.session = session
        session.engine = self  # read-only consumers (the metrics endpoint) take its snapshots
        self.book = session.book  # the engine's thread only
        self.controller = controller if controller is not None else session.controller
        self.sampler = sampler
        self.sampler_interval = sampler_interval
        self.control_interval = control_interval
        self.follow_interval = follow_interval
        self.energy_interval = energy_interval
        self.ranks_interval = ranks_interval
        self.watch_min_interval = watch_min_interval
        self._watcher_factory = watcher_factory
        self.ready = threading.Event()  # set once the first full read of the logs has been applied
        self._on_update: Callable[[], None] | None = None
        self._watcher: Any = None
        self._telemetry: Any = None  # the sampler thread this engine started
        self._shared_telemetry: Any = None  # the campaign owner's recording thread, whose samples it shows
        self._telemetry_errors = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._in_lock = threading.Lock()  # what other threads hand in: batches, samples, errors, selection, actions
        self._batches: list[Any] = []
        self._requests: list[tuple[str, str, Future[str | None]]] = []  # (action, run id, its outcome)
        self._sample: Snapshot | None = None
        self._errors_in: list[EngineError] = []
        self._want_selected: str | None = None
        self._out_lock = threading.Lock()  # the published snapshot and what changed since the last take
        self._snapshot: LiveSnapshot | None = None
        self._p_changed: set[str] = set()
        self._p_devices = self._p_selected = False
        self._p_errors: list[EngineError] = []
        self._notified = False
        self._taken_seq = -1
        # engine thread only
        self._seq = 0
        self._views: dict[str, RunView] = {}
        self._etas: dict[str, Eta] = {}
        self._eta_keys: dict[str, tuple[object, ...]] = {}
        # run -> when its ETA was last fitted (monotonic) and how long a new eval then waits for a refit
        self._eta_fitted: dict[str, tuple[float, float]] = {}
        self._eta_due: dict[str, float] = {}  # run -> when a deferred refit is due (see refit_gap_ms)
        self._procs: dict[str, ProcInfo] = {}
        self._actions: dict[str, frozenset[str]] = {}
        self._devices: Snapshot | None = None
        self._errors: deque[EngineError] = deque(maxlen=KEEP_ERRORS)
        self._seen_errors: set[str] = set()
        self._next_poll = 0.0
        self._next_follow = 0.0
        self._selected: SelectedRun = _NO_SELECTION
        self._follower: RunTelemetryFollower | None = None
        self._sel_records: dict[str, tuple[dict[str, Any], ...]] = {}  # the selected run's, by source
        self._energy: dict[str, RunEnergy] = {}
        self._energy_followers: dict[str, EnergyFollower] = {}
        self._energy_keys: dict[str, tuple[object, ...]] = {}
        self._next_energy = 0.0
        self._next_ranks = 0.0
        self._ranks: dict[str, RankReport] = {}
        self._ranks_keys: dict[str, tuple[object, ...]] = {}  # run -> its rank files' (name, size, mtime)
        self._statuses: dict[str, RunStatus] = {}
        self._next_silence_check = 0.0  # monotonic: when to look again for logs silent for good
        self._figures: dict[str, RunFigures] = {}
        self._attempts: dict[str, tuple[Attempt, ...]] = {}
        self._gpu_names: tuple[str | None, ...] = ()
        # what the campaign says about MFU (flops_per_sample, peak_flops), per run id; {} for other folders
        self._overrides = overrides_from_registry(session.logdir)
        # a campaign's LOGDIR watched with no controller (--no-control, a plan not signed here): its runs'
        # process facts come from perfwatch.json, read-only, as `report` reads them
        self._read_registry = self.controller is None and (Path(session.logdir) / REGISTRY_FILE).is_file()
        self._recorded: dict[str, RecordedRun] = {}

    # ---- lifecycle --------------------------------------------------------------------------------
    def start(self, on_update: Callable[[], None] | None = None, *, threaded: bool = True) -> LiveEngine:
        """Start the watcher (and the device sampler); with `threaded`, the engine's own thread."""
        self._on_update = on_update
        factory = self._watcher_factory
        if factory is None:
            factory = LogWatcher
        assert factory is not None
        self._watcher = factory(self.session.watcher_roots, self._sink, poll=self.session.poll,
                                min_interval=self.watch_min_interval, on_error=self._watch_error)
        self._watcher.start()
        recorder = self.controller.telemetry if isinstance(self.controller, Scheduler) else None
        if self.sampler is not None and recorder is not None:
            # the campaign owner samples the devices already (to record telemetry.jsonl): one sampler thread
            # per process, whose samples this engine shows too
            self.sampler.close()
            self.sampler = None
            self._shared_telemetry = recorder
            recorder.subscribe(self._on_sample)
        elif self.sampler is not None:
            from perfwatch.core.telemetry.sampling import TelemetryThread

            self._telemetry = TelemetryThread(self.sampler, interval=self.sampler_interval, sink=self._on_sample)
            self._telemetry.start()
        if threaded:
            self._thread = threading.Thread(target=self._loop, name="perfwatch-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop every thread the engine started; idempotent. The controller is left to its owner."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)
        if self._telemetry is not None:
            self._telemetry.stop()
            self._telemetry = None
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self._follower is not None:
            self._follower.close()
        for follower in self._energy_followers.values():
            follower.close()
        with self._in_lock:
            requests, self._requests = self._requests, []
        for action, run_id, outcome in requests:
            outcome.set_result(f"{action.replace('_', ' ')} {run_id}: perfwatch is closing")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # a bug must not freeze the live view: say it and carry on
                log.exception("engine step failed")
                self.report("engine", f"internal error: {exc!r}")
            self._wake.wait(self._idle_timeout())
            self._wake.clear()

    def _idle_timeout(self) -> float:
        now = time.monotonic()
        due = [self._next_follow] if self._follower is not None else []
        if self._energy_followers:
            due.append(self._next_energy)
        if self.controller is not None or self._read_registry:
            due.append(self._next_poll)
        if self._eta_due:
            due.append(min(self._eta_due.values()))
        if not due:
            return 1.0
        return min(max(min(due) - now, 0.01), 1.0)

    # ---- inputs (any thread) ----------------------------------------------------------------------
    def _sink(self, batches: list[Any]) -> None:
        """The watcher's thread: hand the lines over, wake the engine."""
        with self._in_lock:
            self._batches.extend(batches)
        self._wake.set()

    def _on_sample(self, snapshot: Snapshot) -> None:
        """The sampler's thread: a newer sample replaces one not yet taken."""
        if self._stop.is_set():
            return
        with self._in_lock:
            self._sample = snapshot
        self._wake.set()

    def _watch_error(self, message: str) -> None:
        self.report("logs", message)

    def report(self, source: str, message: str) -> None:
        """Put a message on the error channel (any thread)."""
        with self._in_lock:
            self._errors_in.append(EngineError(source, message, time.time()))
        self._wake.set()

    def select(self, run_id: str | None) -> None:
        """Follow this run's log tail and telemetry (the one the user looks at)."""
        with self._in_lock:
            self._want_selected = run_id
        self._wake.set()

    # ---- control (any thread) ---------------------------------------------------------------------
    # The controller is only ever called on the engine's thread: a poll that takes long (Slurm's
    # squeue) delays a requested action, it never blocks the thread that asked for it.
    @property
    def controlled(self) -> bool:
        return self.controller is not None

    def can(self, action: str, run_id: str) -> bool:
        """Whether the controller allowed `action` for the run at the latest snapshot."""
        snap = self._snapshot
        return snap is not None and action in snap.actions.get(run_id, ())

    def act(self, action: str, run_id: str) -> Future[str | None]:
        """Ask for `action` on the run; the engine's thread executes it at its next step. The future
        resolves to None once the controller has done it, else to why not (in words)."""
        outcome: Future[str | None] = Future()
        if self.controller is None:
            outcome.set_result("nobody controls these runs")
            return outcome
        with self._in_lock:
            self._requests.append((action, run_id, outcome))
        self._wake.set()
        return outcome

    def _execute(self, ctl: Controller, requests: list[tuple[str, str, Future[str | None]]]) -> None:
        """The requested actions, in the order asked; the outcome is polled right after."""
        for action, run_id, outcome in requests:
            words = f"{action.replace('_', ' ')} {run_id}"
            try:
                if not ctl.can(action, run_id):
                    proc = ctl.procs().get(run_id)
                    outcome.set_result(f"{words}: not possible now" + (f" (it is {proc.state})" if proc else ""))
                    continue
                action_method(ctl, action)(run_id)
                if isinstance(ctl, ClientController) and ctl.send_error is not None:
                    lost, ctl.send_error = ctl.send_error, None  # the request for the owner was not written
                    raise OSError(lost)
            except Exception as exc:
                log.exception("%s failed", words)
                outcome.set_result(f"{words}: {exc}")  # the requester shows it (the TUI: a notification)
                continue
            outcome.set_result(None)
        self._next_poll = 0.0

    # ---- one pass (the engine's thread) -----------------------------------------------------------
    def step(self) -> bool:
        """Apply what arrived, poll the controller and the selected run's telemetry when due, publish.

        Returns True when a new snapshot was published."""
        now = time.monotonic()
        watcher_ready = self._watcher is None or self._watcher.ready.is_set()  # before taking batches
        with self._in_lock:
            batches, self._batches = self._batches, []
            sample, self._sample = self._sample, None
            errors, self._errors_in = self._errors_in, []
            want = self._want_selected
            requests, self._requests = self._requests, []
        changed = self.book.apply(batches) if batches else set()
        ctl = self.controller
        if ctl is not None and requests:
            self._execute(ctl, requests)
        if ctl is not None and now + ALIGN >= self._next_poll:
            self._next_poll = now + self.control_interval
            try:
                ctl.poll()
                procs = dict(ctl.procs())
            except Exception as exc:
                log.exception("controller poll failed")
                errors.append(EngineError("control", f"cannot update the runs' processes: {exc}", time.time()))
                procs = self._procs
            moved = {rid for rid, p in procs.items() if self._procs.get(rid) != p}
            for rid in moved:
                self._actions[rid] = frozenset(a for a in ACTIONS if ctl.can(a, rid))
            for rid in set(self._procs) - set(procs):
                self._actions.pop(rid, None)
            changed |= moved | (set(self._procs) - set(procs))
            self._procs = procs
            self._follow_attempts(procs)
        elif self._read_registry and now + ALIGN >= self._next_poll:
            self._next_poll = now + self.control_interval
            recorded = recorded_runs(Path(self.session.logdir), attempts=False)
            changed |= {rid for rid, r in recorded.items() if self._recorded.get(rid) != r}
            changed |= set(self._recorded) - set(recorded)
            self._recorded = recorded
        devices = False
        if sample is not None:
            self._devices, devices = sample, True
            errors += self._telemetry_problems()
            names = _gpu_names(sample)
            if names != self._gpu_names:  # the GPUs (so the peaks behind MFU) changed: every run's figures
                self._gpu_names = names
                changed |= set(self._views)
        if now + ALIGN >= self._next_silence_check:  # a log nobody controls may fall silent for good
            self._next_silence_check = now + SILENCE_CHECK_S
            wall_ms = time.time() * 1000.0
            changed |= {rid for rid, st in self._statuses.items() if st.state.alive and rid not in self._procs
                        and rid not in self._recorded and rid in self._views and silent(self._views[rid], wall_ms)}
        for rid in changed:
            run = self.book.get(rid)
            if run is not None:
                view = self._views[rid] = run.view()
                self._figures[rid] = self._run_figures(view, self._procs.get(rid))
            planned = self._recorded.get(rid)
            view_or_none = self._views.get(rid)
            proc: ProcFacts | None = self._procs.get(rid) or self._recorded.get(rid)
            if view_or_none is None and proc is None:
                self._statuses.pop(rid, None)
                continue
            target = self.book.targets.get(rid) or (planned.target if planned is not None else None)
            status = self._statuses[rid] = judge(view_or_none, proc, target, now_ms=time.time() * 1000.0)
            if view_or_none is not None:
                if status.state.ended:  # an ended run has no ETA, however it ended
                    self._etas.pop(rid, None)
                    self._eta_keys.pop(rid, None)
                    self._eta_due.pop(rid, None)
                else:
                    self._update_eta(rid, view_or_none, now)
        for rid, due in list(self._eta_due.items()):  # deferred refits whose time came
            if rid not in self._views or rid not in self._statuses or self._statuses[rid].state.ended:
                del self._eta_due[rid]  # never left due: the engine would wake 100x/s for it
            elif now + ALIGN >= due:
                self._eta_keys.pop(rid, None)
                self._update_eta(rid, self._views[rid], now)
                changed.add(rid)
        if self._views and now + ALIGN >= self._next_energy:
            self._next_energy = now + self.energy_interval
            changed |= self._update_energy()
        if self._views and now + ALIGN >= self._next_ranks:
            self._next_ranks = now + self.ranks_interval
            changed |= self._update_ranks()
        selected = self._follow(want, changed, now, errors)
        errors = [e for e in errors if self._first_time(e)]
        self._errors.extend(errors)
        became_ready = watcher_ready and not self.ready.is_set()
        if not (changed or devices or selected or errors or became_ready or self._snapshot is None):
            return False
        self._publish(changed, devices, selected, errors, watcher_ready)
        if became_ready:
            self.ready.set()
        return True

    def _follow_attempts(self, procs: Mapping[str, ProcInfo]) -> None:
        """A run whose attempt moved on was restarted: its view begins empty, and nothing of the earlier
        attempt's log counts for it (`Session.target_reached`); its earlier attempts are read back."""
        for rid, proc in procs.items():
            known = self.session.attempts.get(rid)
            if known == proc.attempt and (proc.attempt == 1 or rid in self._attempts):
                continue
            if known is not None and proc.attempt > known:
                self.book.new_attempt(rid)
                self._etas.pop(rid, None)
                self._eta_keys.pop(rid, None)
                self._eta_due.pop(rid, None)
            self.session.attempts[rid] = proc.attempt
            self._attempts[rid] = self._earlier(rid, proc) if proc.attempt > 1 else ()

    def _earlier(self, run_id: str, proc: ProcInfo) -> tuple[Attempt, ...]:
        data = registry.read(self.session.logdir)
        rec = next((r for r in data.runs if r.run_id == run_id), None) if data is not None else None
        if rec is None:
            return ()
        return earlier_attempts(Path(proc.folder), run_id, rec.attempts, self.book.targets.get(run_id))

    def _run_figures(self, view: RunView, proc: ProcInfo | None) -> RunFigures:
        devices = proc.devices if proc is not None else ()
        snap = self._devices
        gpus = snap.gpu.gpus if snap is not None and snap.gpu is not None else ()
        gpu = next((g for g in gpus if devices and g.index == devices[0]), gpus[0] if gpus else None)
        follower = self._energy_followers.get(view.run_id)
        figures = run_figures(view, overrides=self._overrides.get(view.run_id), gpu=gpu,
                              telemetry=follower.peak.records if follower is not None else (),
                              scheduled_devices=len(devices) or None)
        if proc is not None and proc.state is RunState.PAUSED:  # stopped by SIGSTOP: no rate (nor MFU) "now"
            return RunFigures(None, figures.tp_avg, None, figures.unit, samples_avg=figures.samples_avg)
        return figures

    def _update_eta(self, run_id: str, view: RunView, now: float) -> None:
        """Refit only when the evals, the target or the run's end changed (a fit costs about a ms), and
        for a new eval alone no sooner than `refit_gap_ms` after the last fit: the shown ETA counts down
        between fits."""
        last = view.evals[-1] if view.evals else None
        key = (len(view.evals), last, view.target, view.target_reached, view.phase == "stopped")
        old = self._eta_keys.get(run_id)
        if old == key:
            return
        just_an_eval = old is not None and old[2:] == key[2:]
        fitted = self._eta_fitted.get(run_id)
        if just_an_eval and fitted is not None and now - fitted[0] < fitted[1]:
            self._eta_due.setdefault(run_id, fitted[0] + fitted[1])
            return
        self._eta_keys[run_id] = key
        self._eta_fitted[run_id] = (now, refit_gap_ms(view.elapsed_ms) / 1000.0)
        self._eta_due.pop(run_id, None)
        self._etas[run_id] = eta_to_target(view)

    def _update_ranks(self) -> set[str]:
        """Re-read the rank files of runs whose files changed (live runs are looked at every
        `ranks_interval`; an ended run's report is kept as it was last read)."""
        changed: set[str] = set()
        for rid, view in self._views.items():
            status = self._statuses.get(rid)
            if rid in self._ranks_keys and status is not None and status.state.ended:
                continue
            folder = Path(view.path).parent / RANKS_DIR
            try:
                key = tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder)))
            except OSError:
                key = ()
            if self._ranks_keys.get(rid) == key:
                continue
            self._ranks_keys[rid] = key
            report = rank_report(folder.parent) if key else None
            if report is None:
                if self._ranks.pop(rid, None) is not None:
                    changed.add(rid)
            elif self._ranks.get(rid) != report:
                self._ranks[rid] = report
                changed.add(rid)
        return changed

    def _update_energy(self) -> set[str]:
        """Read what every run's telemetry.jsonl gained; recompute the energy of runs whose readings
        or run_start/run_stop/samples changed. Returns the runs whose energy changed."""
        changed: set[str] = set()
        for rid, view in self._views.items():
            follower = self._energy_followers.get(rid)
            if follower is None or follower.path != energy_path(view):
                if follower is not None:
                    follower.close()
                follower = self._energy_followers[rid] = EnergyFollower(energy_path(view))
            peak = (follower.peak, len(follower.peak.records))
            follower.poll()
            key = (follower.version, view.run_start_ms, view.run_stop_ms, view.samples)
            if self._energy_keys.get(rid) == key:
                continue
            self._energy_keys[rid] = key
            if (follower.peak, len(follower.peak.records)) != peak:  # the telemetry named the run's GPU: the peak behind its MFU
                self._figures[rid] = self._run_figures(view, self._procs.get(rid))
                changed.add(rid)
            energy = follower.energy(view)
            old = self._energy.get(rid)
            if energy.to_train is None and energy.whole is None:
                self._energy.pop(rid, None)
            else:
                self._energy[rid] = energy
            if self._energy.get(rid) != old:
                changed.add(rid)
        return changed

    def _first_time(self, error: EngineError) -> bool:
        """The same message is shown once, not every second while the problem lasts."""
        if error.message in self._seen_errors:
            return False
        if len(self._seen_errors) > 1000:
            self._seen_errors.clear()
        self._seen_errors.add(error.message)
        return True

    def _telemetry_problems(self) -> list[EngineError]:
        thread = self._telemetry or self._shared_telemetry
        if thread is None or thread.errors == self._telemetry_errors:
            return []
        self._telemetry_errors = thread.errors
        return [EngineError("telemetry", thread.last_error or "telemetry sampling failed", time.time())]

    def _follow(self, want: str | None, changed: set[str], now: float, errors: list[EngineError]) -> bool:
        """Update the selected run's tail and telemetry; True if either (or the selection) changed."""
        sel = self._selected
        if want != sel.run_id:
            if self._follower is not None:
                self._follower.close()
            view, proc = self._views.get(want) if want else None, self._procs.get(want) if want else None
            path = telemetry_path(view, proc)
            self._follower = RunTelemetryFollower(path) if path is not None else None
            self._next_follow, self._sel_records = 0.0, {}
            sel = SelectedRun(want, self.book.log_tail(want) if want else (), None if path is None else ())
            moved = True
        else:
            moved = False
            if want is not None and want in changed:
                tail = self.book.log_tail(want)
                if tail != sel.tail:
                    sel, moved = replace(sel, tail=tail), True
            if want is not None and self._follower is None:
                path = telemetry_path(self._views.get(want), self._procs.get(want))
                if path is not None:  # the run got a folder: its log or its process appeared
                    self._follower, self._next_follow = RunTelemetryFollower(path), 0.0
                    sel, moved = replace(sel, telemetry=()), True
        follower = self._follower
        grew = False
        if follower is not None and now + ALIGN >= self._next_follow:
            self._next_follow = now + self.follow_interval
            grew = follower.poll()
            errors.extend(EngineError("telemetry", f"cannot read {exc.filename}: {exc.strerror}", time.time())
                          for exc in follower.problems)
            if grew:
                self._sel_records = follower.records
        if follower is not None and want is not None and (grew or want in changed):
            records = self._sel_records
            by_node = self._by_node(want, records)
            if grew or by_node != sel.by_node:
                nodes = MappingProxyType({node: recs for node, recs in records.items() if node})
                sel = replace(sel, telemetry=next(iter(records.values()), ()), nodes=nodes, by_node=by_node)
                moved = True
        self._selected = sel
        return moved

    def _by_node(self, run_id: str, records: Mapping[str, tuple[dict[str, Any], ...]]) -> NodeTelemetry | None:
        """A run sampled on compute nodes: each node's figures now, with its share of the GPU energy, and the
        run's total, whose energy is the run's (`report`'s number); None for a run sampled where perfwatch runs."""
        if not any(records):  # no compute node's file (only "": telemetry.jsonl)
            return None
        view, follower = self._views.get(run_id), self._energy_followers.get(run_id)
        energy = follower.node_energy(view) if view is not None and follower is not None else {}
        return node_telemetry(records, energy, self._energy.get(run_id))

    def _publish(self, changed: set[str], devices: bool, selected: bool, errors: list[EngineError],
                 ready: bool) -> None:
        self._seq += 1
        s = self.session
        snap = LiveSnapshot(
            seq=self._seq, title=s.title, host=MappingProxyType(dict(s.host)) if s.host else _EMPTY,
            controlled=self.controller is not None, views=MappingProxyType(dict(self._views)),
            etas=MappingProxyType(dict(self._etas)),
            procs=MappingProxyType(dict(self._procs)), devices=self._devices, selected=self._selected,
            errors=tuple(self._errors), ready=ready, energy=MappingProxyType(dict(self._energy)),
            statuses=MappingProxyType(dict(self._statuses)), counts=count(self._statuses.values()),
            figures=MappingProxyType(dict(self._figures)), attempts=MappingProxyType(dict(self._attempts)),
            ranks=MappingProxyType(dict(self._ranks)),
            actions=MappingProxyType(dict(self._actions)),
        )
        with self._out_lock:
            first = self._snapshot is None
            self._snapshot = snap
            self._p_changed |= changed
            self._p_devices |= devices
            self._p_selected |= selected or first
            self._p_errors += errors
            notify = not self._notified
            self._notified = True
        if notify and self._on_update is not None:
            self._on_update()

    # ---- output (the front end's thread) ----------------------------------------------------------
    @property
    def snapshot(self) -> LiveSnapshot | None:
        """The latest snapshot (None before the first step)."""
        return self._snapshot

    def take(self) -> Update | None:
        """The latest snapshot with everything that changed since the last take; None if nothing did."""
        with self._out_lock:
            self._notified = False
            snap = self._snapshot
            if snap is None:
                return None
            pending = self._p_changed or self._p_devices or self._p_selected or self._p_errors
            if not pending and snap.seq == self._taken_seq:
                return None
            update = Update(snap, frozenset(self._p_changed), self._p_devices, self._p_selected,
                            tuple(self._p_errors))
            self._p_changed, self._p_devices, self._p_selected, self._p_errors = set(), False, False, []
            self._taken_seq = snap.seq
            return update


def _gpu_names(snap: Snapshot | None) -> tuple[str | None, ...]:
    gpu = snap.gpu if snap is not None else None
    return tuple(g.name for g in gpu.gpus) if gpu is not None else ()
