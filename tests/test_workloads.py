"""The workloads as a user runs them: real training processes, real mllog files, the official checker.

Configurations are shrunk (tiny models, few samples) so the whole file stays short on a
2-core box; the full-size defaults are measured by benchmarks/workloads.py and by the
one test marked slow.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from perfwatch.core import keys as pw_keys
from perfwatch.core.ingest.mllog import parse_path
from perfwatch.core.model.run import Run, RunView
from perfwatch.instrument import compliance, harness, hparams

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "workloads"

TINY = {
    "mlp": ["--device", "cpu", "--hidden", "64", "--depth", "2", "--train-samples", "4096", "--eval-samples", "1024",
            "--batch-size", "128", "--target", "0.4"],
    "cnn": ["--device", "cpu", "--width", "8", "--train-samples", "512", "--eval-samples", "256", "--batch-size", "64",
            "--target", "0.3"],
    "mlm": ["--device", "cpu", "--d-model", "32", "--heads", "2", "--ff", "64", "--seq-len", "16", "--train-samples", "1024",
            "--eval-samples", "256", "--batch-size", "64", "--lr", "3e-3", "--target", "0.15"],
}
BENCHMARKS = {"mlp": "mlp_regression", "cnn": "cnn_shapes", "mlm": "mlm_arith"}


def run_workload(name: str, log: Path, *extra: str, timeout: float = 120, use_env: bool = False
                 ) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(WORKLOADS / f"{name}.py"), *TINY[name], "--log-interval", "0.05", *extra]
    env = dict(os.environ)
    if use_env:
        env["PERFWATCH_MLLOG"] = str(log)
    else:
        argv += ["--mllog", str(log)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def view_of(path: Path) -> RunView:
    run = Run("x", str(path))
    run.feed_lines(path.read_bytes().split(b"\n"))
    return run.view()


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"workload_{name}", WORKLOADS / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    """One tiny run of each workload, logging through $PERFWATCH_MLLOG as perfwatch launches them."""
    out = {}
    base = tmp_path_factory.mktemp("runs")
    for name in TINY:
        log = base / name / "mllog.txt"
        out[name] = (run_workload(name, log, use_env=True), log)
    return out


@pytest.mark.parametrize("name", list(TINY))
def test_workload_reaches_target_and_perfwatch_reads_the_run(finished: dict, name: str) -> None:
    proc, log = finished[name]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ":::MLLOG" not in proc.stdout  # the records went to the file only
    v = view_of(log)
    assert v.benchmark == BENCHMARKS[name]
    assert v.run_status == "success" and v.target_reached and v.converged
    assert v.target is not None and v.target.source == "workload log"
    assert v.time_to_train_ms is not None and v.time_to_train_ms > 0
    assert v.evals and v.evals[-1].samples == v.samples
    assert v.throughput_source == "tracked_stats" and v.throughput_stats.count >= 1
    assert v.throughput_stats.mean > 0
    assert v.flops_per_sample and v.flops_per_sample > 0
    assert v.precision == "fp32" and v.world_size == 1
    assert v.global_batch_size == int(TINY[name][TINY[name].index("--batch-size") + 1])
    assert v.grad_accum_steps == 1
    assert v.bad_count == 0
    if name == "mlm":
        assert v.tokens_per_sample == 16 and "tokens_per_s" in v.tracked


@pytest.mark.parametrize("ruleset", compliance.SHIPPED_RULESETS)
@pytest.mark.parametrize("name", list(TINY))
def test_official_compliance_checker_accepts_each_workload_log(finished: dict, name: str, ruleset: str,
                                                               tmp_path: Path) -> None:
    _, log = finished[name]
    argv = compliance.checker_argv(log, ruleset, log_output=tmp_path / "cc.log")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stderr


def test_compliance_checker_rejects_a_log_missing_run_stop(finished: dict, tmp_path: Path) -> None:
    _, log = finished["mlp"]
    broken = tmp_path / "broken.txt"
    broken.write_text("".join(line for line in log.read_text().splitlines(True) if '"run_stop"' not in line))
    proc = subprocess.run(compliance.checker_argv(broken, "6.1.0", log_output=tmp_path / "cc.log"),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "run_stop" in proc.stderr


def test_mlp_converges_for_several_seeds(tmp_path: Path) -> None:
    for seed in (1, 2, 3):
        log = tmp_path / f"s{seed}.txt"
        proc = run_workload("mlp", log, "--seed", str(seed), "--target", "0.5", "--max-epochs", "10")
        assert proc.returncode == 0, proc.stderr[-2000:]
        v = view_of(log)
        assert v.seed == seed and v.converged and v.best_eval is not None and v.best_eval >= 0.5


def test_unreachable_target_stops_at_max_epochs_with_aborted(tmp_path: Path) -> None:
    log = tmp_path / "m.txt"
    proc = run_workload("mlp", log, "--target", "1.5", "--max-epochs", "2")  # R^2 never exceeds 1
    assert proc.returncode == harness.EXIT_ABORTED
    v = view_of(log)
    assert v.run_status == "aborted" and not v.target_reached and not v.converged
    assert v.epoch == 2 and len(v.evals) == 2


def test_sigterm_logs_aborted_and_exits_promptly(tmp_path: Path) -> None:
    log = tmp_path / "t.txt"
    argv = [sys.executable, str(WORKLOADS / "mlp.py"), *TINY["mlp"], "--target", "1.5", "--max-epochs", "100000",
            "--mllog", str(log)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and '"block_start"' not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 128 + signal.SIGTERM
    events, _ = parse_path(str(log))
    stop = [e for e in events if e.key == "run_stop"]
    assert len(stop) == 1 and stop[0].meta("status") == "aborted" and stop[0].meta("reason") == "SIGTERM"
    assert view_of(log).run_status == "aborted"


def test_json_config_feeds_the_run_and_command_line_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "hp.json"
    cfg.write_text('{"batch_size": 64, "max_epochs": 1, "lr": 0.003, "target": -10}')
    log = tmp_path / "c.txt"
    proc = subprocess.run([sys.executable, str(WORKLOADS / "mlp.py"), "--config", str(cfg), "--hidden", "32",
                           "--train-samples", "1024", "--batch-size", "128", "--mllog", str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    v = view_of(log)
    assert v.global_batch_size == 128  # the command line beats the file
    assert v.params["opt_base_learning_rate"] == 0.003 and v.params["max_epochs"] == 1  # the file's values
    assert v.params["config_filename"] == str(cfg)


def test_bf16_autocast_run_is_logged_as_bf16(tmp_path: Path) -> None:
    log = tmp_path / "b.txt"
    proc = run_workload("mlp", log, "--precision", "bf16", "--max-epochs", "1", "--target", "-10")
    assert proc.returncode == 0, proc.stderr[-2000:]
    v = view_of(log)
    assert v.precision == "bf16" and v.params["lowest_numerical_precision_in_linear"] == "bfloat16"


def _setup(mod: ModuleType, argv: list[str]) -> harness.Setup:
    args = hparams.parse_with_config(mod.parser(), ["--device", "cpu", *argv])
    return harness.prepare(args, mod.build, harness.runtime.DistInfo(0, 1, 0, 1))


def test_gradient_accumulation_matches_the_large_batch_step() -> None:
    mlp = load("mlp")
    common = ["--hidden", "64", "--depth", "2", "--train-samples", "1024", "--batch-size", "256", "--seed", "5",
              "--no-flops", "--lr", "1e-2"]
    big = _setup(mlp, common + ["--grad-accum", "1"])
    acc = _setup(mlp, common + ["--grad-accum", "8"])
    assert (big.micro_batch, acc.micro_batch) == (256, 32)
    for a, b in zip(big.model.parameters(), acc.model.parameters(), strict=True):
        assert torch.equal(a, b)  # same seed -> same initial model
    for step in range(3):
        loss_big = harness.optimizer_step(big, harness.micro_batches(big, harness.epoch_order(big, 1), step))
        loss_acc = harness.optimizer_step(acc, harness.micro_batches(acc, harness.epoch_order(acc, 1), step))
        assert float(loss_acc) == pytest.approx(float(loss_big), rel=1e-5)
    for a, b in zip(big.model.parameters(), acc.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # and the check has teeth: a different global batch gives different weights
    other = _setup(mlp, common + ["--batch-size", "128"])  # the last --batch-size wins
    harness.optimizer_step(other, harness.micro_batches(other, harness.epoch_order(other, 1), 0))
    assert not torch.allclose(next(other.model.parameters()), next(big.model.parameters()))


def test_same_seed_same_training_different_seed_differs() -> None:
    mlp = load("mlp")
    argv = ["--hidden", "32", "--depth", "2", "--train-samples", "512", "--batch-size", "64", "--no-flops",
            "--deterministic"]
    runs = [_setup(mlp, argv + ["--seed", str(s)]) for s in (4, 4, 9)]
    for s in runs:
        for step in range(3):
            harness.optimizer_step(s, harness.micro_batches(s, harness.epoch_order(s, 1), step))
    torch.use_deterministic_algorithms(False)
    p = [torch.cat([x.flatten() for x in s.model.parameters()]) for s in runs]
    assert torch.equal(p[0], p[1]) and not torch.allclose(p[0], p[2])


def test_mlm_layer_is_torchs_encoder_layer_and_the_gpu_head_gives_the_same_loss() -> None:
    """mlm.py's Block computes nn.TransformerEncoderLayer(norm_first, gelu, no dropout); on a GPU the head runs at
    every position with the unmasked ones ignored (no host sync): the same loss as the CPU's masked selection."""
    mlm = load("mlm")
    torch.manual_seed(0)
    model = mlm.Encoder(64, 32, 64, 4, 2, 128)
    ref = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
    block = model.body[0]
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(block.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(block.qkv.bias)
        ref.self_attn.out_proj.load_state_dict(block.proj.state_dict())
        for mine, theirs in ((block.ff1, ref.linear1), (block.ff2, ref.linear2), (block.norm1, ref.norm1),
                             (block.norm2, ref.norm2)):
            theirs.load_state_dict(mine.state_dict())
    x = torch.randn(8, 32, 64)
    torch.testing.assert_close(block(x), ref(x))
    ids, labels = mlm.make_data(16, 64, 32, [1, 2, 3], 0.15, 0, 1)
    logits, target = model(ids, labels)  # the CPU: masked positions only
    assert logits.shape[0] == int((labels != -100).sum()) and bool((target != -100).all())
    h = model.tok(ids) + model.pos[:32]
    for b in model.body:
        h = b(h)
    everywhere = model.head(model.norm(h)).flatten(0, 1)  # what forward returns on a GPU
    cpu_loss = torch.nn.functional.cross_entropy(logits, target)
    torch.testing.assert_close(torch.nn.functional.cross_entropy(everywhere, labels.flatten()), cpu_loss)
    torch.testing.assert_close(mlm.loss_fn(model, (ids, labels)), cpu_loss)


def test_torchrun_two_processes_on_cpu_log_once_and_match_one_process(tmp_path: Path) -> None:
    args = [*TINY["mlp"], "--target", "-10", "--max-epochs", "1", "--grad-accum", "2", "--seed", "3"]
    ddp_log, one_log = tmp_path / "ddp.txt", tmp_path / "one.txt"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(WORKLOADS / "mlp.py"), *args, "--mllog", str(ddp_log)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events, _ = parse_path(str(ddp_log))
    keys = [e.key for e in events]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1  # rank 0 only
    v = view_of(ddp_log)
    assert v.world_size == 2 and v.params["micro_batch_size"] == 32
    assert v.params[pw_keys.DEVICES] == ["cpu", "cpu"] and v.params[pw_keys.DEVICE_COUNT] == 0
    single = subprocess.run([sys.executable, str(WORKLOADS / "mlp.py"), *args, "--mllog", str(one_log)],
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0
    # same global batches in the same order: data-parallel training matches one process
    assert v.evals[-1].value == pytest.approx(view_of(one_log).evals[-1].value, abs=1e-3)
    cc = subprocess.run(compliance.checker_argv(ddp_log, "6.1.0", log_output=tmp_path / "cc.log"),
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert cc.returncode == 0, cc.stderr


@pytest.mark.slow
def test_mlp_default_arguments_reach_the_target(tmp_path: Path) -> None:
    log = tmp_path / "full.txt"
    proc = subprocess.run([sys.executable, str(WORKLOADS / "mlp.py"), "--mllog", str(log)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert view_of(log).converged
