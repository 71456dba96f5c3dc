"""Deliberately broken copies of real MLPerf logs, shared by the check and live-check tests.

Each breaker takes the lines of a real result file and returns broken lines;
`write_broken` puts the copy in a temp folder. The tests compare our verdicts
with the official checker on these copies, so a breaker need not know the
expected verdict (a duplicated run_start with the same value, for instance,
only earns a warning from the official checker).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).parent / "data" / "mlperf-logs"
BASES = {
    "bert-open-2.1": (DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert/result_0.txt", "2.1.0"),
    "llama-closed-4.0": (DATA / "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora/result_0.txt", "4.0.0"),
}
TOKEN = ":::MLLOG "


def _rec(line: str) -> dict | None:
    i = line.rfind(TOKEN)
    if i < 0:
        return None
    try:
        return json.loads(line[i + len(TOKEN):])
    except ValueError:
        return None


def _line(rec: dict) -> str:
    return TOKEN + json.dumps(rec)


def _index(lines: list[str], key: str) -> int:
    for i, line in enumerate(lines):
        r = _rec(line)
        if r and r["key"] == key:
            return i
    raise KeyError(key)


def _edit(lines: list[str], key: str, fn: Callable[[dict], None], every: bool = False) -> list[str]:
    out = []
    done = False
    for line in lines:
        r = _rec(line)
        if r and r["key"] == key and (every or not done):
            fn(r)
            line = _line(r)
            done = True
        out.append(line)
    return out


def drop_run_stop(lines: list[str]) -> list[str]:
    return [ln for ln in lines if (_rec(ln) or {}).get("key") != "run_stop"]


def dup_run_start_same(lines: list[str]) -> list[str]:
    i = _index(lines, "run_start")
    return lines[: i + 1] + [lines[i]] + lines[i + 1:]


def dup_run_start_different(lines: list[str]) -> list[str]:
    i = _index(lines, "run_start")
    r = _rec(lines[i]) or {}
    r["value"] = "second launch"
    r["time_ms"] += 1000
    return lines[: i + 1] + [_line(r)] + lines[i + 1:]


def no_eval_metadata(lines: list[str]) -> list[str]:
    def strip(r: dict) -> None:
        r["metadata"].pop("epoch_num", None)
        r["metadata"].pop("samples_count", None)
    return _edit(lines, "eval_accuracy", strip, every=True)


def _init_too_long(minutes: int) -> Callable[[list[str]], list[str]]:
    def breaker(lines: list[str]) -> list[str]:
        stop = (_rec(lines[_index(lines, "init_stop")]) or {})["time_ms"]

        def early(r: dict) -> None:
            r["time_ms"] = stop - (minutes + 1) * 60_000
        return _edit(lines, "init_start", early)
    breaker.__name__ = f"init_took_{minutes + 1}_min"
    return breaker


def run_stop_without_status(lines: list[str]) -> list[str]:
    return _edit(lines, "run_stop", lambda r: r["metadata"].pop("status", None))


def relaunch_reused_file(lines: list[str]) -> list[str]:
    """The same file written twice: a relaunch that appended instead of starting a new file."""
    return lines + lines


def dup_submission_org_different(lines: list[str]) -> list[str]:
    i = _index(lines, "submission_org")
    r = _rec(lines[i]) or {}
    r["value"] = "SomeoneElse"
    return lines[: i + 1] + [_line(r)] + lines[i + 1:]


def bad_json_line(lines: list[str]) -> list[str]:
    return lines[:3] + [':::MLLOG {"namespace": "", "time_ms": 1, "key": "oops" ,,,'] + lines[3:]


def run_start_before_init_stop(lines: list[str]) -> list[str]:
    i, j = _index(lines, "init_stop"), _index(lines, "run_start")
    out = list(lines)
    out[i], out[j] = out[j], out[i]
    return out


def record_without_key(lines: list[str]) -> list[str]:
    """The official parser raises KeyError here: the checker crashes (exit 1)."""
    return lines[:3] + [':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", '
                        '"value": 1, "metadata": {}}'] + lines[3:]


def eval_value_is_text(lines: list[str]) -> list[str]:
    return _edit(lines, "eval_accuracy", lambda r: r.__setitem__("value", "n/a"))


def no_records(lines: list[str]) -> list[str]:
    return ["training started", "nothing logged"]


def never_reaches_target(lines: list[str]) -> list[str]:
    """99.0 misses both bases' targets: open bert needs < 1.0, llama2_70b_lora needs <= 0.925."""
    return _edit(lines, "eval_accuracy", lambda r: r.__setitem__("value", 99.0), every=True)


BREAKERS: list[Callable[[list[str]], list[str]]] = [
    drop_run_stop, dup_run_start_same, dup_run_start_different, no_eval_metadata, _init_too_long(30),
    _init_too_long(240), run_stop_without_status, relaunch_reused_file, dup_submission_org_different,
    bad_json_line, run_start_before_init_stop, record_without_key, eval_value_is_text, no_records,
    never_reaches_target,
]


def write_broken(tmp: Path, base: str, breaker: Callable[[list[str]], list[str]]) -> Path:
    src, _ = BASES[base]
    lines = src.read_text(encoding="latin-1").splitlines()
    out = tmp / f"{base}-{breaker.__name__}" / "result_0.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(breaker(lines)) + "\n", encoding="latin-1")
    return out


def test_every_breaker_changes_the_log(tmp_path: Path) -> None:
    for base, (src, _) in BASES.items():
        original = src.read_text(encoding="latin-1").splitlines()
        for breaker in BREAKERS:
            broken = write_broken(tmp_path, base, breaker).read_text(encoding="latin-1").splitlines()
            assert broken != original, breaker.__name__
