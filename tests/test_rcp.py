"""RCP verdicts equal mlperf_logging's own RCP checker, offline per folder and projected live."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker as rc

from perfwatch.cli import main
from perfwatch.core.mlperf.rcp import project

LLAMA = "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora"
KRAI = "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet"
BERT = "v2.1/MosaicML/results/8xA100_80GB-methods/bert"
_SAMPLES = re.compile(r'("key": "eval_accuracy".*?"samples_count": )(\d+)')
_TRAIN_SAMPLES = re.compile(r'("key": "train_samples", "value": )(\d+)')


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def official(folder: Path, ruleset: str) -> tuple[bool, str, float]:
    """The package checker's and the summarizer's call: pruned RCPs, their default bert_train_samples=False,
    nothing written."""
    logging.disable(logging.WARNING)
    try:
        ok, msg, norm = rc.check_directory(str(folder), "training", ruleset, False, False, rcp_pass="pruned_rcps")
    finally:
        logging.disable(logging.NOTSET)
    return ok, msg, float(norm)


def derive(src: Path, dst: Path, factor: float, pattern: re.Pattern[str] = _SAMPLES,
           closed: bool = False) -> Path:
    """A copy of a results folder whose runs converge `factor` times the samples (faster when < 1)."""
    dst.mkdir(parents=True)
    for p in src.glob("result_*.txt"):
        text = p.read_text(encoding="latin-1")
        text = pattern.sub(lambda m: m.group(1) + str(int(int(m.group(2)) * factor)), text)
        if closed:
            text = text.replace('"submission_division", "value": "open"', '"submission_division", "value": "closed"')
        (dst / p.name).write_text(text, encoding="latin-1")
    return dst


def _rcp(capsys, folder: Path) -> dict:
    assert main(["report", str(folder), "--format", "json", "--no-cpu-peak"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    return bench["rcp"]


@pytest.mark.parametrize("factor", [1.0, 0.97, 0.5])
def test_llama_offline_verdict_is_the_checkers(capsys, tmp_path: Path, mlperf_logs: Path, factor: float) -> None:
    folder = derive(mlperf_logs / LLAMA, tmp_path / "v4.0/llama2_70b_lora", factor)
    ok, msg, norm = official(folder, "4.0.0")
    mine = _rcp(capsys, folder)
    assert mine["verdict"] == ("pass" if ok else "fail")
    assert mine["normalization"] == pytest.approx(norm, rel=1e-12)
    assert mine["message"].startswith(msg)
    assert not (folder / "scaling.json").exists()  # a report never writes into the user's folder
    expected = {1.0: ("pass", False), 0.97: ("pass", True), 0.5: ("fail", True)}[factor]
    assert (mine["verdict"], mine["normalization"] > 1.0) == expected


def test_real_folders(capsys, mlperf_logs: Path) -> None:
    ok, msg, norm = official(mlperf_logs / KRAI, "2.1.0")
    mine = _rcp(capsys, mlperf_logs / KRAI)
    assert (mine["verdict"], mine["normalization"]) == ("pass" if ok else "fail", norm)
    assert mine["mean_epochs"] == 35.0  # 4 converged runs + 1 marked infinite, olympic mean of epochs
    # MosaicML's bert is open division: the package checker does not run the RCP checker there
    assert _rcp(capsys, mlperf_logs / BERT)["verdict"] == "n/a"


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_bert_counted_as_the_official_tools_count_it(capsys, tmp_path: Path, mlperf_logs: Path,
                                                     factor: float) -> None:
    """bert_train_samples=False (the summarizer's and the package checker's default): the eval records'
    epoch_num, which bert logs in samples; train_samples does not count."""
    folder = derive(mlperf_logs / BERT, tmp_path / "v2.1/bert", factor, _TRAIN_SAMPLES, closed=True)
    ok, msg, norm = official(folder, "2.1.0")
    mine = _rcp(capsys, folder)
    assert (mine["verdict"], mine["normalization"]) == ("pass" if ok else "fail", pytest.approx(norm))
    assert "samples" in mine["message"] and mine["mean_epochs"] > 1e5


def test_no_rcp_for_the_ruleset_is_na(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = tmp_path / "llama"
    shutil.copytree(mlperf_logs / LLAMA, folder)
    assert main(["report", str(folder), "--ruleset", "3.1.0", "--format", "json", "--no-cpu-peak"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    assert bench["rcp"]["verdict"] == "n/a" and "no RCP for llama2_70b_lora" in bench["rcp"]["message"]


def test_check_prints_the_verdict(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = derive(mlperf_logs / LLAMA, tmp_path / "v4.0/llama2_70b_lora", 0.97)
    main(["check", str(folder)])
    out = capsys.readouterr().out
    assert "RCP" in out and "pass ×1.019" in out


@pytest.mark.parametrize(("factor", "state"), [(1.0, "on track"), (0.97, "normalised"), (0.5, "fail")])
def test_live_projection_fed_run_by_run(tmp_path: Path, mlperf_logs: Path, factor: float, state: str) -> None:
    folder = derive(mlperf_logs / LLAMA, tmp_path / "llama", factor)
    files = sorted(str(p) for p in folder.glob("result_*.txt"))
    seen = []
    for k in range(1, len(files) + 1):
        p = project(files[:k], "llama2_70b_lora", "4.0.0", "closed")
        assert p.converged == k and p.required == 10 and p.remaining == 10 - k
        assert f"{k} of 10 runs converged, {10 - k} to go" in p.text
        seen.append(p.state)
    ok, _msg, norm = official(folder, "4.0.0")
    # with every run in, the projection is the checker's verdict
    assert seen[-1] == state
    assert (seen[-1] != "fail") == ok
    if state == "normalised":
        assert p.normalization == pytest.approx(norm) and f"×{norm:.3f}" in p.text
    if state == "fail":
        assert "will fail: mean" in p.text and "allowed" in p.text
        assert p.mean_epochs is not None and p.allowed_min is not None and p.mean_epochs < p.allowed_min
    assert project([], "llama2_70b_lora", "4.0.0").state == "waiting"
    assert project(files, "llama2_70b_lora", "4.0.0", "open").state == "n/a"


def test_verdict_is_cached_by_file_identity(capsys, tmp_path: Path, mlperf_logs: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from perfwatch.core.mlperf import bounded

    folder = derive(mlperf_logs / LLAMA, tmp_path / "v4.0/llama2_70b_lora", 0.97)
    first = _rcp(capsys, folder)

    def no_second_run(*_a: object) -> None:
        raise AssertionError("the checker ran again on unchanged files")

    monkeypatch.setattr(bounded, "rcp_verdict", no_second_run)
    assert _rcp(capsys, folder) == first
    alias = folder.parent / "the-same-folder"  # another spelling of the same files: the same verdict, kept
    alias.symlink_to(folder, target_is_directory=True)
    assert _rcp(capsys, alias) == first
    # a changed file is judged again
    log = folder / "result_0.txt"
    log.write_text(log.read_text(encoding="latin-1") + "\n", encoding="latin-1")
    with pytest.raises(AssertionError, match="ran again"):
        main(["report", str(folder), "--format", "json", "--no-cpu-peak"])


def test_incomplete_folder_is_not_judged(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = tmp_path / "v4.0/llama2_70b_lora"
    folder.mkdir(parents=True)
    for i in range(3):
        shutil.copy(mlperf_logs / LLAMA / f"result_{i}.txt", folder)
    verdict = _rcp(capsys, folder)
    assert verdict["verdict"] == "n/a" and "3 of the 10 runs" in verdict["message"]
    assert rc.submission_runs["training"]["llama2_70b_lora"] == 10


def test_live_projection_over_a_runbook_fed_file_by_file(tmp_path: Path, mlperf_logs: Path) -> None:
    """What the live views print after each run_stop: the folder's projection from its stopped runs."""
    from perfwatch.core.model.book import RunBook
    from perfwatch.core.results.live_rcp import projection_for

    src = derive(mlperf_logs / LLAMA, tmp_path / "src", 0.97)
    folder = tmp_path / "v4.0" / "llama2_70b_lora"
    folder.mkdir(parents=True)
    book = RunBook(folder)
    texts = []
    for i in range(10):
        dst = folder / f"result_{i}.txt"
        data = (src / f"result_{i}.txt").read_bytes()
        half = data.rfind(b"run_stop")
        head = data[: data.rfind(b"\n", 0, half) + 1]
        dst.write_bytes(head)  # still running: no run_stop yet
        book.feed_file(dst, head)
        assert projection_for(book.views(), f"result_{i}") is None or i > 0
        dst.write_bytes(data)
        book.feed_file(dst, data[len(head):])  # the appended lines, as the watcher hands them over
        proj = projection_for(book.views(), f"result_{i}")
        assert proj is not None and proj.converged == i + 1
        texts.append(proj.text)
    assert texts[-1].startswith("RCP: will be normalised ×1.019") and "10 of 10 runs converged, 0 to go" in texts[-1]
    _ok, _msg, norm = official(folder, "4.0.0")
    assert f"×{norm:.3f}" in texts[-1]
    # open division / no RCP rule: nothing to project
    assert projection_for([], "x") is None


def test_a_benchmark_the_rcp_checker_has_no_size_for_is_na() -> None:
    """v2.1 ships rcps_dlrm.json, but the checker knows no submission size for dlrm: it stops with KeyError,
    and the summarizer then gives no RCP verdict. perfwatch says n/a, not fail."""
    from perfwatch.core.mlperf import rcp

    with pytest.raises(KeyError):
        rc.RCP_Checker("training", "2.1.0", "dlrm", False)
    assert rcp.rcp_file("dlrm", "2.1.0") is not None
    why = rcp.not_applicable("dlrm", "2.1.0", "closed")
    assert why is not None and "no submission size for dlrm" in why
    assert rcp.folder_verdict(["x"] * 10, "dlrm", "2.1.0", "closed").verdict == "n/a"


def test_check_json_carries_the_rcp_verdict(capsys, tmp_path: Path, mlperf_logs: Path) -> None:
    folder = derive(mlperf_logs / LLAMA, tmp_path / "v4.0/llama2_70b_lora", 0.97)
    ok, _msg, norm = official(folder, "4.0.0")
    main(["check", str(folder), "--format", "json"])
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == 10 and len({json.dumps(r["rcp"]) for r in runs}) == 1  # one folder, one verdict
    assert runs[0]["rcp"]["verdict"] == ("pass" if ok else "fail")
    assert runs[0]["rcp"]["normalization"] == pytest.approx(norm)


def test_division_comes_from_the_system_description(capsys) -> None:
    """Intel's v3.1 bert logs say closed, its systems/*.json says open (what the summarizer and the package
    checker read): no RCP verdict, where the logs' division would give one."""
    intel = Path(__file__).parent / "data/mlperf-more/v3.1/Intel"
    described = json.loads((intel / "systems/16-nodes-SPR-pytorch-open.json").read_text())["division"]
    assert described == "open"
    folder = intel / "results/16-nodes-SPR-pytorch-open/bert"
    assert '"submission_division", "value": "closed"' in (folder / "result_0.txt").read_text(encoding="latin-1")
    assert main(["report", str(intel), "--format", "json", "--no-cpu-peak"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    assert bench["division"] == "open" and bench["rcp"]["verdict"] == "n/a"
    assert bench["division_source"] == "systems/16-nodes-SPR-pytorch-open.json (the logs say closed)"
    main(["check", str(intel), "--format", "json"])
    assert {r["rcp"]["verdict"] for r in json.loads(capsys.readouterr().out)} == {"n/a"}


def test_the_checker_reads_the_same_from_the_lines_handed_to_it(tmp_path: Path) -> None:
    """The RCP checker is handed copies holding only the lines its reader can use: on every bundled result
    file its reader gets the same (converged, epochs, batch size, benchmark) from the copy as from the file."""
    from perfwatch.core.mlperf.rcp import BERT_TRAIN_SAMPLES, _write_relevant

    files = sorted(p for tree in ("mlperf-logs", "mlperf-power", "mlperf-more")
                   for p in (Path(__file__).parent / "data" / tree).rglob("result_*.txt") if "/power/" not in str(p))
    assert len(files) == 65  # 35 + 10 + 20
    logging.disable(logging.WARNING)
    try:
        for i, src in enumerate(files):
            ruleset = "3.1.0" if "/v3.1/" in str(src) else "4.0.0" if "/v4.0/" in str(src) else "2.1.0"
            copy = tmp_path / f"result_{i}.txt"
            _write_relevant(str(src), str(copy))
            assert copy.stat().st_size < src.stat().st_size
            assert rc.read_submission_file(str(copy), ruleset, BERT_TRAIN_SAMPLES) == \
                rc.read_submission_file(str(src), ruleset, BERT_TRAIN_SAMPLES), src
    finally:
        logging.disable(logging.NOTSET)


def test_the_readers_samples_count_benchmarks_are_the_installed_readers() -> None:
    """`rcp.READER_SAMPLES_COUNT` mirrors the set literal in the installed `read_submission_file`: a newer
    mlperf_logging that counts another benchmark in samples fails this test, not a verdict."""
    import ast
    import inspect

    from perfwatch.core.mlperf.rcp import READER_SAMPLES_COUNT

    tree = ast.parse(inspect.getsource(rc.read_submission_file))
    sets = [{c.value for c in node.elts if isinstance(c, ast.Constant)} for node in ast.walk(tree)
            if isinstance(node, ast.Set)]
    assert set(READER_SAMPLES_COUNT) in sets
