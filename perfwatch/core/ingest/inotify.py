"""A coalescing inotify observer: read the kernel's event queue at most once per interval.

watchdog's inotify observer turns every `write()` of a followed log into Python event objects
on its own thread, so a file written 1,000 times a second costs ~13 % of a core even when the
reader only looks twice a second. The kernel merges an event identical to the last unread one
(same watch, mask and name), so reading the queue once per `interval` turns those thousand
IN_MODIFY events into one. Used by `LogWatcher` when it is asked for coalesced reads
(`min_interval` > 0: the TUI, headless); `min_interval == 0` keeps watchdog for the lowest latency.

It offers the part of watchdog's observer API that `LogWatcher` uses (`schedule`, `start`,
`stop`, `join`, `daemon`) and dispatches watchdog event objects to the handler, so the handler
code is shared. Linux only (ctypes on libc); `available()` says whether it can be used.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import struct
import threading
from typing import Any

from watchdog.events import DirCreatedEvent, FileModifiedEvent

log = logging.getLogger(__name__)

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | \
    IN_DELETE_SELF | IN_MOVE_SELF
_HEADER = struct.Struct("iIII")
_READ_BYTES = 1 << 16

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        _libc = lib
    return _libc


def available() -> bool:
    try:
        return hasattr(_lib(), "inotify_init1")
    except OSError:
        return False


class CoalescingInotify:
    """See the module docstring. Thread-safe `schedule`; events go to the handlers on one thread."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.daemon = True
        fd = _lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self._fd = fd
        self._lock = threading.Lock()
        self._dirs: dict[int, str] = {}  # watch descriptor -> folder
        self._by_path: dict[str, int] = {}
        self._handlers: list[tuple[str, bool, Any]] = []  # (folder, recursive, handler)
        self._stop = threading.Event()
        # `stop` writes here: the reader sleeps in select() until the kernel or `stop` has something,
        # instead of waking twice a second to look at the stop flag
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread: threading.Thread | None = None

    # ---- watchdog-like API ------------------------------------------------------------------
    def schedule(self, handler: Any, path: str, recursive: bool = False, event_filter: Any = None) -> None:
        folder = os.path.abspath(path)
        with self._lock:
            self._handlers.append((folder, recursive, handler))
        self._add_tree(folder) if recursive else self._add(folder)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="perfwatch-inotify", daemon=self.daemon)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):  # full: a stop is pending anyway
                    os.write(self._wake_w, b"x")

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._thread is not None and self._thread.is_alive():
            return  # still reading: closing its descriptors now would race with its select()
        with self._lock:
            fds = (self._fd, self._wake_r, self._wake_w)
            self._fd = self._wake_r = self._wake_w = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    # ---- watches -------------------------------------------------------------------------------
    def _add(self, folder: str) -> None:
        with self._lock:
            if folder in self._by_path or self._fd < 0:
                return
            wd = _lib().inotify_add_watch(self._fd, os.fsencode(folder), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR):
                    return  # gone already; the watcher's re-scan notices
                raise OSError(err, f"inotify_add_watch {folder}: {os.strerror(err)}")
            self._dirs[wd] = folder
            self._by_path[folder] = wd

    def _add_tree(self, folder: str) -> None:
        self._add(folder)
        for dirpath, dirnames, _ in os.walk(folder, onerror=lambda e: None):
            for d in dirnames:
                self._add(os.path.join(dirpath, d))

    def _recursive(self, folder: str) -> bool:
        return any(r and (folder == f or folder.startswith(f + os.sep)) for f, r, _ in self._handlers)

    # ---- the reader ----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._fd, self._wake_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop.is_set():
                return
            if self._fd not in ready:
                continue
            events = self._drain()
            if events:
                self._dispatch(events)
            # let writes pile up as one merged event in the kernel's queue until the next read
            if self._stop.wait(self.interval):
                return

    def _drain(self) -> list[tuple[int, int, bytes]]:
        out: list[tuple[int, int, bytes]] = []  # names still raw: decoded once per distinct event
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return out
            except OSError:
                return out
            if not data:
                return out
            pos = 0
            while pos + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, pos)
                name = data[pos + _HEADER.size: pos + _HEADER.size + size].rstrip(b"\0")
                pos += _HEADER.size + size
                out.append((wd, mask, name))

    def _dispatch(self, events: list[tuple[int, int, bytes]]) -> None:
        seen: set[tuple[str, bool]] = set()
        # the kernel merges an event only with the last unread one: 16 files written in turn leave ~80
        # repeats of the same few (watch, mask, name) per read; they say nothing more than the first
        for wd, mask, raw in dict.fromkeys(events):
            name = os.fsdecode(raw)
            if mask & IN_Q_OVERFLOW:  # events were lost: every watched folder is looked at again
                with self._lock:
                    folders = [f for f, _, _ in self._handlers]
                for f in folders:
                    seen.add((f, True))
                continue
            with self._lock:
                folder = self._dirs.get(wd)
                if mask & IN_IGNORED and folder is not None:
                    self._dirs.pop(wd, None)
                    self._by_path.pop(folder, None)
                    continue
            if folder is None:
                continue
            path = os.path.join(folder, name) if name else folder
            if mask & IN_ISDIR:
                if mask & (IN_CREATE | IN_MOVED_TO):
                    if self._recursive(path):
                        try:
                            self._add_tree(path)
                        except OSError:
                            log.warning("cannot watch %s; relying on the periodic re-scan", path)
                    seen.add((path, True))
                continue
            if name:
                seen.add((path, False))
        batches: dict[int, tuple[Any, list[str]]] = {}  # handler -> its changed files, for one call
        for path, is_dir in seen:
            event: DirCreatedEvent | FileModifiedEvent | None = None
            for folder, recursive, handler in list(self._handlers):
                parent = path if is_dir else os.path.dirname(path)
                if parent == folder or (recursive and parent.startswith(folder + os.sep)) or \
                        (is_dir and path.startswith(folder + os.sep) and recursive):
                    if not is_dir and hasattr(handler, "on_files_modified"):
                        batches.setdefault(id(handler), (handler, []))[1].append(path)
                        continue
                    if event is None:
                        event = DirCreatedEvent(path) if is_dir else FileModifiedEvent(path)
                    try:
                        handler.dispatch(event)
                    except Exception:  # a handler's bug must not stop the observer
                        log.exception("inotify handler failed")
        for handler, paths in batches.values():  # one call (one lock, one wake-up) per handler and read
            try:
                handler.on_files_modified(paths)
            except Exception:
                log.exception("inotify handler failed")
