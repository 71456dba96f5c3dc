"""Campaign YAML: valid files expand into the right runs; malformed ones are rejected with file:line:field (R5)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from perfwatch.cli import main
from perfwatch.core.control.campaign import CampaignError, load_campaign
from perfwatch.core.control.yaml_nodes import parse_duration

FAKE = str(Path(__file__).resolve().parents[1] / "tests/workloads_fake/fake.py")
ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load(tmp_path: Path, text: str):
    return load_campaign(write(tmp_path, text), base=ROOT)


# ---- valid campaigns ------------------------------------------------------------------------------
def test_grid_repeats_seeds_and_readable_ids(tmp_path: Path) -> None:
    c = load(tmp_path, f"""
        name: demo
        defaults: {{repeat: 2, seed: 100, timeout: 1h30m, stall_after: 60s}}
        jobs:
          - name: mlp
            cmd: [python, {FAKE}]
            args: {{--batch-size: [32, 64], --lr: 0.05, --seed: "{{seed}}", --tag: "{{run_id}}", --fast: true}}
        baseline: mlp.bs32
        """)
    ids = [r.run_id for r in c.runs]
    assert ids == ["mlp.bs32.r0", "mlp.bs32.r1", "mlp.bs64.r0", "mlp.bs64.r1"]
    r = c.runs[3]
    assert r.seed == 101 and r.timeout == 5400 and r.stall_after == 60
    assert r.argv[0] == sys.executable  # `python` means the interpreter perfwatch runs in
    assert list(r.argv[1:]) == [FAKE, "--batch-size", "64", "--lr", "0.05", "--seed", "101",
                                "--tag", "mlp.bs64.r1", "--fast"]
    assert c.baseline == "mlp.bs32"


def test_exponent_numbers_without_a_dot_or_sign_are_numbers(tmp_path: Path) -> None:
    # YAML 1.1 reads 9.895e11 as a string; users write it so (and YAML 1.2 says it is a float)
    c = load(tmp_path, f"""
        jobs:
          - name: mlp
            cmd: [python, {FAKE}]
            flops_per_sample: 9.895e11
            args: {{--lr: 1e-3, --tag: "1e5"}}
        """)
    r = c.runs[0]
    assert r.flops_per_sample == 989_500_000_000.0
    assert list(r.argv[2:]) == ["--lr", "0.001", "--tag", "1e5"]  # quoted stays a string


def test_explicit_seeds_set_repeat_and_two_axis_ids(tmp_path: Path) -> None:
    c = load(tmp_path, f"""
        jobs:
          - name: cnn
            seeds: [7, 11, 13]
            cmd: [python, {FAKE}]
            args: {{--batch-size: [16, 32], --precision: [fp32, bf16]}}
        """)
    assert len(c.runs) == 12
    assert c.runs[0].run_id == "cnn.bs16_precisionfp32.r0"
    assert [r.seed for r in c.runs[:3]] == [7, 11, 13]


def test_torchrun_job_goes_through_torch_distributed_run(tmp_path: Path) -> None:
    c = load(tmp_path, f"""
        jobs:
          - name: ddp
            launcher: {{type: torchrun, nproc_per_node: 2}}
            cmd: [python, {FAKE}]
          - name: multi
            launcher: {{type: torchrun, nproc_per_node: 4, nnodes: 2, node_rank: 1, rdzv_endpoint: "node0:29500"}}
            cmd: [{FAKE}]
        """)
    ddp, multi = c.runs
    assert ddp.argv[:3] == (sys.executable, "-m", "torch.distributed.run")
    assert "--nproc-per-node=2" in ddp.argv and "--standalone" in ddp.argv and ddp.argv[-1] == FAKE
    assert "--node-rank=1" in multi.argv and "--rdzv-endpoint=node0:29500" in multi.argv


def test_cache_clear_cmd_top_level_default_and_per_job_override(tmp_path: Path) -> None:
    c = load(tmp_path, f"""
        cache_clear_cmd: [sync]
        cache_clear_timeout: 2m
        jobs:
          - {{name: a, cmd: [python, {FAKE}]}}
          - {{name: b, cmd: [python, {FAKE}], cache_clear_cmd: [python, {FAKE}, --tag, "{{run_id}}"]}}
          - {{name: c, cmd: [python, {FAKE}], cache_clear_cmd: null}}
        """)
    a, b, c_ = c.runs
    assert a.cache_clear_cmd == ("sync",) and a.cache_clear_timeout == 120
    assert b.cache_clear_cmd == (sys.executable, FAKE, "--tag", "b.r0")  # templated; python = our interpreter
    assert c_.cache_clear_cmd is None  # a job can turn the campaign's cache clear off
    plain = load(tmp_path, f"jobs:\n  - {{name: a, cmd: [python, {FAKE}]}}\n").runs[0]
    assert plain.cache_clear_cmd is None and plain.cache_clear_timeout == 60


def test_durations() -> None:
    assert parse_duration("10m") == 600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90") == 90
    assert parse_duration("2.5s") == 2.5
    assert parse_duration("ten minutes") is None


# ---- malformed campaigns (R5) -------------------------------------------------------------------------
OK_JOB = f"""  - name: mlp
    cmd: [python, {FAKE}]
"""

BAD = [
    # (yaml, line, field, words in the message)
    ("name: x\n", 1, "", "missing key 'jobs'"),
    ("jobs: []\n", 1, "jobs", "empty list"),
    ("jobs: {a: 1}\n", 1, "jobs", "expected a list, got mapping"),
    ("jobz:\n" + OK_JOB, 1, "jobz", "did you mean 'jobs'"),
    ("jobs:\n" + OK_JOB + "    repaet: 3\n", 4, "jobs[0].repaet", "did you mean 'repeat'"),
    ("jobs:\n" + OK_JOB + "    repeat: three\n", 4, "jobs[0].repeat", "expected an integer, got string"),
    ("jobs:\n" + OK_JOB + "    repeat: 0\n", 4, "jobs[0].repeat", "expected an integer >= 1"),
    ("jobs:\n" + OK_JOB + "    args: {--batch-size: []}\n", 4, "jobs[0].args.--batch-size", "empty list"),
    ("jobs:\n" + OK_JOB + "    args:\n      --batch-size: {a: 1}\n", 5, "jobs[0].args.--batch-size",
     "expected a scalar or a list, got mapping"),
    ("jobs:\n" + OK_JOB + "    args: {batch-size: 3}\n", 4, "jobs[0].args.batch-size", "start with -"),
    ("jobs:\n" + OK_JOB + "    args: {--bs: [1, 1]}\n", 4, "jobs[0].args.--bs", "duplicate values"),
    ("jobs:\n  - name: mlp\n    cmd: python train.py\n", 3, "jobs[0].cmd", "no shell strings"),
    ("jobs:\n  - name: mlp\n    cmd: [python, missing_script.py]\n", 3, "jobs[0].cmd[1]", "no such script"),
    ("jobs:\n  - name: mlp\n    cmd: [./no/such/prog]\n", 3, "jobs[0].cmd[0]", "no such file"),
    ("jobs:\n  - name: mlp\n    cmd: [no-such-program-xyz]\n", 3, "jobs[0].cmd[0]", "not found on PATH"),
    ("jobs:\n  - cmd: [python, " + FAKE + "]\n", 2, "jobs[0]", "missing key 'name'"),
    ("jobs:\n  - name: mlp\n", 2, "jobs[0]", "missing key 'cmd'"),
    ("jobs:\n" + OK_JOB + OK_JOB, 4, "jobs[1].name", "duplicate job name (first on line 2)"),
    ("jobs:\n" + OK_JOB + "    timeout: soon\n", 4, "jobs[0].timeout", "expected a duration"),
    ("defaults: {stall_after: 5 minutes}\njobs:\n" + OK_JOB, 1, "defaults.stall_after", "expected a duration"),
    ("defaults: {stall_factor: 1}\njobs:\n" + OK_JOB, 1, "defaults.stall_factor", "expected a number from 2 to 1000"),
    ("defaults: {on_stall: reboot}\njobs:\n" + OK_JOB, 1, "defaults.on_stall", "expected one of capture, stop, restart"),
    ("jobs:\n" + OK_JOB + "    target: {value: high}\n", 4, "jobs[0].target.value", "expected a number"),
    ("jobs:\n" + OK_JOB + "    target: {key: eval_accuracy}\n", 4, "jobs[0].target", "missing key 'value'"),
    ("jobs:\n" + OK_JOB + "    exit_at_target: maybe\n", 4, "jobs[0].exit_at_target", "expected true or false"),
    ("jobs:\n" + OK_JOB + "    precision: fp64\n", 4, "jobs[0].precision", "expected one of"),
    ("jobs:\n" + OK_JOB + "    devices: -1\n", 4, "jobs[0].devices", ">= 0"),
    ("jobs:\n" + OK_JOB + "    args: {--seed: '{sed}'}\n", 4, "jobs[0].args.--seed", "unknown placeholder {sed}"),
    ("jobs:\n" + OK_JOB + "    launcher: {type: mpirun}\n", 4, "jobs[0].launcher.type", "expected 'direct' or 'torchrun'"),
    ("jobs:\n" + OK_JOB + "    launcher: {type: torchrun, nnodes: 2}\n", 4, "jobs[0].launcher", "rdzv_endpoint"),
    ("jobs:\n" + OK_JOB + "    env: {A: [1, 2]}\n", 4, "jobs[0].env.A", "expected a string or number"),
    ("jobs:\n" + OK_JOB + "    cwd: no/such/dir\n", 4, "jobs[0].cwd", "no such directory"),
    ("jobs:\n" + OK_JOB + "    seeds: [1, 2]\n    repeat: 3\n", 4, "jobs[0].seeds", "2 seeds for repeat: 3"),
    ("jobs:\n" + OK_JOB + "baseline: cnn\n", 4, "baseline", "no job or run group 'cnn'"),
    ("scheduler: {max_parallel: many}\njobs:\n" + OK_JOB, 1, "scheduler.max_parallel", "expected an integer"),
    ("system: {division: semi}\njobs:\n" + OK_JOB, 1, "system.division", "expected 'open' or 'closed'"),
    ("name: a\nname: b\njobs:\n" + OK_JOB, 2, "name", "duplicate key (first defined on line 1)"),
    ("jobs:\n" + OK_JOB + "    args: {--lr: 0.1, --lr: 0.2}\n", 4, "jobs[0].args.--lr", "duplicate key"),
    ("jobs:\n  - name: mlp\n    cmd: [python, " + FAKE + "\n", 4, "", "invalid YAML"),
    ("jobs:\n" + OK_JOB + "    flops_per_sample: -5\n", 4, "jobs[0].flops_per_sample", "positive"),
    ("logdir: 'runs/{nam}'\njobs:\n" + OK_JOB, 1, "logdir", "unknown placeholder {nam}"),
    ("", 1, "", "empty"),
    # cache_clear_cmd: an argv list like cmd, checked before anything starts
    ("cache_clear_cmd: sync; echo 3 > /proc/sys/vm/drop_caches\njobs:\n" + OK_JOB, 1, "cache_clear_cmd",
     "no shell strings"),
    ("jobs:\n" + OK_JOB + "    cache_clear_cmd: []\n", 4, "jobs[0].cache_clear_cmd", "empty command"),
    ("defaults:\n  cache_clear_cmd: [no-such-dropper-xyz]\njobs:\n" + OK_JOB, 2, "defaults.cache_clear_cmd[0]",
     "not found on PATH"),
    ("jobs:\n" + OK_JOB + "    cache_clear_cmd: [python, no_such_clear.py]\n", 4, "jobs[0].cache_clear_cmd[1]",
     "no such script"),
    ("jobs:\n" + OK_JOB + "    cache_clear_cmd: [sync, {a: 1}]\n", 4, "jobs[0].cache_clear_cmd[1]",
     "expected a string, got mapping"),
    ("jobs:\n" + OK_JOB + "    cache_clear_cmd: [sync, '{rnu_id}']\n", 4, "jobs[0].cache_clear_cmd[1]",
     "unknown placeholder {rnu_id}"),
    ("cache_clear_timeout: soon\njobs:\n" + OK_JOB, 1, "cache_clear_timeout", "expected a duration"),
    ("cache_clear_cmd: [sync]\ndefaults:\n  cache_clear_cmd: [sync]\njobs:\n" + OK_JOB, 3,
     "defaults.cache_clear_cmd", "also set at the top level (line 1)"),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), BAD, ids=[f"bad{i:02d}" for i in range(len(BAD))])
def test_malformed_campaign_names_file_line_field(tmp_path: Path, text: str, line: int, field: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CampaignError) as info:
        load_campaign(path, base=ROOT)
    err = info.value
    assert (err.file, err.line, err.field) == (str(path), line, field), str(err)
    assert words in err.message, str(err)
    assert str(err).startswith(f"{path}:{line}: {field}" if field else f"{path}:{line}: ")


def test_cli_rejects_with_exit_2_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    logdir = tmp_path / "logdir"
    path = tmp_path / "c.yaml"
    path.write_text(f"jobs:\n  - name: mlp\n    cmd: [python, {FAKE}]\n    args: {{--batch-size: []}}\n")
    assert main(["launch", str(path), "--headless", "--logdir", str(logdir)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4: jobs[0].args.--batch-size: empty list" in err
    assert not logdir.exists()


def test_dry_run_prints_plan_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    logdir = tmp_path / "logdir"
    path = tmp_path / "c.yaml"
    path.write_text(f"jobs:\n  - name: mlp\n    repeat: 2\n    cmd: [python, {FAKE}]\n"
                    f"    args: {{--batch-size: [8, 16]}}\n")
    assert main(["launch", str(path), "--dry-run", "--logdir", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "4 runs" in out and "mlp.bs16.r1" in out and "--batch-size 16" in out
    assert not logdir.exists()
