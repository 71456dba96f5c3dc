"""LogWatcher: follow every log file under some folders and hand new lines over in batches.

The filesystem tells us *which* paths changed (watchdog: inotify by default, a polling observer for
network filesystems that deliver no inotify events); `FileTail` works out *what* changed. The watchdog
handler only marks paths dirty and wakes one worker thread; the worker reads every dirty path and calls
`sink` once per pass with all batches. So a burst of small appends costs one sink call, and reading
never happens on watchdog's thread.

Events can be lost (inotify queue overflow, files created in a new folder before its watch exists, a
root that did not exist yet), so the worker also re-scans the roots every `rescan_interval` seconds:
new files are picked up and every known file is re-checked (a stat per file when nothing changed).

Threading contract: `sink(list[LineBatch])` runs on the watcher's worker thread. Consumers must not touch
UI widgets or shared models there: put the batches on a queue or post a message and apply them on their
own thread. `sink` may block (e.g. a bounded `queue.put`) to slow reading down; exceptions it raises
are logged and the watcher keeps going.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserverVFS

from perfwatch.core.ingest import inotify
from perfwatch.core.ingest.inotify import CoalescingInotify
from perfwatch.core.ingest.tail import FileTail, LineBatch
from perfwatch.core.layout import is_log_name

log = logging.getLogger(__name__)

# watchdog warns (on stderr, which would garble a full-screen UI) when nested folders are created
# faster than it registers watches on them; it then replaces the watch and events keep coming.
warnings.filterwarnings("ignore", message="Callback with id .* already exists", category=RuntimeWarning)

Sink = Callable[[list[LineBatch]], None]

# Rotated copies (`mllog.txt.1`) and compressed archives would repeat or garble lines we already follow.
_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
]
DRAIN_BUDGET = 16 << 20  # bytes read per worker pass before the sink is called (large files stream)
INOTIFY_RESCAN_S = 2.0
POLL_RESCAN_S = 5.0  # the polling observer already walks the tree; the re-scan is only a backstop
STOP_TIMEOUT_S = 10.0  # stop() waits this long for a sink call in progress
RESCAN_COST_FACTOR = 400  # re-scan interval >= 400 x what one re-scan costs (<= 0.25 % of a core) ...
MAX_RESCAN_S = 60.0  # ... but never longer than this
MAX_OPEN = 256  # descriptors kept open; the least recently active files beyond that are parked


def is_candidate(path: Path) -> bool:
    """Files worth reading for mllog lines: `*.txt`, `*.log` or a name containing `mllog`.

    Never perfwatch's own `telemetry.jsonl`/`perfwatch.json`, hidden files, anything inside `.git`,
    rotated copies (`*.log.1`) or compressed files. (LogWatcher also skips hidden folders below its
    roots; a root may itself live in a hidden folder such as `~/.cache`.) Only the name is looked at,
    except that the path must be a regular file (checked last, one stat).
    """
    if not is_log_name(path):  # one name rule for live watching and for `report`
        return False
    if ".git" in path.parts[:-1]:
        return False
    try:
        return path.is_file()
    except OSError:
        return False


class _Handler(FileSystemEventHandler):
    """Runs on watchdog's thread: only records which paths to look at."""

    def __init__(self, watcher: LogWatcher) -> None:
        self._w = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [os.fsdecode(event.src_path)]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(os.fsdecode(dest))
        if event.is_directory:
            if isinstance(event, DirCreatedEvent | DirMovedEvent):
                self._w._mark_dirs(paths[-1:])
            return
        self._w._mark_files(paths)

    def on_files_modified(self, paths: list[str]) -> None:
        """The coalescing inotify reader's batch form: every file changed since its last read, at once."""
        self._w._mark_files(paths)


class LogWatcher:
    """Follow candidate files under `roots` (folders, or single files) and feed `sink` with batches.

    `start()` returns at once; the worker first reads every existing file from its start (large files
    in several sink calls), then follows appends, new files and new folders. `ready` is set once that
    first full pass is done. `stop()` joins every thread and closes every file; it is idempotent.
    """

    def __init__(
        self,
        roots: Iterable[Path | str],
        sink: Sink,
        *,
        poll: bool = False,
        poll_interval: float = 0.25,
        include: Callable[[Path], bool] = is_candidate,
        rescan_interval: float | None = None,
        min_interval: float = 0.0,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.roots = [Path(os.path.abspath(r)) for r in roots]
        self.sink = sink
        self.poll = poll
        self.poll_interval = max(0.01, poll_interval)
        self.include = include
        if rescan_interval is None:
            rescan_interval = POLL_RESCAN_S if poll else INOTIFY_RESCAN_S
        self.rescan_interval = max(0.05, rescan_interval)
        # at most one read pass per min_interval: a consumer that refreshes at 2 Hz (the TUI) need
        # not pay for reading every single append; 0 = read at once (lowest latency, headless)
        self.min_interval = max(0.0, min_interval)
        # problems the user should see ("cannot read X: why"), besides the log record
        self.on_error = on_error
        self._stop_event = threading.Event()
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._started = False
        self._dirty: dict[str, None] = {}  # insertion-ordered set: files to read
        self._dirty_dirs: dict[str, None] = {}  # folders to scan (new, or moved in)
        self._explicit: set[str] = set()  # add_file() paths: followed whatever their name
        self._tails: dict[str, FileTail] = {}  # worker thread only; ordered by last activity
        self._watch_lock = threading.Lock()  # never held with _lock: watchdog dispatches under its own
        self._watched: set[tuple[str, bool]] = set()
        self._bytes_read = 0  # worker thread only
        self._observer: BaseObserver | CoalescingInotify | None = None
        self._worker: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> LogWatcher:
        """Start watching (events first, so nothing written during the initial scan is missed)."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            for root in self.roots:
                if root.is_file():
                    self._explicit.add(str(root))  # a single file given as a root is followed by path
        observer: BaseObserver | CoalescingInotify
        if self.poll:
            # lstat: a symlinked folder is a link, never walked (a `data -> /` link would make every poll
            # snapshot the whole filesystem); os.walk below never follows one either
            observer = PollingObserverVFS(os.lstat, os.scandir, polling_interval=self.poll_interval)
        elif self.min_interval > 0 and inotify.available():
            # coalesced reads: the kernel merges repeated IN_MODIFY events between two reads of its
            # queue, so a file written 1,000 times a second costs one event per interval, not 1,000
            observer = CoalescingInotify(self.min_interval)
        else:
            observer = Observer()
        observer.daemon = True
        self._observer = observer
        self._ensure_watches()
        observer.start()
        self._worker = threading.Thread(target=self._run, name="perfwatch-watch", daemon=True)
        self._worker.start()
        return self

    def stop(self) -> None:
        """Stop the observer and the worker, close every file. Safe to call twice or before start()."""
        with self._lock:
            self._stopping = True
        self._stop_event.set()
        self._wake.set()
        worker, self._worker = self._worker, None
        if worker is not None and worker is not threading.current_thread():
            worker.join(STOP_TIMEOUT_S)
            if worker.is_alive():  # stuck in the sink: leave its files to it rather than hang the caller
                log.warning("LogWatcher worker still busy in sink after %.0f s; not waiting", STOP_TIMEOUT_S)
                self._tails = {}
        observer, self._observer = self._observer, None
        if observer is not None:
            try:
                observer.stop()
                observer.join()
            except Exception:  # a dying observer must not keep stop() from finishing
                log.exception("stopping the file observer failed")
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()

    def __enter__(self) -> LogWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_file(self, path: Path | str) -> None:
        """Follow this file whatever its name (it need not exist yet, nor be under a root)."""
        p = os.path.abspath(path)
        with self._lock:
            self._explicit.add(p)
            self._dirty[p] = None
        if self._observer is not None:
            self._watch(os.path.dirname(p), recursive=False)
        self._wake.set()

    # ---- called from watchdog's thread --------------------------------------------------------------
    def _mark_files(self, paths: list[str]) -> None:
        with self._lock:
            for p in paths:
                if p in self._tails or p in self._explicit or self._wanted(p):
                    self._dirty[p] = None
        self._wake.set()

    def _mark_dirs(self, paths: list[str]) -> None:
        with self._lock:
            for p in paths:
                self._dirty_dirs[p] = None
        self._wake.set()

    def _wanted(self, path: str) -> bool:
        """Under a root folder and accepted by `include` (the name test comes first: it is cheap)."""
        for root in self.roots:
            r = str(root)
            if path.startswith(r) and (len(path) == len(r) or path[len(r)] == os.sep):
                below = path[len(r) + 1 :].split(os.sep)[:-1]
                if any(part.startswith(".") for part in below):
                    return False  # a hidden folder under the root (.git, .ipynb_checkpoints, ...)
                break
        else:
            return False
        try:
            return bool(self.include(Path(path)))
        except Exception:  # a faulty filter must not kill the observer
            log.exception("include(%s) failed", path)
            return False

    def _report(self, message: str) -> None:
        if self.on_error is not None:
            try:
                self.on_error(message)
            except Exception:  # the consumer's bug must not stop the watcher
                log.exception("LogWatcher on_error failed")

    # ---- worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        next_rescan = 0.0  # the first pass is a full scan
        while True:
            now = time.monotonic()
            rescanning = now >= next_rescan
            if rescanning:
                self._rescan()
                walked = time.monotonic()
            read_before = self._bytes_read
            more = self._pass()
            if rescanning:
                self._park_idle()  # O(files): only with the periodic re-scan, not on every event
                # a huge tree must not make the safety net expensive: stretch the interval with what
                # the re-scan cost (the walk, plus the re-check pass unless it was busy reading data)
                end = time.monotonic()
                took = (end - now) if self._bytes_read == read_before else 2 * (walked - now)
                if not self.ready.is_set():
                    took = 0.0  # the first scan also stats and reads everything: not a steady cost
                next_rescan = end + max(self.rescan_interval, min(MAX_RESCAN_S, RESCAN_COST_FACTOR * took))
            if not more and not self.ready.is_set():
                self.ready.set()  # the backlog found by the first scan has been handed over
            with self._lock:
                if self._stopping:
                    return
            if more:
                continue  # a file still has data beyond this pass's budget
            pass_end = time.monotonic()
            self._wake.wait(max(0.0, next_rescan - pass_end))
            if self.min_interval:
                settle = self.min_interval - (time.monotonic() - pass_end)
                if settle > 0 and self._stop_event.wait(settle):
                    return
            self._wake.clear()
            with self._lock:
                if self._stopping:
                    return

    def _rescan(self) -> None:
        """Find files the events missed and re-check every known file."""
        self._ensure_watches()
        found: list[str] = []
        for root in self.roots:
            found.extend(self._scan(root))
        with self._lock:
            for p in found:
                self._dirty[p] = None
            for p in self._tails:
                self._dirty[p] = None
            for p in self._explicit:
                self._dirty[p] = None

    def _scan(self, root: Path) -> list[str]:
        """Candidate files under a root folder (or the root itself when it is a file)."""
        out: list[str] = []
        try:
            if root.is_file():
                return [str(root)] if self.include(root) else []
            if root.is_symlink() and root not in self.roots:  # a linked folder inside the tree: never entered
                return out
        except Exception:  # unreadable roots are skipped, the next re-scan retries
            return out
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                p = os.path.join(dirpath, name)
                if p not in self._tails and self._wanted(p):  # known files are re-checked anyway
                    out.append(p)
        return out

    def _pass(self) -> bool:
        """Scan new folders, read dirty files, call sink once. True if a file has more to read."""
        with self._lock:
            dirs = list(self._dirty_dirs)
            self._dirty_dirs.clear()
        found: list[str] = []
        for d in dirs:
            root = Path(d)
            if any(root == r or r in root.parents for r in self.roots):
                found.extend(self._scan(root))
        if dirs:
            # A new folder's watch can start after the scan of its parent already found (and read) its files:
            # a write between that scan and the watch makes no event. The folder is reported once its watch
            # exists, so reading its known files again here leaves no gap (reads resume at their offsets).
            below = tuple(d.rstrip(os.sep) + os.sep for d in dirs)
            found.extend(p for p in self._tails if p.startswith(below))
        with self._lock:
            for p in found:
                self._dirty[p] = None
            paths = list(self._dirty)
            self._dirty.clear()
        batches: list[LineBatch] = []
        budget = DRAIN_BUDGET
        leftover: list[str] = []
        for i, p in enumerate(paths):
            if budget <= 0:
                leftover.extend(paths[i:])
                break
            tail = self._tails.get(p)
            if tail is None:
                tail = self._tails[p] = FileTail(p)
            before = tail.bytes_read
            n_batches = len(batches)
            try:
                while budget - (tail.bytes_read - before) > 0:
                    batch = tail.read()
                    if batch is None:
                        break
                    batches.append(batch)
                else:
                    leftover.append(p)
            except Exception as exc:  # one unreadable file must not stop the others
                log.exception("reading %s failed", p)
                self._report(f"cannot read {p}: {_why(exc)}")
            budget -= tail.bytes_read - before
            self._bytes_read += tail.bytes_read - before
            if len(batches) > n_batches:
                self._tails[p] = self._tails.pop(p)  # most recently active last
        if leftover:
            with self._lock:
                for p in leftover:
                    self._dirty[p] = None
        if batches:
            try:
                self.sink(batches)
            except Exception:  # the consumer's bug must not stop the watcher
                log.exception("LogWatcher sink failed")
        return bool(leftover)

    def _park_idle(self) -> None:
        """Keep at most MAX_OPEN descriptors: release the files that have been quiet the longest."""
        if len(self._tails) <= MAX_OPEN:
            return
        open_tails = [t for t in self._tails.values() if t.is_open]
        for tail in open_tails[: max(0, len(open_tails) - MAX_OPEN)]:
            tail.release()

    # ---- observer watches -----------------------------------------------------------------------
    def _ensure_watches(self) -> None:
        """Watch each root folder (recursively) and the folder of each single-file root or add_file()."""
        for root in self.roots:
            if root.is_dir():
                self._watch(str(root), recursive=True)
            else:
                self._watch(str(root.parent), recursive=False)
        with self._lock:
            explicit = list(self._explicit)
        for p in explicit:
            self._watch(os.path.dirname(p), recursive=False)

    def _watch(self, folder: str, *, recursive: bool) -> None:
        key = (folder, recursive)
        observer = self._observer
        if observer is None or not os.path.isdir(folder):
            return
        with self._watch_lock:
            if key in self._watched:
                return
            try:
                observer.schedule(_Handler(self), folder, recursive=recursive, event_filter=_EVENTS)
            except Exception as exc:  # e.g. inotify watch limit: the periodic re-scan covers it
                log.warning("cannot watch %s; relying on the periodic re-scan", folder, exc_info=True)
                self._report(f"cannot watch {folder}: {_why(exc)} (new lines show up at the next re-scan)")
                return
            self._watched.add(key)


def _why(exc: BaseException) -> str:
    """The reason as a user reads it: `Permission denied`, not a traceback."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
