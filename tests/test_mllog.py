"""The mllog line parser takes everything real logs contain and never raises (R1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfwatch.core.ingest.mllog import Event, LineParser, dumps, parse_path

REAL = b':::MLLOG {"namespace": "", "time_ms": 1665709241779, "event_type": "POINT_IN_TIME", "key": "seed", "value": 4361, "metadata": {"file": "x.py", "lineno": 243}}'


@pytest.fixture(params=["lines", "block"])
def feed(request: pytest.FixtureRequest):
    """Both ways lines reach the parser: as the tailer hands them over, and as one buffer read from disk."""

    def fed(*lines: bytes) -> tuple[list[Event], LineParser]:
        p = LineParser()
        if request.param == "lines":
            return p.feed(list(lines)), p
        return p.feed_block(b"\n".join(lines) + b"\n"), p

    return fed


def test_what_mlperf_logging_writes_round_trips(tmp_path: Path) -> None:
    from mlperf_logging import mllog

    log = tmp_path / "mllog.txt"
    logger = mllog.get_mllogger()
    mllog.config(filename=str(log))
    try:
        logger.event(key="tracked_stats", value={"throughput": 12.5, "loss": 0.3}, metadata={"step": 7})
        logger.start(key="run_start", value=None)
        logger.event(key="eval_accuracy", value=0.75, metadata={"epoch_num": 3})
        logger.end(key="run_stop", metadata={"status": "success"})
    finally:
        for h in list(logger.logger.handlers):
            logger.logger.removeHandler(h)
            h.close()
    events, parser = parse_path(str(log))
    assert [e.key for e in events] == ["tracked_stats", "run_start", "eval_accuracy", "run_stop"]
    assert events[0].value == {"throughput": 12.5, "loss": 0.3}
    assert events[0].meta("step") == 7
    assert events[1].event_type == "INTERVAL_START" and events[1].value is None
    assert events[3].meta("status") == "success"
    assert parser.bad_count == 0
    # our writer produces lines mlperf_logging's own parser accepts
    line = dumps(events[2])
    assert json.loads(line.split(":::MLLOG ", 1)[1])["value"] == 0.75


def test_prefixes_noise_crlf(feed) -> None:
    events, p = feed(
        b"0: " + REAL,
        b"4063:" + REAL,  # what `grep -n` style prefixes look like in real results
        b"[2024-05-06 10:00:01] rank 3 " + REAL + b"\r",
        b"+ echo 'Beginning trial 2 of 5'",
        b"",
        b"vm.drop_caches = 3",
    )
    assert len(events) == 3 and all(e.key == "seed" and e.value == 4361 for e in events)
    assert p.noise == 3 and p.bad_count == 0 and p.lineno == 6


def test_last_token_wins_like_mlperf_parser(feed) -> None:
    line = b":::MLLOG {\"broken\" " + REAL  # two ranks interleaved on one line
    events, p = feed(line)
    assert len(events) == 1 and p.bad_count == 0


def test_bad_lines_are_counted_with_line_numbers_and_kept(feed) -> None:
    events, p = feed(
        REAL,
        b':::MLLOG {"time_ms": 1, "key": "x"',  # truncated
        b":::MLLOG not json at all",
        b':::MLLOG {"time_ms": "1.2.3", "key": "x"}',  # wrong type
        b':::MLLOG {"key": "no time"}',  # missing field
        REAL,
    )
    assert len(events) == 2
    assert p.bad_count == 4
    assert [b.lineno for b in p.bad] == [2, 3, 4, 5]
    assert "1.2.3" in p.bad[2].text
    assert all(b.reason for b in p.bad)


def test_latin1_and_invalid_utf8_are_read_not_raised(feed) -> None:
    latin = ':::MLLOG {"time_ms": 5, "key": "submission_org", "value": "Müller"}'.encode("latin-1")
    junk = b':::MLLOG {"time_ms": 6, "key": "note", "value": "\xff\xfe\x80"}'
    events, p = feed(latin, junk)
    assert [e.value for e in events] == ["Müller", "ÿþ\x80"]
    assert p.non_utf8 == 2 and p.bad_count == 0


def test_dict_null_and_huge_values(feed) -> None:
    big = "x" * (10 * 1024 * 1024)
    line = (':::MLLOG {"time_ms": 7, "key": "blob", "value": "' + big + '", "metadata": null}').encode()
    events, p = feed(
        b':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "tracked_stats", "value": {"throughput": 2.45}, "metadata": {"step": 1536}}',
        b':::MLLOG {"time_ms": 2, "key": "run_stop", "value": null, "metadata": {"status": "aborted"}}',
        line,
        b":::MLLOG " + b"[" * 100_000,  # deeply nested garbage
    )
    assert events[0].value == {"throughput": 2.45}
    assert events[1].value is None
    assert len(events[2].value) == len(big)
    assert p.bad_count == 1 and len(p.bad[0].text) <= 2000


def _mutations(line: bytes) -> st.SearchStrategy[bytes]:
    def mutate(data: bytes, pos: int, kind: int, byte: int) -> bytes:
        pos %= len(data) + 1
        if kind == 0:
            return data[:pos]  # truncation
        if kind == 1:
            return data[:pos] + bytes([byte]) + data[pos:]  # insertion
        if kind == 2:
            return data[:pos] + data[pos + 1 :]  # deletion
        return data[:pos] + bytes([byte]) + data[pos + 1 :]  # replacement

    return st.builds(mutate, st.just(line), st.integers(0, 10_000), st.integers(0, 3), st.integers(0, 255))


REAL_LINES = [
    line
    for path in sorted((Path(__file__).parent / "data/mlperf-logs").rglob("result_0.txt"))
    for line in path.read_bytes().split(b"\n")[:40]
    if b":::MLLOG" in line
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.builds(lambda b: b":::MLLOG " + b, st.binary(max_size=200)),
            st.sampled_from(REAL_LINES).flatmap(_mutations),
            st.sampled_from(REAL_LINES),
        ),
        max_size=40,
    )
)
def test_random_and_mutated_lines_never_crash(lines: list[bytes]) -> None:
    lines = [ln.replace(b"\n", b" ") for ln in lines]
    p = LineParser()
    events = p.feed(lines)
    # every line is accounted for exactly once: a record, noise, or a counted bad line
    assert len(events) + p.noise + p.bad_count == len(lines)
    assert p.lineno == len(lines)
    for e in events:
        assert isinstance(e.key, str) and isinstance(e.time_ms, float)
    assert all(1 <= b.lineno <= len(lines) for b in p.bad)
    # the same lines as one buffer read from disk (last line without its newline): the same account
    q = LineParser()
    block_events = q.feed_block(b"\n".join(lines))
    assert [(e.key, e.time_ms) for e in block_events] == [(e.key, e.time_ms) for e in events]
    assert (q.noise, q.bad_count, q.lineno) == (p.noise, p.bad_count, p.lineno) or lines[-1:] == [b""]
    assert [b.lineno for b in q.bad] == [b.lineno for b in p.bad]


def test_a_noisy_result_file_read_as_one_buffer_gives_what_mlperf_logging_parses(tmp_path: Path) -> None:
    """Krai's result files are nine-tenths framework output between records; CRLF and a missing last
    newline on top. The records found are the ones mlperf_logging's own parser finds, in order."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    src = Path(__file__).parent / "data/mlperf-logs/v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_1.txt"
    data = src.read_bytes()
    variant = tmp_path / "result_crlf.txt"
    variant.write_bytes(data.rstrip(b"\n").replace(b"\n", b"\r\n"))
    for path in (src, variant):
        theirs, _ = parse_file(str(path), ruleset="2.1.0")
        p = LineParser()
        ours = p.feed_block(path.read_bytes())
        assert len(ours) == len(theirs) > 300
        assert [(e.key, e.value, int(e.time_ms)) for e in ours] == [(r.key, r.value["value"], r.timestamp) for r in theirs]
        assert p.lineno == data.count(b"\n") and p.noise == p.lineno - len(theirs) and p.bad_count == 0
        # read as a whole file's last buffer (`load`): the same records, its lines left uncounted
        q = LineParser()
        assert [(e.key, e.value, e.time_ms) for e in q.feed_block(path.read_bytes(), last=True)] == \
            [(e.key, e.value, e.time_ms) for e in ours]
        assert (q.records, q.lineno, q.noise, q.bad_count) == (len(theirs), 0, 0, 0)


def test_a_last_buffer_with_a_bad_record_still_numbers_its_bad_line() -> None:
    """`last` skips only the count of a clean noisy buffer: a record that does not decode sends it through
    the careful path, which numbers lines as ever."""
    good = b':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "seed", "value": 1, "metadata": {}}'
    lines = [b"chatter"] * 40 + [good, b":::MLLOG {broken"] + [b"chatter"] * 40
    p = LineParser()
    events = p.feed_block(b"\n".join(lines) + b"\n", last=True)
    assert [e.key for e in events] == ["seed"] and p.bad_count == 1 and [b.lineno for b in p.bad] == [42]
