"""Bad situations a user runs into get a clear message, never a traceback or a silently wrong number:
`--mila-json` onto a file or with colliding names, `package --out` on a dangling symlink or inside LOGDIR,
a UTF-16 log, a negative time-to-train."""

from __future__ import annotations

import codecs
import json
import shutil
from pathlib import Path

import pytest

from perfwatch.cli import main

DATA = Path(__file__).parent / "data" / "mlperf-logs"
BERT = DATA / "v2.1/MosaicML/results/8xA100_80GB-baseline/bert"


def test_mila_json_onto_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.json"
    target.write_text("keep me")
    assert main(["report", str(BERT), "--mila-json", str(target), "--no-cpu-peak"]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_mila_json_never_lets_two_runs_share_a_file(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    shutil.copy(BERT / "result_0.txt", tree / "a" / "b.txt")  # run id a/b  -> a__b
    shutil.copy(BERT / "result_1.txt", tree / "a__b.txt")  # run id a__b -> a__b
    out = tmp_path / "mila"
    assert main(["report", str(tree), "--mila-json", str(out), "--no-cpu-peak"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 2, files
    assert (out / files[0]).read_text() != (out / files[1]).read_text()  # one report per run, none overwritten


def test_package_out_on_a_dangling_symlink_or_inside_logdir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logdir = tmp_path / "logs"
    shutil.copytree(BERT, logdir / "bert")
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    assert main(["package", str(logdir), "--out", str(link), "--submitter", "x", "--system", "s"]) == 2
    assert "which does not exist" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()
    assert main(["package", str(logdir), "--out", str(logdir / "sub"), "--submitter", "x", "--system", "s"]) == 2
    assert "inside" in capsys.readouterr().err and not (logdir / "sub").exists()


def test_a_utf16_log_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "t" / "bert"
    folder.mkdir(parents=True)
    text = (BERT / "result_0.txt").read_text()
    (folder / "result_0.txt").write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    (folder / "result_1.txt").write_text(text)
    assert main(["report", str(tmp_path / "t"), "--format", "json", "--no-cpu-peak"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["bert/result_0"]["time_to_train_ms"] == runs["bert/result_1"]["time_to_train_ms"] is not None


def test_a_negative_time_to_train_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "t" / "bert"
    folder.mkdir(parents=True)
    lines = (BERT / "result_0.txt").read_text().splitlines()
    start = next(json.loads(ln.split("MLLOG ", 1)[1])["time_ms"] for ln in lines if '"run_start"' in ln)
    out = []
    for ln in lines:
        if '"run_stop"' in ln:
            rec = json.loads(ln.split("MLLOG ", 1)[1])
            rec["time_ms"] = start - 5000
            ln = ":::MLLOG " + json.dumps(rec)
        out.append(ln)
    (folder / "result_0.txt").write_text("\n".join(out) + "\n")
    assert main(["report", str(tmp_path / "t"), "--no-cpu-peak"]) == 0
    text = capsys.readouterr().out
    assert "bert/result_0: warning: negative time-to-train (-5.000 s)" in text, text
