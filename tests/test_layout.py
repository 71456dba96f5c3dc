"""The LOGDIR layout and perfwatch's own log keys: names on disk are a contract with old LOGDIRs and logs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfwatch.core import keys, layout
from perfwatch.core.model import book


def test_file_names_are_the_ones_old_logdirs_have() -> None:
    # literals on purpose: a LOGDIR written by an earlier perfwatch must still be read
    assert (layout.REGISTRY_FILE, layout.LOCK_FILE, layout.REQUESTS_DIR) == (
        "perfwatch.json", ".scheduler.lock", "requests")
    assert (layout.MLLOG_FILE, layout.OUTPUT_FILE, layout.TELEMETRY_FILE, layout.EXIT_FILE) == (
        "mllog.txt", "output.log", "telemetry.jsonl", "exit.json")
    assert layout.archived_name(2, "mllog.txt") == ".attempt-2.mllog.txt"


def test_own_log_keys_are_the_ones_old_logs_carry() -> None:
    assert {keys.FLOPS_PER_SAMPLE, keys.TOKENS_PER_SAMPLE, keys.PRECISION, keys.WORLD_SIZE, keys.DEVICE,
            keys.THREADS, keys.TARGET} == {
        "perfwatch_flops_per_sample", "perfwatch_tokens_per_sample", "perfwatch_precision",
        "perfwatch_world_size", "perfwatch_device", "perfwatch_threads", "perfwatch_target"}
    assert all(k.startswith("perfwatch_") for k in keys.OWN_KEYS)


@pytest.mark.parametrize(("rel", "expected"), [
    ("mlp.bs32.r0/mllog.txt", "mlp.bs32.r0"),
    ("mlp.bs32.r0/output.log", "mlp.bs32.r0"),
    ("sweep/a/r1/mllog.txt", "sweep/a/r1"),
    ("bert/result_0.txt", "bert/result_0"),
    ("train.log", "train"),
    ("x_mllog", "x_mllog"),
])
def test_one_run_id_rule_for_report_check_and_the_live_view(tmp_path: Path, rel: str, expected: str) -> None:
    path = tmp_path / rel
    assert layout.run_id_for(path, tmp_path) == expected
    assert layout.run_dir(tmp_path, expected) == (path.parent if path.name in layout.RUN_LOGS else tmp_path / expected)


def test_a_single_file_is_named_against_its_folder(tmp_path: Path) -> None:
    run = tmp_path / "run7"
    run.mkdir()
    (run / "mllog.txt").write_text(':::MLLOG {"key": "run_start", "value": null, "time_ms": 1, '
                                   '"event_type": "INTERVAL_START", "metadata": {}}\n')
    assert layout.run_id_for(run / "mllog.txt", run / "mllog.txt") == "run7"
    loaded = book.load(run / "mllog.txt")
    assert list(loaded.runs) == ["run7"]  # report on one file: the same id as its folder gives


def test_perfwatch_own_files_and_hidden_files_are_never_logs(tmp_path: Path) -> None:
    for name in ("perfwatch.json", "telemetry.jsonl", "exit.json", ".attempt-1.mllog.txt",
                 ".perfwatch.json.12.tmp", "mllog.txt.1", "output.log.gz", "output.log.12", "result_0.txt.xz",
                 "result_1.txt.zst"):
        assert not layout.is_log_name(tmp_path / name), name
    for name in ("mllog.txt", "output.log", "result_3.txt", "bert_mllog", "v2.1.txt", "run.1.log", "mllog.1.txt"):
        assert layout.is_log_name(tmp_path / name), name


def test_atomic_write_leaves_a_whole_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / layout.REGISTRY_FILE
    layout.write_json_atomic(target, {"runs": [1]})
    layout.write_json_atomic(target, {"runs": [1, 2]})
    assert json.loads(target.read_text()) == {"runs": [1, 2]}
    assert os.listdir(tmp_path) == [layout.REGISTRY_FILE]


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / layout.REGISTRY_FILE
    layout.write_json_atomic(target, {"ok": True})
    with pytest.raises(TypeError):
        layout.write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"ok": True}
    assert os.listdir(tmp_path) == [layout.REGISTRY_FILE]


def test_the_repeat_rule_reads_back_what_a_campaign_writes() -> None:
    """A campaign names each repeat with `repeat_id`; reports group by `without_repeat`: for every run of
    the demo campaign the two agree with the group and index the campaign itself records."""
    from perfwatch.core.control.campaign import load_campaign
    from perfwatch.core.layout import repeat_id, without_repeat

    campaign = load_campaign(Path(__file__).parent.parent / "workloads" / "demo.yaml")
    repeated = [r for r in campaign.runs if r.index > 0]
    assert repeated  # the demo repeats its grid points
    for run in campaign.runs:
        assert run.run_id == repeat_id(run.group, run.index) and without_repeat(run.run_id) == run.group
    assert without_repeat("mlp.bs32.rx") == "mlp.bs32.rx" and without_repeat("result_3") == "result_3"
