"""RunBook: which files are runs, what their ids are, and that nothing is counted twice."""

from __future__ import annotations

from pathlib import Path

from perfwatch.core.model.book import RunBook, discover, load

REC = ':::MLLOG {{"namespace": "", "time_ms": {t}, "event_type": "POINT_IN_TIME", "key": "{k}", "value": {v}, "metadata": {{}}}}\n'


def rec(t: int, k: str, v: str = "null") -> str:
    return REC.format(t=t, k=k, v=v)


class B:
    def __init__(self, path: Path, lines: list[bytes], reset: bool = False) -> None:
        self.path, self.lines, self.reset = str(path), lines, reset


def test_perfwatch_logdir_layout(tmp_path: Path) -> None:
    run = tmp_path / "mlp.bs32.r0"
    run.mkdir()
    (run / "mllog.txt").write_text(rec(1, "run_start") + rec(2, "seed", "7"))
    # the workload also echoed its records to stdout: they must not be counted twice
    (run / "output.log").write_text("epoch 1 loss 0.3\n" + rec(1, "run_start") + "Traceback: boom\n")
    (run / "telemetry.jsonl").write_text('{"t": 1}\n')
    (tmp_path / "perfwatch.json").write_text("{}")
    assert [p.name for p in discover(tmp_path)] == ["mllog.txt"]
    book = RunBook(tmp_path)
    book.apply([B(run / "output.log", (run / "output.log").read_bytes().splitlines()),
                B(run / "mllog.txt", (run / "mllog.txt").read_bytes().splitlines())])
    (view,) = book.views()
    assert view.run_id == "mlp.bs32.r0"
    assert view.key_counts["run_start"] == 1 and view.seed == 7
    assert book.log_tail("mlp.bs32.r0")[-1] == "Traceback: boom"


def test_stdout_only_workload_uses_output_log(tmp_path: Path) -> None:
    run = tmp_path / "job.r0"
    run.mkdir()
    (run / "output.log").write_text("hello\n" + rec(1, "run_start") + rec(5, "run_stop", "null"))
    book = RunBook(tmp_path)
    book.apply([B(run / "output.log", (run / "output.log").read_bytes().splitlines())])
    (view,) = book.views()
    assert view.run_id == "job.r0" and view.run_start_ms == 1
    # then the workload starts writing mllog.txt: it becomes the only source, nothing doubled
    (run / "mllog.txt").write_text(rec(1, "run_start"))
    book.apply([B(run / "mllog.txt", (run / "mllog.txt").read_bytes().splitlines())])
    assert book.views()[0].key_counts["run_start"] == 1


def test_files_without_records_are_not_runs(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing to see\n")
    (tmp_path / "a.log").write_text("x\n" + rec(3, "run_start"))
    book = load(tmp_path)
    assert [v.run_id for v in book.views()] == ["a"]


def test_reset_batch_replaces_the_run_state(tmp_path: Path) -> None:
    f = tmp_path / "result_0.txt"
    book = RunBook(tmp_path)
    book.apply([B(f, [rec(1, "run_start").strip().encode(), rec(9, "run_stop").strip().encode()])])
    assert book.views()[0].run_stop_ms == 9
    book.apply([B(f, [rec(100, "run_start").strip().encode()], reset=True)])
    v = book.views()[0]
    assert v.run_start_ms == 100 and v.run_stop_ms is None and v.key_counts["run_start"] == 1


def test_natural_order_of_results(tmp_path: Path) -> None:
    for i in (10, 2, 1):
        (tmp_path / f"result_{i}.txt").write_text(rec(i, "run_start"))
    assert [p.name for p in discover(tmp_path)] == ["result_1.txt", "result_2.txt", "result_10.txt"]


def test_a_file_reads_the_same_in_one_buffer_and_in_blocks(tmp_path: Path) -> None:
    """`report` reads a file under 8 MiB in one buffer and a bigger one in 256 KiB blocks cut at line
    ends (a half line carried over, a line longer than the tailer's cap handed out in pieces). Whatever
    the buffering, the blocks are the file's bytes in order, every block but a cut-off piece ends a
    line, and the records parsed from them are the file's `:::MLLOG` lines (decoded here with json)."""
    import codecs
    import json

    from perfwatch.core.ingest.mllog import LineParser
    from perfwatch.core.model.book import iter_blocks

    def rec(i: int, pad: str = "") -> bytes:
        body = {"namespace": "", "time_ms": 1000 + i, "event_type": "POINT_IN_TIME", "key": f"k{i}",
                "value": i, "metadata": {"pad": pad}}
        return b"[1,0]<stdout>::: MLLOG noise :::MLLOG " + json.dumps(body).encode()

    lines = [rec(0), b"plain output \xff\xfe not utf-8", rec(1, "x" * 3000), rec(2) + b"\r", b"", rec(3)]
    data = b"\n".join(lines)  # no newline after the last record: a finished file may end so
    path = tmp_path / "result_0.txt"
    path.write_bytes(data)
    expected = [json.loads(ln.split(b":::MLLOG ")[-1])["key"] for ln in lines if b":::MLLOG " in ln]
    for chunk, whole in [(1 << 18, 8 << 20), (1 << 18, 0), (64, 0), (7, 0), (4096, 100)]:
        blocks = list(iter_blocks(path, chunk, whole))
        assert b"".join(blocks) == data, (chunk, whole)
        assert all(b.endswith(b"\n") for b in blocks[:-1]), (chunk, whole)
        parser = LineParser()
        keys = [ev.key for b in blocks for ev in parser.feed_block(b)]
        assert keys == expected and parser.bad_count == 0, (chunk, whole)
        assert len(blocks) == 1 if whole > len(data) else len(blocks) > 1
    # `load` reads every file under 8 MiB into one reused buffer: each file's records as read fresh
    other = tmp_path / "result_1.txt"
    other.write_bytes(b"\n".join(lines[2:4]) + b"\n")
    shared = bytearray()
    for _ in range(2):
        for p, want in ((path, expected), (other, expected[1:3]), (path, expected)):
            parser = LineParser()
            blocks = 0
            for block in iter_blocks(p, into=shared):
                assert block is shared
                blocks += 1
                got = [ev.key for ev in parser.feed_block(block)]
            assert blocks == 1 and got == want and bytes(shared) == p.read_bytes()
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes(codecs.BOM_UTF16_LE + b"\n".join(lines[:1] + lines[2:]).decode().encode("utf-16-le"))
    for chunk, whole in [(1 << 18, 8 << 20), (50, 0)]:
        text = b"".join(iter_blocks(utf16, chunk, whole)).decode()
        assert text == b"\n".join(lines[:1] + lines[2:]).decode(), (chunk, whole)


def test_the_headless_load_keeps_no_log_tail_and_the_same_runs(tmp_path: Path) -> None:
    """`load` (report, compare, package) shows no log tail, so it keeps none; the runs are the same as a
    live book's that keeps tails."""
    from perfwatch.core.model.book import iter_blocks

    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "result_0.txt").write_text(rec(1, "run_start") + rec(2, "seed", "7") + "shell noise\n")
    static = load(tmp_path)
    live = RunBook(tmp_path)
    for path in discover(tmp_path):
        for block in iter_blocks(path):
            live.feed_file(path, block)
    assert [v.run_id for v in static.views()] == [v.run_id for v in live.views()] == ["bert/result_0"]
    assert static.views()[0].key_counts == live.views()[0].key_counts
    assert static.log_tail("bert/result_0") == () and live.log_tail("bert/result_0")[-1] == "shell noise"
