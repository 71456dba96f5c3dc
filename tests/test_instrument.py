"""perfwatch.instrument: the logger, the throughput meter, FLOPs counting, hyperparameters, rules."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from perfwatch.core.ingest.mllog import parse_path
from perfwatch.instrument import MLPerfLogger, ThroughputMeter, compliance, hparams
from perfwatch.instrument.flops import flops_per_sample

ROOT = Path(__file__).resolve().parents[1]


# ---- MLPerfLogger -------------------------------------------------------------
def test_logger_writes_file_only_and_run_stop_once(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sub" / "mllog.txt"
    log = MLPerfLogger(str(path), rank=0)
    log.init_start()
    log.submission("mlp_regression")
    log.init_stop()
    log.run_start()
    log.eval_accuracy(0.5, epoch_num=1, samples_count=128)
    assert log.run_stop("success", epoch_num=1, samples_count=128)
    assert not log.run_stop("aborted")  # a second run_stop (e.g. from a signal) is ignored
    log.close()
    out = capfd.readouterr()
    assert ":::MLLOG" not in out.out + out.err  # no duplicate copy on the console
    events, parser = parse_path(str(path))
    assert parser.bad_count == 0
    keys = [e.key for e in events]
    assert keys[:2] == ["cache_clear", "init_start"]
    assert keys.count("run_stop") == 1
    stop = events[-1]
    assert stop.key == "run_stop" and (stop.md or {})["status"] == "success"
    acc = next(e for e in events if e.key == "eval_accuracy")
    assert (acc.md or {}).get("epoch_num") == 1 and (acc.md or {}).get("samples_count") == 128


def test_logger_env_path_and_non_zero_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "env.txt"
    monkeypatch.setenv("PERFWATCH_MLLOG", str(path))
    other = MLPerfLogger(rank=1)
    other.init_start()
    other.close()
    assert not path.exists()  # only rank 0 writes
    main = MLPerfLogger(rank=0)
    main.event("seed", 3)
    main.close()
    events, _ = parse_path(str(path))
    assert [(e.key, e.value) for e in events] == [("seed", 3)]


def test_logger_without_destination_prints_to_stdout(monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PERFWATCH_MLLOG", raising=False)
    log = MLPerfLogger(rank=0)
    log.event("seed", 7)
    log.close()
    assert ':::MLLOG {' in capfd.readouterr().out


def test_logger_echo_copies_records_to_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = MLPerfLogger(str(tmp_path / "e.txt"), rank=0, echo=True)
    log.event("seed", 1)
    log.close()
    assert '"key": "seed"' in capfd.readouterr().out
    assert '"key": "seed"' in (tmp_path / "e.txt").read_text()


# ---- ThroughputMeter ------------------------------------------------------------
class _Sink:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict, dict]] = []

    def event(self, key: str, value: object = None, metadata: object = None) -> None:
        assert isinstance(value, dict) and isinstance(metadata, dict)
        self.records.append((key, value, metadata))


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_meter_counts_global_samples_per_optimizer_step() -> None:
    # 2 processes x 4 micro-steps x 8 samples = 64 samples per optimizer step, 0.125 s per step
    sink, clock = _Sink(), _Clock()
    meter = ThroughputMeter(sink, interval_s=1.0, tokens_per_sample=32, clock=clock)
    logged = []
    for _ in range(25):
        clock.t += 0.125
        logged.append(meter.step(2 * 4 * 8, loss=torch.tensor(0.25)))
    assert sum(logged) == 3 and logged[7] and logged[15] and logged[23]  # once a second, not per step
    key, value, md = sink.records[0]
    assert key == "tracked_stats"
    assert value["throughput"] == pytest.approx(512.0)
    assert value["tokens_per_s"] == pytest.approx(512.0 * 32)
    assert value["loss"] == pytest.approx(0.25)
    assert md == {"step": 8, "samples_count": 512}
    meter.flush()  # the partial window at an epoch end
    assert sink.records[-1][2] == {"step": 25, "samples_count": 1600}
    assert sink.records[-1][1]["throughput"] == pytest.approx(512.0)


def test_meter_excludes_time_before_restart_window() -> None:
    sink, clock = _Sink(), _Clock()
    meter = ThroughputMeter(sink, interval_s=0.5, clock=clock)
    clock.t += 30.0  # e.g. an eval: not training time
    meter.restart_window()
    clock.t += 0.5
    meter.step(100)
    assert sink.records[0][1]["throughput"] == pytest.approx(200.0)


# ---- FLOPs -------------------------------------------------------------------------
def test_flops_per_sample_counts_forward_and_backward_without_touching_the_model() -> None:
    model = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(16, 8)
    fps = flops_per_sample(model, lambda m, b: m(b[0]).sum(), (x,))
    # fwd 2*(8*4 + 4*2) = 80; bwd: dW2 16, dX2 16, dW1 64 (no grad for the input) -> 176
    assert fps == 176
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


# ---- hyperparameters ----------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    return hparams.base_parser("t", batch_size=64, lr=0.1, max_epochs=5, target=0.9)


def test_json_config_values_apply_and_command_line_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "hp.json"
    cfg.write_text(json.dumps({"batch_size": 256, "lr": 0.02, "--max-epochs": 9, "deterministic": True}))
    args = hparams.parse_with_config(_parser(), ["--config", str(cfg), "--batch-size", "32"])
    assert args.batch_size == 32  # command line beats the file
    assert args.lr == 0.02 and args.max_epochs == 9 and args.deterministic is True
    assert hparams.parse_with_config(_parser(), []).batch_size == 64  # default untouched without a file


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"batch_size": 1.5}, "'batch_size' (--batch-size) must be an integer"),
        ({"batch_size": "lots"}, "'batch_size' (--batch-size) must be a positive integer"),
        ({"precision": "fp8"}, "'precision' (--precision) must be one of fp32, bf16"),
        ({"learning_rate_typo": 1}, "unknown hyperparameter 'learning_rate_typo'"),
        ({"deterministic": "yes"}, "must be true or false"),
    ],
)
def test_bad_json_hyperparameters_are_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               content: dict, message: str) -> None:
    cfg = tmp_path / "hp.json"
    cfg.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as exc:
        hparams.parse_with_config(_parser(), ["--config", str(cfg)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0.5"], "argument --batch-size: must be a positive integer, got '0.5'"),
        (["--max-epochs", "0"], "argument --max-epochs: must be a positive integer, got '0'"),
        (["--lr", "-1"], "argument --lr: must be a positive number, got '-1'"),
    ],
)
def test_bad_command_line_types_exit_2_naming_the_flag(argv: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "workloads" / "mlp.py"), *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert ":::MLLOG" not in proc.stdout  # nothing was started


# ---- compliance rules ------------------------------------------------------------------
@pytest.mark.parametrize("ruleset", compliance.SHIPPED_RULESETS)
def test_shipped_rules_match_the_installed_official_rules(ruleset: str) -> None:
    shipped = compliance.rules_path(ruleset)
    assert shipped.is_absolute() and shipped.exists()
    assert shipped.read_text() == compliance.render(ruleset)  # regenerate with --write if this fails
    rules = yaml.load(shipped.read_text(), Loader=yaml.BaseLoader)
    names = [r["KEY"]["NAME"] for r in rules if "KEY" in r]
    official = yaml.load((compliance.checker_dir() / f"training_{ruleset}" / "common.yaml").read_text(),
                         Loader=yaml.BaseLoader)
    assert {r["KEY"]["NAME"] for r in official if "KEY" in r} <= set(names)  # every official rule kept
    assert "gradient_accumulation_steps" in names  # merged from closed_common.yaml
    assert "enqueue_config" not in shipped.read_text()
    bench = next(r["KEY"] for r in rules if "KEY" in r and r["KEY"]["NAME"] == "submission_benchmark")
    assert all(name in bench["CHECK"] for name in compliance.WORKLOAD_BENCHMARKS)
