"""`perfwatch package`: MLPerf layout, system JSON MLPerf accepts, no overwrite, nothing outside --out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfwatch.cli import main
from perfwatch.core.mlperf.system import required_fields
from perfwatch.core.results.submission import PackageError, package, safe_component

DATA = Path(__file__).parent / "data" / "mlperf-logs"
METHODS = DATA / "v2.1/MosaicML/results/8xA100_80GB-methods"
LLAMA = DATA / "v4.0/NVIDIA/results/h200_ngc24.04_nemo/llama2_70b_lora"
ROOT = Path(__file__).resolve().parent.parent


def official(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_layout_and_mlperf_tools_accept_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "submission"
    rc = main(["package", str(LLAMA.parent), "--out", str(out), "--submitter", "NVIDIA", "--system", "h200x8"])
    text = capsys.readouterr().out
    assert rc == 0, text
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [f"results/h200x8/llama2_70b_lora/result_{i}.txt" for i in range(10)] + ["systems/h200x8.json"]
    for i in range(10):  # byte copies, numbered by repetition
        assert (out / f"results/h200x8/llama2_70b_lora/result_{i}.txt").read_bytes() == \
            (LLAMA / f"result_{i}.txt").read_bytes()
    desc = json.loads((out / "systems/h200x8.json").read_text())
    assert set(required_fields()) <= set(desc)
    assert desc["submitter"] == "NVIDIA" and desc["division"] == "closed" and desc["system_name"] == "h200x8"
    assert desc["status"] == "Available on-premise"  # the 4.0 checker rejects plain "onprem"
    assert "compliance_checker: 10/10 result files pass" in text
    assert "system_desc_checker: PASS" in text and "package_checker: PASS" in text
    # the same verdicts from MLPerf's tools run on their own
    sd = official(["mlperf_logging.system_desc_checker", str(out / "systems/h200x8.json"), "training", "4.0.0",
                   "--log_output", str(tmp_path / "sd.log")], tmp_path)
    assert "System description checker passed" in sd.stdout + sd.stderr
    pc = official(["mlperf_logging.package_checker", str(out), "training", "4.0.0",
                   "--log_output", str(tmp_path / "pc.log")], tmp_path)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in pc.stdout + pc.stderr


def test_unknown_fields_are_empty_and_listed(tmp_path: Path) -> None:
    r = package(METHODS, tmp_path / "o", submitter="MosaicML", run_checks=False)
    desc = json.loads((tmp_path / "o" / r.system_json).read_text())
    assert r.unknown_fields and all(desc[f] == "" for f in r.unknown_fields)
    assert {f for f, v in desc.items() if v == ""} == set(r.unknown_fields)
    assert desc["host_processor_vcpu_count"] == str(os.cpu_count())
    assert r.division == "open"  # from the logs


def test_refuses_to_overwrite_a_result_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    package(METHODS, out, submitter="MosaicML", system="s", run_checks=False)
    victim = out / "results/s/bert/result_3.txt"
    victim.write_text("hand-edited\n")
    before = snapshot(out)
    rc = main(["package", str(METHODS), "--out", str(out), "--submitter", "MosaicML", "--system", "s"])
    assert rc == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert snapshot(out) == before


def _hostile_log(folder: Path, benchmark: str, device: str = "cpu", world: int = 1) -> None:
    src = (METHODS / "bert/result_0.txt").read_text()
    src = src.replace('"value": "bert"', f'"value": {json.dumps(benchmark)}', 1)
    extra = (f':::MLLOG {{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "perfwatch_device", '
             f'"value": {json.dumps(device)}, "metadata": {{}}}}\n'
             f':::MLLOG {{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "perfwatch_world_size", '
             f'"value": {world}, "metadata": {{}}}}\n')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mllog.txt").write_text(extra + src)


HOSTILE = ["../../escaped", "/tmp/absolute", "a\x00b", "..", "x/../../y", "..\\..\\win", "."]


def test_hostile_names_never_write_outside_out(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    for i, name in enumerate(HOSTILE):
        _hostile_log(logdir / f"run{i} $(touch x) ..", name, device=f"../../dev{i}", world=2)
    out = tmp_path / "deep" / "out"
    outside_before = snapshot(tmp_path)
    systems = ["../../../sys", "/etc/passwd", "a\x00b", "..", None]
    for n, system in enumerate(systems):
        target = out / str(n)
        r = package(logdir, target, submitter="../evil\x00org", system=system, run_checks=False)
        written = [p for p in tmp_path.rglob("*") if p.is_file() and str(p) not in outside_before]
        assert written and all(target.resolve() in p.resolve().parents for p in written), written
        for p in written:  # each written name is one safe component per level
            rel = p.relative_to(target)
            assert all(part not in ("", ".", "..") and not part.startswith(".") for part in rel.parts)
            assert "\x00" not in str(rel)
        outside_before.update({str(p): p.read_bytes() for p in written})
        assert len(r.placed) == len(HOSTILE)
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/absolute").exists()
    assert not (tmp_path / "deep" / "sys").exists()
    assert r.system == "2x.._.._dev0_perfwatch"  # the default name, one safe component


def test_symlink_planted_in_out_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "results").symlink_to(elsewhere)
    with pytest.raises(PackageError, match="symlink"):
        package(METHODS, out, submitter="x", system="s", run_checks=False)
    assert list(elsewhere.iterdir()) == []


def test_safe_component() -> None:
    assert safe_component("../../etc", "f") == "_.._etc"
    assert safe_component("/abs", "f") == "_abs"
    assert safe_component("..", "f") == "f"
    assert safe_component("a\x00b", "f") == "a_b"
    assert safe_component("8xNVIDIA_A100-SXM4-80GB_perfwatch", "f") == "8xNVIDIA_A100-SXM4-80GB_perfwatch"


def test_default_system_name_from_logged_device(tmp_path: Path) -> None:
    _hostile_log(tmp_path / "logs" / "bert.r0", "bert", device="NVIDIA A100-SXM4-80GB", world=8)
    r = package(tmp_path / "logs", tmp_path / "o", submitter="me", run_checks=False)
    assert r.system == "8xNVIDIA_A100-SXM4-80GB_perfwatch"
    desc = json.loads((tmp_path / "o" / r.system_json).read_text())
    assert desc["accelerators_per_node"] in ("8", str(desc["accelerators_per_node"]))


def test_unfinished_runs_are_skipped_and_said(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(METHODS / "bert", logs)
    lines = (logs / "result_5.txt").read_text().splitlines()
    (logs / "result_5.txt").write_text("\n".join(ln for ln in lines if '"run_stop"' not in ln) + "\n")
    r = package(logs, tmp_path / "o", submitter="MosaicML", run_checks=False)
    assert len(r.placed) == 9
    assert any("result_5" in n and "no run_stop" in n for n in r.notes)


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["package", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--submitter", "x"]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    assert main(["package", str(METHODS), "--out", str(tmp_path / "f"), "--submitter", "x"]) == 2
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["package", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--submitter", "x"]) == 2
    assert "no finished run" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not (ROOT / "workloads/mlp.py").exists(), reason="workloads/mlp.py not there")
def test_package_a_real_workload_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "campaign" / "mlp.r0"
    run.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "workloads/mlp.py"), "--device", "cpu", "--mllog", str(run / "mllog.txt"), "--train-samples",
         "4096", "--eval-samples", "512", "--hidden", "64", "--depth", "2", "--batch-size", "256",
         "--target", "0.5", "--max-epochs", "20", "--no-flops"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "sub"
    r = package(tmp_path / "campaign", out, submitter="perfwatch")
    assert r.system == "1xCPU_perfwatch"
    [placed] = r.placed
    assert (out / placed.dest).read_bytes() == (run / "mllog.txt").read_bytes()
    assert r.system_check is not None and r.system_check.passed
    # our verdict is the official checker's, run on its own with the workload's rules (--config)
    check = r.compliance[0]
    argv = ["mlperf_logging.compliance_checker", "--ruleset", r.ruleset, "--log_output", str(tmp_path / "cc.log")]
    if check.config and not check.config.startswith("training_"):
        argv += ["--config", check.config]
    cc = official([*argv, str(out / placed.dest)], tmp_path)
    assert check.passed == (cc.returncode == 0)
    assert check.passed, check.messages  # perfwatch's workloads log what MLPerf's common rules ask for
    from perfwatch.core.ingest.mllog import parse_path
    from perfwatch.core.mlperf.live_checks import check_events

    assert check_events(parse_path(str(run / "mllog.txt"))[0]).passed is True


def _grid_logdir(tmp_path: Path) -> Path:
    """A real campaign plan (perfwatch.json from the scheduler) over a 2-point grid, 3 repeats each,
    whose runs' mllog.txt are real llama2_70b_lora logs."""
    from launch_helpers import scheduler

    sched = scheduler(tmp_path, """
        name: grid
        defaults: {repeat: 3}
        jobs:
          - name: lora
            cmd: [python, -c, "pass"]
            benchmark: llama2_70b_lora
            args: {--lr: [0.0004, 0.0005]}
        """)
    sched.close(stop_runs=False)
    logdir = tmp_path / "logdir"
    ids = sorted(r["run_id"] for r in json.loads((logdir / "perfwatch.json").read_text())["runs"])
    assert len(ids) == 6
    for i, rid in enumerate(ids):
        (logdir / rid).mkdir(parents=True, exist_ok=True)
        (logdir / rid / "mllog.txt").write_bytes((LLAMA / f"result_{i}.txt").read_bytes())
    return logdir


def test_grid_points_are_separate_systems_never_repetitions(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    logdir = _grid_logdir(tmp_path)
    out = tmp_path / "sub"
    r = package(logdir, out, submitter="perfwatch", system="sys", run_checks=False)
    by_system: dict[str, list[str]] = {}
    for p in r.placed:
        by_system.setdefault(p.dest.split("/")[1], []).append(p.run_id)
    assert set(by_system) == {"sys_lr0.0004", "sys_lr0.0005"}, by_system
    for system, run_ids in by_system.items():
        lr = system.removeprefix("sys_")
        assert sorted(run_ids) == [f"lora.{lr}.r{i}" for i in range(3)]
        assert sorted(p.name for p in (out / "results" / system / "llama2_70b_lora").iterdir()) == \
            [f"result_{i}.txt" for i in range(3)]
        assert json.loads((out / "systems" / f"{system}.json").read_text())["system_name"] == system
    assert r.systems == ["sys_lr0.0004", "sys_lr0.0005"]
    assert any("2 configurations" in n and "lr0.0004 -> sys_lr0.0004" in n for n in r.notes)


def test_results_tree_keeps_each_system_apart(tmp_path: Path) -> None:
    """MosaicML's baseline and methods bert: two configurations, two systems, 10 repetitions each."""
    r = package(DATA / "v2.1/MosaicML/results", tmp_path / "o", submitter="MosaicML", system="a100",
                run_checks=False)
    systems = sorted({p.dest.split("/")[1] for p in r.placed})
    assert systems == ["a100_8xA100_80GB-baseline", "a100_8xA100_80GB-methods"]
    for s in systems:
        kind = s.removeprefix("a100_")
        files = sorted((tmp_path / "o/results" / s / "bert").iterdir())
        assert len(files) == 10
        sources = {p.source for p in r.placed if p.dest.split("/")[1] == s}
        assert all(f"/{kind}/" in src for src in sources)
