"""Campaigns built to break perfwatch: refused at load with file:line and exit 2, before anything starts.

Each case runs the real `perfwatch launch --dry-run` (in-process CLI, so no case can hang the suite
unnoticed) and checks the message a user sees; none may show a traceback or start a run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from launch_helpers import FAKE, ROOT

from perfwatch.cli import main

CMD = f"cmd: [python, {FAKE}]"
HOSTILE = [
    # (yaml, line, words in the message)
    (f"jobs:\n  - name: j\n    {CMD}\n    env:\n      A=B: x\n", 5, "name 'A=B'"),
    (f"jobs:\n  - name: j\n    {CMD}\n    env:\n      '': x\n", 5, "name ''"),
    (f"jobs:\n  - name: j\n    {CMD}\n    env:\n      A: \"x\\0y\"\n", 5, "NUL byte"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--tag: \"a\\0b\"}}\n", 4, "NUL byte"),
    (f"jobs:\n  - name: j\n    cmd: [python, {FAKE}, \"--x\\0\"]\n", 3, "NUL byte"),
    (f"jobs:\n  - name: j\n    {CMD}\n    env: {{CUDA_VISIBLE_DEVICES: '0'}}\n", 4, "assigns GPUs"),
    (f"jobs:\n  - name: j\n    {CMD}\n    env: {{PERFWATCH_MLLOG: /tmp/x}}\n", 4, "own mllog.txt"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--opt: [adam_w, adam-w, 'adam w', adam/w]}}\n", 4,
     "same run id 'j.optadam-w'"),
    (f"jobs:\n  - name: j\n    {CMD}\n    repeat: 100000000\n", 4, "at most 10,000"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args:\n" + "".join(
        f"      --a{i}: [{', '.join(str(v) for v in range(10))}]\n" for i in range(10)), 5, "at most 10,000"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{seed:>2000000000}}'}}\n", 4, "format specs"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{run_id:d}}'}}\n", 4, "{run_id:d}"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{seed!z}}'}}\n", 4, "{seed!z}: format specs"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{seed!r}}'}}\n", 4, "{seed!r}"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{seed.real}}'}}\n", 4, "unknown placeholder"),
    (f"jobs:\n  - name: \"j\\n\"\n    {CMD}\n", 2, "job names use"),
    ("jobs: " + "[" * 500 + "]" * 500 + "\n", 1, "nested more than 32"),
    ("jobs: " + "[" * 40 + "]" * 40 + "\n", 1, "nested more than 32"),
    (f"jobs:\n  - name: j\n    {CMD}\n    args: {{--s: '{{run_id}}{{run_id}}'}}\n    repeat: 1\n"
     f"    env: {{BIG: '{'x' * 40000}'}}\n", 6, "expands to 40,000 characters"),
]


@pytest.mark.parametrize(("text", "line", "words"), HOSTILE, ids=[f"hostile{i:02d}" for i in range(len(HOSTILE))])
def test_hostile_campaign_is_refused_at_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, text: str, line: int,
                                             words: str) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfwatch launch: {path}:{line}: "), err
    assert words in err and "Traceback" not in err, err
    assert main(["launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir")]) == 2
    assert not (tmp_path / "logdir").exists()


def test_distinct_grid_values_still_give_distinct_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(f"""
        jobs:
          - name: j
            {CMD}
            args: {{--opt: [adamw, adam_w, sgd], --lr: [0.1, 0.01]}}
            repeat: 2
        """))
    assert main(["launch", str(path), "--dry-run"]) == 0
    ids = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.startswith("  j.")]
    assert len(ids) == len(set(ids)) == 12, ids


def test_ordinary_env_names_and_templates_still_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "c.yaml"
    path.write_text(f"jobs:\n  - name: j\n    {CMD}\n    env: {{MY_VAR_1: 's{{seed}}', _X: '{{{{lit}}}}'}}\n")
    assert main(["launch", str(path), "--dry-run"]) == 0
    assert "j.r0" in capsys.readouterr().out
