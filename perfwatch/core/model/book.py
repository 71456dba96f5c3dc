"""RunBook: every run under a LOGDIR, fed by line batches, keyed by a readable run id.

A LOGDIR is one of:
- a perfwatch logdir: `<run_id>/mllog.txt` (+ `output.log`) per run, run id = the folder's path;
- an MLPerf results tree at any level: `.../<benchmark>/result_N.txt`, run id = the path
  relative to LOGDIR without `.txt`;
- any folder of files holding `:::MLLOG` lines (or a single such file).

In a run folder `mllog.txt` is the source of records; `output.log` (the workload's stdout and
stderr) feeds the log tail, and its records are used only while the run has no `mllog.txt`
(a script that prints mllog to stdout), so nothing is counted twice.
"""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import msgspec

from perfwatch.core.ingest.discover import discover, open_regular
from perfwatch.core.ingest.mllog import DEFAULT_MAX_LINE, Bytes, last_lines
from perfwatch.core.layout import MLLOG_FILE, OUTPUT_FILE, is_log_name, is_meant_as_log, run_id_for
from perfwatch.core.mlperf.rulesets import StandsFor, choose
from perfwatch.core.mlperf.targets import Target
from perfwatch.core.model.run import Run, RunView

__all__ = ["RunBook", "discover", "iter_blocks", "load"]

LOG_TAIL_LINES = 200


class _Source(msgspec.Struct):
    run_id: str
    role: str  # "mllog", "output" or "file"


class RunBook(msgspec.Struct):
    """Runs by id; `apply` batches of lines on one thread, read `views()` anywhere after."""

    root: Path
    ruleset: str | None = None
    targets: Mapping[str, Target] = msgspec.field(default_factory=dict)
    stand_ins: Mapping[str, StandsFor] = msgspec.field(default_factory=dict)  # run id -> the campaign's `mlperf:`
    runs: dict[str, Run] = msgspec.field(default_factory=dict)
    tails: dict[str, deque[bytes]] = msgspec.field(default_factory=dict)  # raw: decoded when asked for
    _tail_text: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)  # decoded, until it grows
    _sources: dict[str, _Source | None] = msgspec.field(default_factory=dict)
    _has_mllog: set[str] = msgspec.field(default_factory=set)
    _order: list[str] = msgspec.field(default_factory=list)
    keep_tails: bool = True  # `load` (report, compare, package) shows no log tail: it keeps none

    def __post_init__(self) -> None:
        # watchers report absolute paths; run ids are paths relative to an absolute root
        self.root = Path(os.path.abspath(self.root))

    # ---- identity ------------------------------------------------------------
    def source_for(self, path: str) -> _Source | None:
        src = self._sources.get(path, False)
        if src is not False:
            return src  # type: ignore[return-value]
        src = self._classify(Path(path))
        self._sources[path] = src
        return src

    def _classify(self, path: Path) -> _Source | None:
        if not is_log_name(path):
            return None
        run_id = run_id_for(path, self.root)
        if path.name == MLLOG_FILE:
            return _Source(run_id, "mllog")
        return _Source(run_id, "output" if path.name == OUTPUT_FILE else "file")

    def _run(self, run_id: str, path: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            run = self._new_run(run_id, path)
            self.runs[run_id] = run
            self._order.append(run_id)
        return run

    def _new_run(self, run_id: str, path: str) -> Run:
        """A run judged by the option, else the path's version; else the Run infers from its log."""
        ruleset, why = self.ruleset, f"--ruleset {self.ruleset}"
        if not ruleset:
            chosen = choose(None, path)
            ruleset, why = (chosen.ruleset, chosen.why) if chosen.source == "path" else (None, "")
        return Run(run_id, path, target=self.targets.get(run_id), ruleset=ruleset, ruleset_why=why,
                   stands_for=self.stand_ins.get(run_id))

    # ---- ingest ----------------------------------------------------------------
    def apply(self, batches: Iterable[object]) -> set[str]:
        """Apply `LineBatch`es (path, lines, reset); returns the ids of runs that changed."""
        changed: set[str] = set()
        for batch in batches:
            path: str = _absolute(batch.path)  # type: ignore[attr-defined]
            lines: list[bytes] = batch.lines  # type: ignore[attr-defined]
            reset: bool = batch.reset  # type: ignore[attr-defined]
            src = self.source_for(path)
            if src is None:
                continue
            if self._feed(src, path, lines, reset):
                changed.add(src.run_id)
        return changed

    def feed_file(self, path: Path | str, data: Bytes, *, last: bool = False) -> str | None:
        """Static ingest of complete lines of a file, as one buffer: returns the run id if it held records.
        `last`: nothing more of this file follows (`LineParser.feed_block`)."""
        path = _absolute(path)
        src = self.source_for(path)
        if src is None:
            return None
        self._feed(src, path, data, False, last)
        return src.run_id if src.run_id in self.runs else None

    def _feed(self, src: _Source, path: str, lines: list[bytes] | Bytes, reset: bool, last: bool = False) -> bool:
        """`lines` as the tailer hands them over, or a buffer of complete lines read from disk (`bytes`)."""
        run_id = src.run_id
        if src.role == "output":
            self._tail(run_id, lines, reset)
            if run_id in self._has_mllog:
                return run_id in self.runs
            run = self.runs.get(run_id)
            if run is None:
                # only becomes a run if it carries records (or a launched run's mllog.txt appears)
                probe = self._new_run(run_id, path)
                if not _feed_run(probe, lines, last):
                    return True
                self.runs[run_id] = probe
                self._order.append(run_id)
                return True
            if reset:
                run.reset()
            _feed_run(run, lines, last)
            return True
        if src.role == "mllog" and run_id not in self._has_mllog:
            self._has_mllog.add(run_id)
            existing = self.runs.get(run_id)
            if existing is not None and existing.path != path:
                existing.reset()  # records came from output.log until now: switch source
            self._run(run_id, path).path = path
        if src.role == "file":
            run = self.runs.get(run_id)
            if run is None:
                probe = self._new_run(run_id, path)
                if not _feed_run(probe, lines, last):
                    # no record: a log by its name (result_*.txt) is reported with its bad lines; any other
                    # file (a .py or .pyc naming mllog, a pasted screenshot) is not a log
                    if probe.parser.bad_count and is_meant_as_log(path):
                        self._adopt(probe, path)
                        return True
                    return False
                self._adopt(probe, path)
                self._tail(run_id, lines, reset)
                return True
        else:
            run = self._run(run_id, path)
        if reset:
            run.reset()
        _feed_run(run, lines, last)
        if src.role == "file":
            self._tail(run_id, lines, reset)
        return True

    def _adopt(self, run: Run, path: str) -> None:
        self.runs[run.run_id] = run
        self._order.append(run.run_id)

    def _tail(self, run_id: str, lines: list[bytes] | Bytes, reset: bool) -> None:
        if not self.keep_tails:
            return
        tail = self.tails.get(run_id)
        if tail is None:
            tail = self.tails[run_id] = deque(maxlen=LOG_TAIL_LINES)
        elif reset:
            tail.clear()
        tail.extend(lines[-LOG_TAIL_LINES:] if isinstance(lines, list) else
                    [bytes(x) for x in last_lines(lines, LOG_TAIL_LINES)])
        self._tail_text.pop(run_id, None)

    # ---- views -------------------------------------------------------------------
    def get(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    def views(self) -> list[RunView]:
        return [self.runs[rid].view() for rid in self._order]

    def new_attempt(self, run_id: str) -> bool:
        """The run was restarted: its view begins empty (the earlier attempt's files were moved aside, and
        nothing of them may count for the new attempt). True if the run was known."""
        run = self.runs.get(run_id)
        tail = self.tails.get(run_id)
        if tail is not None:
            tail.clear()
            self._tail_text.pop(run_id, None)
        if run is None:
            return False
        run.reset()
        return True

    def finish(self, run_id: str) -> None:
        """The run's process has ended: its log is complete."""
        run = self.runs.get(run_id)
        if run is not None:
            run.finish()

    def log_tail(self, run_id: str) -> tuple[str, ...]:
        text = self._tail_text.get(run_id)
        if text is None:  # decoded once per change, not per block read nor per ask
            tail = self.tails.get(run_id)
            text = tuple(raw.rstrip(b"\r").decode("utf-8", errors="replace") for raw in tail) if tail else ()
            self._tail_text[run_id] = text
        return text


def _feed_run(run: Run, lines: list[bytes] | Bytes, last: bool) -> int:
    return run.feed_lines(lines) if isinstance(lines, list) else run.feed_block(lines, last=last)


def _absolute(path: Path | str) -> str:
    """The root is absolute; a path spelled relative or with `..` must be too, else no path is
    "under" the root and every `result_N.txt` of a tree collapses into one run `result_N`.
    `abspath`, not `resolve`: a tree opened through a symlink keeps the symlink's spelling."""
    return os.path.abspath(path)


READ_CHUNK = 1 << 18  # 256 KiB: a few thousand records parsed at a time stay in the CPU caches (P1)
WHOLE_FILE_MAX = 8 << 20  # a file smaller than 8 MiB (an MLPerf result file) is read and parsed in one go


def iter_blocks(
    path: Path | str, chunk: int = READ_CHUNK, whole: int = WHOLE_FILE_MAX, *, into: bytearray | None = None
) -> Iterator[Bytes]:
    """A file as buffers of complete lines (the last may lack its newline): one buffer when it is under
    `whole` bytes, else about `chunk` bytes each, so memory stays flat for huge logs; nothing is split
    into lines (`LineParser.feed_block`).

    `into`: a buffer to read such a whole file into, reused file after file (`load`): fresh memory costs
    a page fault per 4 KiB. Such a block is `into` itself, valid only until the next block is asked for."""
    with open_regular(path) as fh:
        read: Callable[[int], bytes] = fh.read
        utf16 = fh.read(2) in (b"\xff\xfe", b"\xfe\xff")
        if utf16:  # a UTF-16 log (BOM): read it as text, hand on UTF-8
            fh.seek(0)
            text = io.TextIOWrapper(fh, encoding="utf-16", errors="replace", newline="")
            read = lambda size: text.read(size).encode("utf-8")  # noqa: E731
        else:
            fh.seek(0)
        first = b""
        size = os.fstat(fh.fileno()).st_size
        if size < whole and into is not None and not utf16:
            if _read_into(fh, into, size) <= size:
                if into:
                    yield into
                return
            first = bytes(into)  # it grew since the fstat: carry on in blocks from a copy
        elif size < whole:  # one buffer of the file's size, nothing cut and joined again
            first = read(size + 1)
            if len(first) <= size:
                if first:
                    yield first
                return
            # it grew since the fstat: what was read is the first piece, the rest comes in blocks
        parts: list[bytes] = []  # the carried half line, in pieces: a huge line is joined once, not per chunk
        size = 0
        skipping = False  # past DEFAULT_MAX_LINE bytes of one line: its rest is dropped up to the newline
        while True:
            data, first = first or read(chunk), b""  # the first buffer is cut like the others
            if not data:
                break
            if skipping:
                end = data.find(b"\n")
                if end < 0:
                    continue
                data, skipping = data[end + 1 :], False
                if not data:
                    continue
            cut = data.rfind(b"\n") + 1
            if not cut:  # no newline in this chunk: the line goes on
                parts.append(data)
                size += len(data)
                if size >= DEFAULT_MAX_LINE:  # as FileTail: its first DEFAULT_MAX_LINE bytes, the rest dropped
                    yield b"".join(parts)[:DEFAULT_MAX_LINE]
                    parts, size, skipping = [], 0, True
                continue
            block = b"".join([*parts, data[:cut]]) if parts else data[:cut] if cut < len(data) else data
            rest = data[cut:]
            parts, size = ([rest], len(rest)) if rest else ([], 0)
            yield block
        if parts:
            yield b"".join(parts)  # a last line without newline: the file is complete, so count it


def _read_into(fh: BinaryIO, buf: bytearray, size: int) -> int:
    """Read up to `size` + 1 bytes into `buf`, grown as needed and cut to what was read."""
    need = size + 1
    if len(buf) < need:
        buf.extend(bytes(need - len(buf)))
    with memoryview(buf) as view, view[:need] as part:
        n = fh.readinto(part) or 0  # type: ignore[attr-defined]  # open_regular: a BufferedReader
    del buf[n:]
    return n


def load(root: Path | str, *, ruleset: str | None = None, stand_ins: Mapping[str, StandsFor] | None = None,
         targets: Mapping[str, Target] | None = None, progress: Callable[[int, int], None] | None = None) -> RunBook:
    """Read every log under `root` once (headless report/compare/package: no log tails kept);
    `stand_ins`, `targets`: a campaign's `mlperf:` and target per run (as the live view's book has them);
    `progress(done, total)`: called after each file."""
    root = Path(os.path.abspath(root))  # one spelling for the root and every path found under it
    book = RunBook(root.parent if root.is_file() else root, ruleset=ruleset, stand_ins=stand_ins or {},
                   targets=targets or {}, keep_tails=False)
    buffer = bytearray()  # one read buffer for every file: its memory is faulted in once
    paths = discover(root)
    for done, path in enumerate(paths, 1):
        if progress is not None:
            progress(done, len(paths))
        try:
            blocks = iter_blocks(path, into=buffer)
            block = next(blocks, None)
            while block is not None:
                # a look ahead says which block is the file's last; only a whole file lands in `buffer`,
                # and then nothing comes after it: the next() that ends the file reads nothing into it
                following = next(blocks, None)
                book.feed_file(path, block, last=following is None)
                block = following
        except OSError:
            continue
    for run in book.runs.values():
        run.finish()  # static files are complete: judge the end-of-run rules
    return book
