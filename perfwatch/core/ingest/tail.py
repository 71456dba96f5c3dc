"""Incremental reader of one growing log file: new complete lines per read, nothing lost or doubled.

(Also `last_lines`: the last lines of a file read from its end, for "what did the run print last".)

A workload writes its mllog file while perfwatch reads it, so a read can end in the middle of a line:
the partial line is kept and only handed out once its newline arrives. Files also get truncated
(copy-truncate), replaced (rotation by rename, delete + recreate) or vanish. `FileTail` keeps its own
file descriptor on the file it is reading, so when the path starts naming another file it can still
read the rest of the old one before switching; a replaced or truncated file is then read from its start
and its first batch carries `reset=True` so the consumer knows to drop that file's state.

Identity is the (device, inode) pair of our open descriptor, compared with `os.stat(path)` on each
read. Because we hold the old file open, its inode cannot be reused by the new file while we compare.
Truncation is a size below our offset; a truncation followed by a rewrite past our offset is caught by
comparing the first bytes of the file with what we read there (`HEAD_BYTES`).

Limits (inherent to tailing): lines appended and then truncated away before we read them are gone, and
a file created and deleted between two reads is never seen.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import msgspec

from perfwatch.core.ingest.discover import open_regular
from perfwatch.core.ingest.mllog import DEFAULT_MAX_LINE

HEAD_BYTES = 256  # fingerprint of the file's start; a mismatch means the file was rewritten in place
DEFAULT_CHUNK = 1 << 20  # bytes per os.pread call
DEFAULT_MAX_BATCH = 4 << 20  # bytes of complete lines handed out per read(), so huge files stream
_RESTART: list[bytes] = []  # sentinel from _pull: the file was rewritten, read it again from byte 0


class LineBatch(msgspec.Struct, frozen=True):
    """Complete lines (without `\\n`) of one file from one read.

    `reset=True`: the file was truncated or replaced and `lines` start at the new file's first line;
    the consumer drops what it derived from this path before applying them.
    """

    path: str
    lines: list[bytes]
    reset: bool


class FileTail:
    """Follow one path across truncation, rotation and deletion; not thread-safe (one reader thread).

    `read()` returns one batch at most `max_batch` bytes long, or None when nothing new is complete;
    call it until it returns None to drain everything (`read_all()` does that).
    """

    __slots__ = (
        "path",
        "chunk_size",
        "max_batch",
        "max_line",
        "bytes_read",
        "_fd",
        "_ident",
        "_offset",
        "_buf",
        "_skipping",
        "_head",
        "_draining",
        "_reset_next",
        "_opened_before",
        "_parked",
        "_mtime_ns",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        chunk_size: int = DEFAULT_CHUNK,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        self.path = os.fspath(path)
        self.chunk_size = max(1, chunk_size)
        self.max_batch = max(1, max_batch)
        self.max_line = max(1, max_line)
        self.bytes_read = 0  # total bytes consumed over all generations (for callers' budgets)
        self._fd: int | None = None
        self._ident: tuple[int, int] = (0, 0)
        self._offset = 0  # file position after the bytes consumed (complete lines + _buf)
        self._buf = b""  # partial last line
        self._skipping = False  # past max_line bytes of one line: drop the rest of it, up to its newline
        self._head = b""  # first HEAD_BYTES of the current generation, as we read them
        self._draining = False  # the path names another file (or none): finish ours, then switch
        self._reset_next = False  # the next batch handed out starts a new generation
        self._opened_before = False
        self._parked = False  # fd released to save descriptors; resume if the path is still our file
        self._mtime_ns = -1  # mtime seen just before the last read: unchanged stat -> nothing new

    # ---- public -----------------------------------------------------------------------------------
    def read(self) -> LineBatch | None:
        """The next complete lines since the last read, or None if there are none (or no file).

        A truncated or replaced file that has no complete line yet gives one empty batch with
        reset=True, so the consumer still learns that the old content is gone.
        """
        if self._unchanged():
            return None
        for _ in range(6):  # at most: drain old -> close -> open new -> restart after a rewrite
            if self._fd is None and not self._open():
                return None
            if not self._draining:
                self._check_identity()
            if self._draining:
                if not self._check_truncation():
                    continue  # truncated before it was replaced: what it holds now is new content
                lines = self._pull(final=True)
                if lines is _RESTART or lines is None:
                    self._close_fd()
                    continue
                return self._batch(lines)
            if not self._check_truncation():
                continue
            lines = self._pull(final=False)
            if lines is _RESTART:
                continue
            if lines is None:
                return self._batch([]) if self._reset_next else None
            return self._batch(lines)
        return None

    def read_all(self) -> list[LineBatch]:
        """Every batch available now (the whole backlog of a large file, in `max_batch` pieces)."""
        out: list[LineBatch] = []
        while (batch := self.read()) is not None:
            out.append(batch)
        return out

    def close(self) -> None:
        """Release the file descriptor; a later read() starts over (with reset=True)."""
        self._parked = False
        self._close_fd()

    def release(self) -> bool:
        """Close the descriptor but keep the position, to follow thousands of mostly idle files.

        The next read() reopens the path and carries on if it is still the same file (same inode and
        first bytes); otherwise it reads the new file from its start with reset=True. What a parked
        file gained before being replaced cannot be drained any more, so release only idle files.
        Returns False (and keeps the descriptor) while an old file is being drained.
        """
        if self._fd is None or self._draining:
            return self._fd is None
        fd, self._fd = self._fd, None
        self._parked = True
        with contextlib.suppress(OSError):
            os.close(fd)
        return True

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FileTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileTail({self.path!r}, offset={self._offset}, open={self._fd is not None})"

    # ---- generations ------------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            # O_NONBLOCK: opening a FIFO named like a log must not block (it is then refused as not regular)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return False
        if not _is_regular(st.st_mode):
            os.close(fd)  # a directory or FIFO under a log name: nothing to tail
            return False
        self._fd = fd
        ident = (st.st_dev, st.st_ino)
        if self._parked and ident == self._ident:
            self._parked = False  # same file as before release(): carry on where we were
            return True
        self._parked = False
        self._ident = ident
        self._mtime_ns = -1
        self._offset = 0
        self._buf = b""
        self._skipping = False
        self._head = b""
        self._draining = False
        if self._opened_before:
            self._reset_next = True
        self._opened_before = True
        return True

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        self._draining = False
        self._buf = b""
        self._skipping = False
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _unchanged(self) -> bool:
        """Cheap idle check (one stat, no open): same file, same size as read, same mtime."""
        if self._draining or self._reset_next or (self._fd is None and not self._parked):
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (
            st.st_size == self._offset
            and st.st_mtime_ns == self._mtime_ns
            and (st.st_dev, st.st_ino) == self._ident
        )

    def _check_identity(self) -> None:
        """Start draining when the path is gone or names another file."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._draining = True
            return
        if (st.st_dev, st.st_ino) != self._ident:
            self._draining = True
        else:
            self._mtime_ns = st.st_mtime_ns  # taken before reading: a write during the read changes it

    def _check_truncation(self) -> bool:
        """False (and the generation restarted) when our file shrank or its first bytes changed."""
        assert self._fd is not None
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            return True  # let the read report nothing; identity is checked again next time
        if size < self._offset or (self._offset and self._head_changed()):
            self._restart()
            return False
        return True

    def _restart(self) -> None:
        """Same file, new content: read it again from byte 0 as a new generation.

        The partial line we held is dropped: its end was truncated away before we could read it.
        """
        self._offset = 0
        self._buf = b""
        self._skipping = False
        self._head = b""
        self._reset_next = True

    def _head_changed(self) -> bool:
        if not self._head or self._fd is None:
            return False
        try:
            now = os.pread(self._fd, len(self._head), 0)
        except OSError:
            return False
        return now != self._head

    # ---- bytes -> lines ---------------------------------------------------------------------------
    def _pull(self, *, final: bool) -> list[bytes] | None:
        """Read up to max_batch bytes of complete lines; `final`: the file will not grow, flush its tail.

        Returns None when no line is complete, `_RESTART` when the file was rewritten under us.
        """
        fd = self._fd
        assert fd is not None
        if self._skipping and not self._skip(fd):
            return None
        start = self._offset
        chunks: list[bytes] = []
        got = 0
        newline_seen = False
        eof = False
        while True:
            try:
                data = os.pread(fd, self.chunk_size, start + got)
            except OSError:
                return None  # transient I/O error: keep our state, try again on the next read
            if not data:
                eof = True
                break
            chunks.append(data)
            got += len(data)
            if not newline_seen:
                newline_seen = b"\n" in data
            if got >= self.max_batch and (newline_seen or len(self._buf) + got >= self.max_line):
                break
        if got and start and not final and self._head_changed():
            self._restart()  # rewritten while we read: never hand out a mix of old and new content
            return _RESTART
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if start == len(self._head) < HEAD_BYTES:
            self._head += raw[: HEAD_BYTES - start]
        self._offset = start + got
        self.bytes_read += got
        data = self._buf + raw if self._buf else raw
        cut = data.rfind(b"\n")
        if cut < 0:
            lines, rest = [], data
        else:
            lines, rest = data[:cut].split(b"\n"), data[cut + 1 :]
        if len(rest) >= self.max_line:
            # no newline for max_line bytes: its first max_line bytes are handed out as the line, the rest
            # up to its newline is dropped; memory per file stays under max_line + max_batch
            lines.append(rest[: self.max_line])
            rest, self._skipping = b"", True
        if final and eof and rest:
            lines.append(rest)  # the file is finished: its last line needs no newline
            rest = b""
        self._buf = rest
        return lines or None

    def _skip(self, fd: int) -> bool:
        """Drop the rest of an over-long line a chunk at a time, never holding it; True once its newline
        was passed, False when the file ends first (the next read goes on dropping)."""
        while True:
            try:
                data = os.pread(fd, self.chunk_size, self._offset)
            except OSError:
                return False
            if not data:
                return False
            end = data.find(b"\n")
            used = len(data) if end < 0 else end + 1
            if self._offset == len(self._head) < HEAD_BYTES:
                self._head += data[: min(used, HEAD_BYTES - self._offset)]
            self._offset += used
            self.bytes_read += used
            if end >= 0:
                self._skipping = False
                return True

    def _batch(self, lines: list[bytes]) -> LineBatch:
        reset, self._reset_next = self._reset_next, False
        return LineBatch(self.path, lines, reset)


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


# ---- the end of a file, once (a run's last output lines) -----------------------------------------------------
def last_lines(path: Path, n: int = 20, max_bytes: int = 16384) -> tuple[str, ...]:
    """The last `n` lines of a file, reading at most `max_bytes` from its end."""
    try:
        with open_regular(path) as fh:  # a FIFO named output.log must not hang the view
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)  # not to the end: the file may be growing
    except OSError:
        return ()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # first one is probably cut
    return tuple(lines[-n:])


_LAST: dict[Path, tuple[tuple[int, int], tuple[str, ...]]] = {}


def cached_last_lines(path: Path, n: int = 20) -> tuple[str, ...]:
    """`last_lines`, re-read only when size or mtime changed (controllers' procs() run at 4 Hz)."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    key = (st.st_size, st.st_mtime_ns)
    hit = _LAST.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    lines = last_lines(path, n)
    if len(_LAST) > 4096:
        _LAST.clear()
    _LAST[path] = (key, lines)
    return lines
