"""MLPerf `mllog` line parser: raw bytes lines in, typed `Event`s out.

Accepts what `mlperf_logging.mllog` writes and what real result files contain:
anything before the `:::MLLOG` token (rank numbers, timestamps, `4063:` line
numbers), shell noise between records, CRLF, latin-1 or invalid UTF-8, dict
and null values, very long lines. Like MLPerf's own parser, the *last*
`:::MLLOG ` token on a line starts the record.

A line that carries the token but does not decode into a record is *bad*: it is
counted with its line number and kept (bounded) so a user can look at it; it is
never raised. Lines without the token are *noise* and only counted.

The hot path decodes straight into a `msgspec.Struct`, which is faster than a
bare `json.loads` into dicts; see `benchmarks/ingest.py` (P1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec

TOKEN = b":::MLLOG "
TOKEN_LEN = len(TOKEN)
TOKEN_STR = TOKEN.decode()
MAX_KEPT_BAD = 200
# the most bytes of one line kept (the tailer, the static reader): a longer line is cut there, so a file
# without newlines cannot eat memory; an mllog record is a few hundred bytes, the longest (a
# hyperparameter dump, a submission's system description) a few KB
DEFAULT_MAX_LINE = 1 << 20
MAX_BAD_TEXT = 2000
# a log's raw bytes: `bytes`, or the read buffer `load` reuses file after file (model.book.iter_blocks);
# nothing keeps a bytearray handed in: what is kept (records, bad lines) is sliced off it, i.e. copied
Bytes = bytes | bytearray
DENSITY_SAMPLE = 4 << 10  # feed_block judges a buffer's share of records on three 4 KiB windows


class Event(msgspec.Struct, gc=False):
    """One mllog record, exactly the fields `mlperf_logging.mllog` writes."""

    time_ms: float
    key: str
    value: Any = None
    event_type: str = "POINT_IN_TIME"
    namespace: str = ""
    # left undecoded by the parser (most records' metadata is never read); read it through `md` /
    # `meta()`. Code that builds events may pass a dict.
    metadata: msgspec.Raw = msgspec.Raw(b"null")

    @property
    def md(self) -> dict[str, Any] | None:
        """The metadata as a dict (None when absent or not an object)."""
        m = self.metadata
        if type(m) is msgspec.Raw:
            try:
                m = _any_decoder.decode(m)
            except Exception:
                return None
            self.metadata = m  # decoded once: the run model and the compliance checks both read it
        return m if isinstance(m, dict) else None

    def meta(self, name: str, default: Any = None) -> Any:
        md = self.md
        if md is None:
            return default
        return md.get(name, default)


class BadLine(msgspec.Struct, frozen=True):
    """A line that had the MLLOG token but no valid record; text is truncated for display."""

    lineno: int
    reason: str
    text: str


_decoder = msgspec.json.Decoder(Event)
_any_decoder = msgspec.json.Decoder()


def _reason(exc: Exception) -> str:
    msg = str(exc)
    return msg if len(msg) <= 200 else msg[:197] + "..."


class LineParser:
    """Stateful per-file parser: keeps line numbers, noise/bad counters and the bad lines."""

    __slots__ = ("lineno", "records", "noise", "bad_count", "bad", "non_utf8")

    def __init__(self) -> None:
        self.lineno = 0  # number of complete lines consumed so far
        self.records = 0
        self.noise = 0
        self.bad_count = 0
        self.non_utf8 = 0
        self.bad: deque[BadLine] = deque(maxlen=MAX_KEPT_BAD)

    def reset(self) -> None:
        """Start numbering again (the file was truncated or replaced)."""
        self.lineno = 0

    def feed(self, lines: Sequence[Bytes]) -> list[Event]:
        """Parse a batch of complete lines (without their `\\n`)."""
        out: list[Event] = []
        append = out.append
        decode = _decoder.decode
        noise = 0
        # fast path: no line index kept; every line so far was a record or noise
        for line in lines:
            i = line.rfind(TOKEN)
            if i < 0:
                noise += 1
                continue
            try:
                append(decode(line[i + TOKEN_LEN :]))
            except Exception:  # DecodeError, ValidationError, UnicodeDecodeError: never raise
                break
        else:
            return self._done(out, noise, len(lines))
        # a line failed: carry on from it with line numbers (bad lines are counted with theirs)
        base = self.lineno + 1
        for idx in range(len(out) + noise, len(lines)):
            line = lines[idx]
            i = line.rfind(TOKEN)
            if i < 0:
                noise += 1
                continue
            try:
                append(decode(line[i + TOKEN_LEN :]))
            except Exception as exc:
                ev = self._salvage(line, i, base + idx, exc)
                if ev is not None:
                    append(ev)
        return self._done(out, noise, len(lines))

    def feed_block(self, data: Bytes, *, last: bool = False) -> list[Event]:
        """Parse complete lines handed over as one buffer, as a file is read (the last line may lack its
        newline). Same result as `feed(split_lines(data))`; when most lines are noise (MLPerf result
        files are often nine-tenths framework chatter) they are skipped in C: no line object is made
        and nothing is searched per line. A record that does not decode sends the block through
        `feed`, which keeps line numbers for bad lines.

        `last`: nothing follows this buffer (a whole file read once: `model.book.load`). Its noise lines
        are then not counted (it would be one more pass over the buffer); the count only numbers a later
        block's bad lines, so `lineno` and `noise` leave them out."""
        if _mostly_records(data):  # one split beats three searches per record
            return self.feed(split_lines(data))
        n = -1 if last else data.count(b"\n") + (1 if data and data[-1:] != b"\n" else 0)
        out: list[Event] = []
        append = out.append
        decode = _decoder.decode
        find = data.find
        end = len(data)
        i = find(TOKEN)
        try:
            while i >= 0:
                nl = find(b"\n", i)
                if nl < 0:
                    nl = end
                later = data.rfind(TOKEN, i + TOKEN_LEN, nl)  # the last token on a line starts the record
                if later >= 0:
                    i = later
                append(decode(data[i + TOKEN_LEN : nl]))
                i = find(TOKEN, nl)
        except Exception:  # DecodeError, ValidationError, UnicodeDecodeError: the careful path
            return self.feed(split_lines(data))
        if n < 0:  # `last`: not counted
            return self._done(out, 0, 0)
        return self._done(out, n - len(out), n)

    def _done(self, out: list[Event], noise: int, n: int) -> list[Event]:
        self.records += len(out)
        self.noise += noise
        self.lineno += n
        return out

    def _salvage(self, line: Bytes, i: int, lineno: int, exc: Exception) -> Event | None:
        """Second chance for non-UTF-8 bytes (read as latin-1, as MLPerf's parser does)."""
        payload = line[i + TOKEN_LEN :]
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            try:
                ev = _decoder.decode(payload.decode("latin-1").encode("utf-8"))
            except Exception as exc2:
                exc = exc2
            else:
                self.non_utf8 += 1
                return ev
        self.bad_count += 1
        text = line[:MAX_BAD_TEXT].decode("utf-8", errors="replace")
        self.bad.append(BadLine(lineno, _reason(exc), text))
        return None


def _mostly_records(data: Bytes) -> bool:
    """More than a quarter of the lines carry a record, judged at the start, middle and end of the buffer
    rather than over all of it (a result file's first kilobytes are its dense header, then framework
    output follows)."""
    w = DENSITY_SAMPLE
    mid = max(len(data) // 2 - w // 2, 0)
    windows = (data[:w], data[mid : mid + w], data[-w:]) if len(data) > 3 * w else (data,)
    return sum(x.count(TOKEN) for x in windows) * 4 > sum(x.count(b"\n") for x in windows)


def split_lines(data: Bytes) -> Sequence[Bytes]:
    """A buffer's lines without their newlines (a last line without newline counts)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def last_lines(data: Bytes, n: int) -> Sequence[Bytes]:
    """`split_lines(data)[-n:]` without splitting the whole buffer."""
    parts = data.rsplit(b"\n", n + 1)
    if parts and parts[-1] == b"":
        parts.pop()
    return parts[-n:] if n else []


def parse_bytes(data: bytes) -> tuple[list[Event], LineParser]:
    """Parse a whole file's contents at once (complete or not: a last line without newline counts)."""
    parser = LineParser()
    return parser.feed_block(data), parser


def parse_path(path: str) -> tuple[list[Event], LineParser]:
    from perfwatch.core.ingest.discover import open_regular

    with open_regular(path) as fh:
        return parse_bytes(fh.read())


def dumps(event: Event) -> str:
    """One line in the exact `mlperf_logging.mllog` layout (key order included)."""
    body = {
        "namespace": event.namespace,
        "time_ms": int(event.time_ms) if float(event.time_ms).is_integer() else event.time_ms,
        "event_type": event.event_type,
        "key": event.key,
        "value": event.value,
        "metadata": event.md or {},
    }
    return TOKEN_STR + msgspec.json.encode(body).decode()
