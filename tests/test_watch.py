"""LogWatcher: files under a LOGDIR reach the consumer — existing ones from their start, new files and
new run folders as they appear, appends coalesced — with inotify and with polling."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perfwatch.core.ingest import watch as watch_mod
from perfwatch.core.ingest.tail import LineBatch
from perfwatch.core.ingest.watch import LogWatcher, is_candidate
from tests.test_tail import run_r2

COALESCED = "coalesced"  # inotify read at most every min_interval (what the TUI and headless use)
MODES = [pytest.param(False, id="inotify"), pytest.param(True, id="poll"), pytest.param(COALESCED, id=COALESCED)]


class Collector:
    """A sink that records every call; tests wait on what it has seen."""

    def __init__(self) -> None:
        self.calls: list[list[LineBatch]] = []
        self.cond = threading.Condition()

    def __call__(self, batches: list[LineBatch]) -> None:
        with self.cond:
            self.calls.append(batches)
            self.cond.notify_all()

    def lines(self, path: Path | None = None) -> list[bytes]:
        with self.cond:
            return [
                ln for c in self.calls for b in c if path is None or b.path == str(path) for ln in b.lines
            ]

    def batches(self, path: Path) -> list[LineBatch]:
        with self.cond:
            return [b for c in self.calls for b in c if b.path == str(path)]

    def wait_for(self, pred: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; got {self.calls!r:.500}"
                self.cond.wait(left)


@pytest.fixture
def no_leak() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)  # observer threads exit asynchronously after join() of their parent
    assert set(threading.enumerate()) - before == set()


def watcher(root: Path | list[Path], sink: Collector, poll: bool, **kw: object) -> LogWatcher:
    roots = root if isinstance(root, list) else [root]
    if poll == COALESCED:
        kw.setdefault("min_interval", 0.05)
    return LogWatcher(roots, sink, poll=poll is True, poll_interval=0.05, **kw)  # type: ignore[arg-type]


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_is_candidate(tmp_path: Path) -> None:
    names = {
        "mllog.txt": True,
        "output.log": True,
        "result_3.txt": True,
        "my_mllog": True,
        "telemetry.jsonl": False,
        "perfwatch.json": False,
        ".hidden.txt": False,
        "notes.md": False,
        "mllog.txt.1": False,  # a rotated copy: its lines already came through mllog.txt
        "output.log.gz": False,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "log.txt").write_bytes(b"x\n")
    (tmp_path / "dir.txt").mkdir()
    assert {n: is_candidate(tmp_path / n) for n in names} == names
    assert not is_candidate(tmp_path / ".git" / "log.txt")
    assert not is_candidate(tmp_path / "dir.txt")
    assert not is_candidate(tmp_path / "missing.txt")


@pytest.mark.parametrize("poll", MODES)
def test_existing_files_read_from_start(tmp_path: Path, poll: bool, no_leak: None) -> None:
    run = tmp_path / "mlp.bs32.r0"
    run.mkdir()
    (run / "mllog.txt").write_bytes(b"a\nb\n")
    (run / "telemetry.jsonl").write_bytes(b'{"gpu": 1}\n')
    (tmp_path / "perfwatch.json").write_bytes(b"{}\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_bytes(b"secret\n")
    odd = tmp_path / "elsewhere" / "stdout.out"
    odd.parent.mkdir()
    odd.write_bytes(b"odd\n")
    sink = Collector()
    w = watcher(tmp_path, sink, poll)
    w.add_file(odd)
    with w:
        assert w.ready.wait(10)
        sink.wait_for(lambda: len(sink.lines()) >= 3)
        assert sink.lines(run / "mllog.txt") == [b"a", b"b"]
        assert sink.lines(odd) == [b"odd"]
        paths = {b.path for c in sink.calls for b in c}
        assert paths == {str(run / "mllog.txt"), str(odd)}


@pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")  # watchdog's own nested-mkdir race
@pytest.mark.parametrize("poll", MODES)
def test_new_file_and_new_run_folder_are_followed(tmp_path: Path, poll: bool, no_leak: None) -> None:
    sink = Collector()
    with watcher(tmp_path, sink, poll, rescan_interval=600) as w:  # events alone, not the safety net
        assert w.ready.wait(10)
        f = tmp_path / "result_0.txt"
        f.write_bytes(b"first\n")
        sink.wait_for(lambda: sink.lines(f) == [b"first"])
        # a new run folder, nested, with a file written at once (before any watch can exist on it)
        log = tmp_path / "r1" / "deep"
        log.mkdir(parents=True)
        (log / "mllog.txt").write_bytes(b"1\n2\n")
        sink.wait_for(lambda: sink.lines(log / "mllog.txt") == [b"1", b"2"])
        append(log / "mllog.txt", b"3\n")
        sink.wait_for(lambda: sink.lines(log / "mllog.txt") == [b"1", b"2", b"3"])
        append(f, b"second\n")
        sink.wait_for(lambda: sink.lines(f) == [b"first", b"second"])


@pytest.mark.parametrize("poll", MODES)
def test_appends_are_coalesced_into_one_sink_call(tmp_path: Path, poll: bool, no_leak: None) -> None:
    f = tmp_path / "mllog.txt"
    g = tmp_path / "r1" / "output.log"
    g.parent.mkdir()
    f.write_bytes(b"start\n")
    gate = threading.Event()
    entered = threading.Event()
    calls: list[list[LineBatch]] = []

    def slow_sink(batches: list[LineBatch]) -> None:
        calls.append(batches)
        if len(calls) == 1:
            entered.set()
            gate.wait(10)  # the consumer is busy: the watcher must not queue one call per append

    with watcher(tmp_path, slow_sink, poll) as w:  # type: ignore[arg-type]
        assert entered.wait(10)
        with open(f, "ab", buffering=0) as out, open(g, "ab", buffering=0) as out2:
            for i in range(100):
                out.write(b"line %d\n" % i)
                out2.write(b"other %d\n" % i)
        deadline = time.monotonic() + 10
        while not {str(f), str(g)} <= set(w._dirty) and time.monotonic() < deadline:
            time.sleep(0.01)  # both files noticed (the poller may need a cycle) before the consumer frees up
        gate.set()
        while sum(len(b.lines) for c in calls for b in c) < 201 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [ln for c in calls for b in c if b.path == str(f) for ln in b.lines] == [b"start"] + [
        b"line %d" % i for i in range(100)
    ]
    assert [ln for c in calls for b in c if b.path == str(g) for ln in b.lines] == [
        b"other %d" % i for i in range(100)
    ]
    assert len(calls) == 2  # 200 appends to 2 files while busy -> one more call, not 200
    assert sorted(b.path for b in calls[1]) == sorted([str(f), str(g)])  # one batch per file


@pytest.mark.parametrize("poll", MODES)
def test_delete_and_recreate_resets(tmp_path: Path, poll: bool, no_leak: None) -> None:
    f = tmp_path / "mllog.txt"
    f.write_bytes(b"old\n")
    sink = Collector()
    with watcher(tmp_path, sink, poll):
        sink.wait_for(lambda: sink.lines(f) == [b"old"])
        f.unlink()
        f.write_bytes(b"new\n")
        sink.wait_for(lambda: sink.lines(f) == [b"old", b"new"])
        batches = sink.batches(f)
        # the new file may be announced by an empty reset batch if it was seen before its first line
        first_new = next(i for i, b in enumerate(batches) if b.lines == [b"new"])
        assert [b.reset for b in batches[1 : first_new + 1]].count(True) == 1
        assert not batches[0].reset


def test_large_file_arrives_in_several_sink_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    monkeypatch.setattr(watch_mod, "DRAIN_BUDGET", 1)  # one tail batch (4 MB) per pass
    f = tmp_path / "mllog.txt"
    want = [b"%08d %s" % (i, b"y" * 90) for i in range(120_000)]  # ~12 MB
    f.write_bytes(b"\n".join(want) + b"\n")
    small = tmp_path / "other.log"
    small.write_bytes(b"hi\n")
    sink = Collector()
    with watcher(tmp_path, sink, False) as w:
        assert w.ready.wait(20)
        sink.wait_for(lambda: len(sink.lines(f)) == len(want))
    assert sink.lines(f) == want
    assert sink.lines(small) == [b"hi"]
    assert len(sink.calls) >= 3


def test_many_files_with_few_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    monkeypatch.setattr(watch_mod, "MAX_OPEN", 2)
    files = [tmp_path / f"result_{i}.txt" for i in range(6)]
    for f in files:
        f.write_bytes(b"a\n")
    sink = Collector()
    with watcher(tmp_path, sink, False, rescan_interval=0.05) as w:
        assert w.ready.wait(10)
        sink.wait_for(lambda: len(sink.lines()) == 6)
        deadline = time.monotonic() + 10
        while sum(t.is_open for t in list(w._tails.values())) > 2:
            assert time.monotonic() < deadline, "idle files were never parked"
            time.sleep(0.01)
        for f in files:
            append(f, b"b\n")
        sink.wait_for(lambda: len(sink.lines()) == 12)
        assert all(sink.lines(f) == [b"a", b"b"] for f in files)
        assert not any(b.reset for c in sink.calls for b in c)  # parked files resumed, not re-read
        files[0].unlink()
        files[0].write_bytes(b"c\n")  # replaced while (maybe) parked: read from its start
        sink.wait_for(lambda: sink.lines(files[0]) == [b"a", b"b", b"c"])
        assert sink.batches(files[0])[-1].reset or sink.batches(files[0])[-2].reset


def test_root_created_later_and_failing_sink(tmp_path: Path, no_leak: None) -> None:
    root = tmp_path / "logdir"
    seen: list[bytes] = []
    failures: list[int] = []

    def sink(batches: list[LineBatch]) -> None:
        if not failures:
            failures.append(1)
            raise RuntimeError("consumer bug")
        seen.extend(ln for b in batches for ln in b.lines)

    with LogWatcher([root], sink, rescan_interval=0.1) as w:
        assert w.ready.wait(10)
        root.mkdir()
        (root / "mllog.txt").write_bytes(b"lost to the failing sink\n")
        deadline = time.monotonic() + 10
        while not failures and time.monotonic() < deadline:
            time.sleep(0.01)
        append(root / "mllog.txt", b"kept\n")
        while seen != [b"kept"] and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen == [b"kept"]  # the watcher survived its consumer's exception


def test_root_inside_hidden_folder_is_read_but_hidden_subfolders_are_not(
    tmp_path: Path, no_leak: None
) -> None:
    root = tmp_path / ".cache" / "runs"
    (root / "r0").mkdir(parents=True)
    (root / "r0" / "mllog.txt").write_bytes(b"visible\n")
    (root / ".ipynb_checkpoints").mkdir()
    (root / ".ipynb_checkpoints" / "mllog.txt").write_bytes(b"hidden\n")
    sink = Collector()
    with watcher(root, sink, False) as w:
        assert w.ready.wait(10)
        sink.wait_for(lambda: sink.lines() == [b"visible"])
        (root / ".ipynb_checkpoints" / "mllog.txt").write_bytes(b"hidden again\n")
        (root / "r0" / "mllog.txt").write_bytes(b"fresh\n")
        sink.wait_for(lambda: b"fresh" in sink.lines())
    assert b"hidden" not in sink.lines() and b"hidden again" not in sink.lines()


def test_stop_is_idempotent_and_leaves_no_threads(tmp_path: Path, no_leak: None) -> None:
    (tmp_path / "mllog.txt").write_bytes(b"x\n")
    w = LogWatcher([tmp_path], Collector())
    w.stop()  # before start: nothing to do
    w.start()
    w.start()  # second start is a no-op
    assert w.ready.wait(10)
    w.stop()
    w.stop()


def test_binary_and_partial_lines_through_watcher(tmp_path: Path, no_leak: None) -> None:
    f = tmp_path / "mllog.txt"
    sink = Collector()
    with watcher(tmp_path, sink, False):
        with open(f, "wb", buffering=0) as out:
            out.write(b"\xff\xfe half")
            time.sleep(0.05)  # give the watcher a chance to (wrongly) deliver the half line
            out.write(b" done\r\n")
        sink.wait_for(lambda: sink.lines(f) == [b"\xff\xfe half done\r"])
        os.truncate(f, 0)
        sink.wait_for(lambda: any(b.reset for b in sink.batches(f)))


@pytest.mark.parametrize(
    ("poll", "total"), [pytest.param(False, 8000, id="inotify"), pytest.param(True, 2000, id="poll"),
                        pytest.param(COALESCED, 4000, id=COALESCED)]
)
def test_r2_watcher_delivers_every_line_once(tmp_path: Path, poll: bool, total: int, no_leak: None) -> None:
    """R2 end to end: rotation, truncation, deletion while the watcher follows the folder."""
    path = tmp_path / "mllog.txt"
    path.touch()
    seen: list[int] = []
    resets: list[bool] = []
    paths: set[str] = set()

    def sink(batches: list[LineBatch]) -> None:
        for b in batches:
            paths.add(b.path)
            resets.append(b.reset)
            seen.extend(int(line.split()[1]) for line in b.lines)

    extra = {"min_interval": 0.02} if poll == COALESCED else {}
    with LogWatcher([tmp_path], sink, poll=poll is True, poll_interval=0.02, **extra):  # type: ignore[arg-type]
        steps = run_r2(path, seen, total, every=100)
    assert steps == (total - 1) // 100
    assert seen == list(range(total))
    assert paths == {str(path)}  # rotated copies (mllog.txt.N) are not followed as new runs
    assert sum(resets) >= steps


def test_ready_even_while_a_file_keeps_growing(tmp_path: Path, no_leak: None) -> None:
    """`attach` to a live run: the first scan must count as done although appends never pause."""
    f = tmp_path / "mllog.txt"
    f.write_bytes(b"".join(b"%d\n" % i for i in range(1000)))
    stop = threading.Event()

    def keep_writing() -> None:
        with open(f, "ab", buffering=0) as out:
            i = 1000
            while not stop.is_set():
                out.write(b"%d\n" % i)
                i += 1
                time.sleep(0.0005)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    sink = Collector()
    try:
        with watcher(tmp_path, sink, False) as w:
            assert w.ready.wait(10)
            n = len(sink.lines(f))
            assert n >= 1000  # the backlog was handed over before ready
    finally:
        stop.set()
        writer.join()
    got = [int(x) for x in sink.lines(f)]
    assert got == list(range(len(got)))


def test_min_interval_bounds_read_passes(tmp_path: Path, no_leak: None) -> None:
    """The TUI asks for at most ~10 read passes a second: 200 spaced appends arrive in few sink calls."""
    f = tmp_path / "mllog.txt"
    f.write_bytes(b"")
    calls: list[list[LineBatch]] = []
    w = LogWatcher([tmp_path], calls.append, min_interval=0.5).start()
    try:
        assert w.ready.wait(10)
        before = len(calls)
        with open(f, "ab", buffering=0) as out:
            for i in range(200):
                out.write(b"line %d\n" % i)
                time.sleep(0.002)  # ~0.4 s of appends, each its own inotify event
        deadline = time.monotonic() + 10
        while sum(len(b.lines) for c in calls for b in c) < 200 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        w.stop()
    lines = [ln for c in calls for b in c for ln in b.lines]
    assert lines == [b"line %d" % i for i in range(200)]  # nothing lost, in order
    assert len(calls) - before <= 4  # not one pass per append


def test_the_coalescing_reader_sleeps_until_there_is_something_and_stops_at_once(tmp_path: Path) -> None:
    """No polling: an untouched folder costs the reader thread no wake-ups, and `stop` ends it at once."""
    from perfwatch.core.ingest.inotify import CoalescingInotify, available

    if not available():
        pytest.skip("inotify is Linux only")
    seen: list[list[str]] = []

    class Handler:
        def on_files_modified(self, paths: list[str]) -> None:
            seen.append(paths)

    obs = CoalescingInotify(0.05)
    obs.schedule(Handler(), str(tmp_path))
    obs.start()
    assert obs._thread is not None
    tid = obs._thread.native_id
    status = Path(f"/proc/self/task/{tid}/status")

    def switches() -> int:
        text = status.read_text()
        return int(text.split("voluntary_ctxt_switches:")[1].split()[0])

    time.sleep(0.3)
    before = switches()
    time.sleep(1.5)
    assert switches() - before <= 1  # the old reader woke every 0.5 s to look at its stop flag
    (tmp_path / "a.txt").write_text("x\n")
    for _ in range(200):
        if seen:
            break
        time.sleep(0.01)
    assert seen and seen[0] == [str(tmp_path / "a.txt")]
    obs.stop()
    obs.join(5)
    assert not obs._thread.is_alive()
