"""FileTail: what a user tailing a live log must get — every complete line once, in order, whatever
the writer or logrotate does to the file (DESIGN §6 R2)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from perfwatch.core.ingest.mllog import LineParser
from perfwatch.core.ingest.tail import FileTail, LineBatch


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def lines_of(batches: list[LineBatch]) -> list[bytes]:
    return [line for b in batches for line in b.lines]


def test_partial_line_is_held_until_its_newline(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    append(p, b"one\ntw")
    tail = FileTail(p)
    assert lines_of(tail.read_all()) == [b"one"]
    append(p, b"o")
    assert tail.read() is None  # still no newline: nothing to hand out
    append(p, b"\nthree\n")
    batches = tail.read_all()
    assert lines_of(batches) == [b"two", b"three"]
    assert not any(b.reset for b in batches)
    assert tail.read() is None
    tail.close()


def test_one_read_returns_all_new_lines_in_one_batch(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"".join(b"%d\n" % i for i in range(1000)))
    tail = FileTail(p)
    batch = tail.read()
    assert batch is not None and len(batch.lines) == 1000 and batch.lines[-1] == b"999"
    assert batch.path == str(p) and batch.reset is False
    tail.close()


def test_crlf_and_non_utf8_bytes_pass_through(tmp_path: Path) -> None:
    p = tmp_path / "result_0.txt"
    raw = [b"\xff\xfe garbage \x80", b':::MLLOG {"key": "x"}\r', b"caf\xe9 latin-1"]
    p.write_bytes(b"\n".join(raw) + b"\n")
    tail = FileTail(p)
    got = lines_of(tail.read_all())
    assert got == raw  # byte-exact; the CR stays for the parser, which tolerates it
    tail.close()


def test_crlf_mllog_lines_parse(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    rec = (
        b':::MLLOG {"namespace": "", "time_ms": 5, "event_type": "POINT_IN_TIME", "key": "seed", "value": 3}'
    )
    p.write_bytes(rec + b"\r\n" + rec + b"\r\n")
    tail = FileTail(p)
    events = LineParser().feed(lines_of(tail.read_all()))
    assert [(e.key, e.value) for e in events] == [("seed", 3), ("seed", 3)]
    tail.close()


def test_a_ten_megabyte_line_is_cut_at_max_line_and_its_rest_dropped(tmp_path: Path) -> None:
    """The tail keeps at most DEFAULT_MAX_LINE (1 MiB) of one line: it hands out that much and drops the
    rest up to the newline a chunk at a time, so the next line arrives intact and nothing big is held."""
    from perfwatch.core.ingest.mllog import DEFAULT_MAX_LINE

    p = tmp_path / "mllog.txt"
    big = bytes(range(256)).replace(b"\n", b"") * (41 << 10)  # ~10 MB, no newline
    tail = FileTail(p, chunk_size=1 << 20, max_batch=1 << 20)
    append(p, b"before\n" + big[: 6 << 20])
    got = lines_of(tail.read_all())
    assert got == [b"before", big[:DEFAULT_MAX_LINE]]
    append(p, big[6 << 20 :] + b"\nafter\n")
    assert lines_of(tail.read_all()) == [b"after"]
    tail.close()


def test_huge_file_streams_in_bounded_batches(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    want = [b"line %06d" % i for i in range(50_000)]
    p.write_bytes(b"\n".join(want) + b"\n")
    tail = FileTail(p, chunk_size=4096, max_batch=64 << 10)
    batches = tail.read_all()
    assert len(batches) > 5  # not one giant batch
    assert all(sum(len(x) + 1 for x in b.lines) <= (64 << 10) + 4096 + 16 for b in batches)
    assert lines_of(batches) == want
    tail.close()


def test_missing_file_returns_none_until_it_appears(tmp_path: Path) -> None:
    p = tmp_path / "later" / "mllog.txt"
    tail = FileTail(p)
    assert tail.read() is None
    p.parent.mkdir()
    p.write_bytes(b"a\n")
    batch = tail.read()
    assert batch is not None and batch.lines == [b"a"] and batch.reset is False
    tail.close()


def test_directory_or_unreadable_path_does_not_crash(tmp_path: Path) -> None:
    d = tmp_path / "mllog.txt"
    d.mkdir()
    tail = FileTail(d)
    assert tail.read() is None
    tail.close()


def test_truncation_rereads_from_start_with_reset(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n2\n3\n")
    tail = FileTail(p)
    assert lines_of(tail.read_all()) == [b"1", b"2", b"3"]
    with open(p, "r+b") as f:
        f.truncate(0)
    batch = tail.read()
    assert batch == LineBatch(str(p), [], True)  # the consumer learns the content is gone
    assert tail.read() is None
    append(p, b"4\n")
    assert tail.read_all() == [LineBatch(str(p), [b"4"], False)]
    tail.close()


def test_truncate_and_rewrite_past_old_offset_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"old 1\nold 2\n")
    tail = FileTail(p)
    assert lines_of(tail.read_all()) == [b"old 1", b"old 2"]
    p.write_bytes(b"new 1\nnew 2\nnew 3 longer than before\n")  # same inode, truncated then longer
    batches = tail.read_all()
    assert batches[0].reset is True
    assert lines_of(batches) == [b"new 1", b"new 2", b"new 3 longer than before"]
    tail.close()


def test_rotation_by_rename_drains_old_file_then_reads_new(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n2\n")
    tail = FileTail(p)
    assert lines_of(tail.read_all()) == [b"1", b"2"]
    append(p, b"3\n4")  # unread when rotated; the last line even lacks its newline
    os.rename(p, tmp_path / "mllog.txt.1")
    p.write_bytes(b"5\n")
    batches = tail.read_all()
    assert [(b.lines, b.reset) for b in batches] == [([b"3", b"4"], False), ([b"5"], True)]
    tail.close()


def test_rename_without_new_file_then_new_file(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n")
    tail = FileTail(p)
    tail.read_all()
    append(p, b"2\n")
    os.rename(p, tmp_path / "old.txt")
    assert lines_of(tail.read_all()) == [b"2"]
    assert tail.read() is None
    p.write_bytes(b"3\n")
    assert tail.read_all() == [LineBatch(str(p), [b"3"], True)]
    tail.close()


def test_delete_and_recreate(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n")
    tail = FileTail(p)
    tail.read_all()
    append(p, b"2\n")
    p.unlink()
    p.write_bytes(b"a\nb\n")
    batches = tail.read_all()
    assert [(b.lines, b.reset) for b in batches] == [([b"2"], False), ([b"a", b"b"], True)]
    tail.close()


def test_copy_truncate(tmp_path: Path) -> None:
    p = tmp_path / "output.log"
    p.write_bytes(b"1\n2\n")
    tail = FileTail(p)
    tail.read_all()
    shutil.copyfile(p, tmp_path / "output.log.1")
    with open(p, "r+b") as f:
        f.truncate(0)
    append(p, b"3\n")
    batches = tail.read_all()
    assert [(b.lines, b.reset) for b in batches] == [([b"3"], True)]
    tail.close()


def test_truncated_then_rotated_before_read(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n2\n3\n")
    tail = FileTail(p)
    tail.read_all()
    with open(p, "r+b") as f:
        f.truncate(0)
    append(p, b"4\n")
    os.rename(p, tmp_path / "mllog.txt.1")
    p.write_bytes(b"5\n")
    batches = tail.read_all()
    assert lines_of(batches) == [b"4", b"5"]
    assert batches[0].reset is True and batches[-1].reset is True
    tail.close()


def test_released_tail_resumes_or_resets(tmp_path: Path) -> None:
    p = tmp_path / "mllog.txt"
    p.write_bytes(b"1\n")
    tail = FileTail(p)
    tail.read_all()
    assert tail.release() and not tail.is_open
    append(p, b"2\n")
    assert tail.read_all() == [LineBatch(str(p), [b"2"], False)]  # same file: carry on
    tail.release()
    p.unlink()
    p.write_bytes(b"x\n")
    assert tail.read_all() == [LineBatch(str(p), [b"x"], True)]  # another file: start over
    tail.close()


# ---- R2: a writer, a saboteur and a reader at the same time ------------------------------------


class _Writer:
    """Appends numbered lines in two writes each (so the reader sees half lines) to `path`.

    After every `every` lines it waits until the saboteur has done its step, so the number of
    sabotage steps is fixed, whatever the scheduling.
    """

    def __init__(self, path: Path, every: int) -> None:
        self.path = path
        self.every = every
        self.lock = threading.Lock()  # held for each line and for each sabotage step
        self.steps = threading.Condition()
        self.steps_done = 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.written = 0
        self.inode_first = 0  # number of the first line written to the current inode

    def reopen(self) -> None:
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.inode_first = self.written

    def write_all(self, total: int) -> None:
        for i in range(total):
            line = b"line %07d %s\n" % (i, b"p" * (i % 97))
            with self.lock:
                os.write(self.fd, line[:7])
                os.write(self.fd, line[7:])
                self.written = i + 1
            if self.written % self.every == 0 and self.written < total:
                step = self.written // self.every
                with self.steps:
                    assert self.steps.wait_for(self._steps_reached(step), 30), "saboteur stuck"

    def _steps_reached(self, step: int) -> Callable[[], bool]:
        return lambda: self.steps_done >= step


class _Reader(threading.Thread):
    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.tail = FileTail(path, chunk_size=512, max_batch=2048)
        self.got: list[int] = []
        self.resets = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for batch in self.tail.read_all():
                self.resets += batch.reset
                self.got.extend(int(line.split()[1]) for line in batch.lines)
            time.sleep(0.0002)
        self.tail.close()


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline, f"reader never caught up: {what}"
        time.sleep(0.0002)


def _written(writer: _Writer, n: int) -> Callable[[], bool]:
    return lambda: writer.written >= n


def _seen_from(seen: list[int], first: int) -> Callable[[], bool]:
    return lambda: bool(seen) and seen[-1] >= first


def _seen_count(seen: list[int], n: int) -> Callable[[], bool]:
    return lambda: len(seen) >= n


def sabotage(path: Path, writer: _Writer, seen: list[int], total: int) -> int:
    """Rotate / truncate / delete+recreate / copy-truncate `path` every `writer.every` lines.

    The expected output is then exactly every line, once, in order: a rotated or deleted file is
    replaced only once the reader holds it open (it has received a line written to it), so its unread
    tail can still be drained; a file is truncated only once the reader has every line in it, because
    lines truncated away unread are gone for any tail. Returns the number of steps done.
    """
    ops = ("rename", "truncate", "delete", "copytruncate")
    steps = (total - 1) // writer.every
    for k in range(1, steps + 1):
        _wait(_written(writer, k * writer.every), "writer")
        op = ops[(k - 1) % len(ops)]
        with writer.lock:
            if op in ("rename", "delete"):
                _wait(_seen_from(seen, writer.inode_first), f"{op} #{k}")
                if op == "rename":
                    os.rename(path, path.with_name(f"{path.name}.{k}"))
                else:
                    path.unlink()
                writer.reopen()
            else:
                _wait(_seen_count(seen, writer.written), f"{op} #{k}")
                if op == "copytruncate":
                    shutil.copyfile(path, path.with_name(f"{path.name}.{k}"))
                os.truncate(path, 0)
        with writer.steps:
            writer.steps_done = k
            writer.steps.notify_all()
    return steps


def run_r2(path: Path, seen: list[int], total: int, every: int) -> int:
    """Write `total` numbered lines to `path` while a second thread sabotages it; returns the steps."""
    writer = _Writer(path, every)
    result: list[int] = []
    errors: list[BaseException] = []

    def chaos() -> None:
        try:
            result.append(sabotage(path, writer, seen, total))
        except BaseException as exc:  # surface the saboteur's assertion in the test
            errors.append(exc)
            with writer.steps:
                writer.steps_done = total
                writer.steps.notify_all()

    saboteur = threading.Thread(target=chaos, daemon=True)
    saboteur.start()
    try:
        writer.write_all(total)
        saboteur.join(60)
        assert not saboteur.is_alive()
        if errors:
            raise errors[0]
        _wait(_seen_count(seen, total), "end")
    finally:
        os.close(writer.fd)
    return result[0]


def test_r2_lines_survive_truncation_rotation_deletion_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "mllog.txt"
    total = 12_000
    reader = _Reader(path)
    reader.start()
    try:
        steps = run_r2(path, reader.got, total, every=150)
    finally:
        reader.stop.set()
        reader.join(10)
    assert steps == 79
    assert reader.got == list(range(total))  # every line, exactly once, in order
    assert reader.resets >= steps  # each truncation/replacement was announced


@pytest.mark.parametrize("size", [0, 1, 5])
def test_small_chunks_give_same_lines(tmp_path: Path, size: int) -> None:
    p = tmp_path / "mllog.txt"
    want = [b"", b"a", b"bb", b"", b"ccc\r"]
    p.write_bytes(b"\n".join(want) + b"\n")
    tail = FileTail(p, chunk_size=size, max_batch=3)
    assert lines_of(tail.read_all()) == want
    tail.close()


def test_last_lines_reads_only_the_end_and_follows_changes(tmp_path) -> None:
    from perfwatch.core.ingest.tail import cached_last_lines, last_lines

    path = tmp_path / "output.log"
    path.write_text("".join(f"line {i:05d}\n" for i in range(10_000)))  # 110 kB
    assert last_lines(path, 3) == ("line 09997", "line 09998", "line 09999")
    window = last_lines(path, 10_000, max_bytes=1100)  # 100 lines fit; the cut first one is dropped
    assert window[-1] == "line 09999" and len(window) == 99 and window[0] == "line 09901"
    assert cached_last_lines(path, 2) == ("line 09998", "line 09999")
    with open(path, "a") as fh:
        fh.write("Traceback (most recent call last):\n")
    assert cached_last_lines(path, 2) == ("line 09999", "Traceback (most recent call last):")
    assert last_lines(tmp_path / "missing.log") == ()
