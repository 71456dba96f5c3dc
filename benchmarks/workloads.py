"""Measure the workloads: samples/s, MFU against the host's measured fp32 matmul peak (P7),
instrumentation overhead (P6), and seconds to target for several seeds.

    python benchmarks/workloads.py                 # all three, 5 seeds each
    python benchmarks/workloads.py --only mlp --seeds 2 --no-ttt

Everything runs with each workload's default arguments. The matmul peak is measured
right before and after each workload's throughput window (the machine may be shared);
MFU uses the larger of the two, so load from other processes can only lower it.
Overhead is measured in the same process on the same model, alternating blocks of
optimizer steps with and without instrumentation (ABAB..., the fastest block of each
kind compared, as the least disturbed by other processes), and also computed from the
measured cost of one `tracked_stats` record and of `ThroughputMeter.step`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfwatch.core.model.run import Run  # noqa: E402
from perfwatch.instrument import MLPerfLogger, ThroughputMeter, harness, hparams, runtime  # noqa: E402
from perfwatch.instrument.flops import flops_per_sample  # noqa: E402
from perfwatch.instrument.ranks import MAX_DURATIONS, RankTimer  # noqa: E402

NAMES = ("mlp", "cnn", "mlm")


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"workload_{name}", ROOT / "workloads" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def matmul_peak(seconds: float = 1.0) -> float:
    """Best fp32 FLOP/s of square matmuls (1024 and 2048), best of short windows."""
    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        end = time.perf_counter() + seconds / 2
        while time.perf_counter() < end:
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def steps(s: harness.Setup, n: int, start: int, meter: ThroughputMeter | None) -> float:
    """Run n optimizer steps (wrapping around the epoch); seconds taken."""
    order = harness.epoch_order(s, 1)
    t = time.perf_counter()
    for i in range(start, start + n):
        loss = harness.optimizer_step(s, harness.micro_batches(s, order, i % s.steps_per_epoch))
        if meter is not None:
            meter.step(s.global_batch, loss)
    return time.perf_counter() - t


def event_cost(log: MLPerfLogger, n: int = 2000) -> float:
    t = time.perf_counter()
    for i in range(n):
        log.event("tracked_stats", {"throughput": 1.0, "loss": 0.5}, {"step": i, "samples_count": i})
    return (time.perf_counter() - t) / n


def meter_step_cost(n: int = 200_000) -> float:
    class Null:
        def event(self, *a: object, **k: object) -> None:
            pass

    m = ThroughputMeter(Null(), interval_s=1e9)
    loss = torch.tensor(0.5)
    t = time.perf_counter()
    for _ in range(n):
        m.step(64, loss)
    return (time.perf_counter() - t) / n


def rank_step_cost(folder: str, n: int = 100_000) -> tuple[float, float]:
    """Per-rank timing (perfwatch.instrument.ranks): seconds per step, and per written window record."""
    timer = RankTimer(os.path.join(folder, "rank_0.jsonl"), rank=0, interval_s=1e9, heartbeat=False)
    timer.resume()
    batch = [(torch.zeros(1),)]
    t = time.perf_counter()
    for _ in range(n):
        for _b in timer.timed_data(iter(batch)):
            pass
        timer.step()
    per_step = (time.perf_counter() - t) / n
    per_record = float("inf")
    for _ in range(20):  # best of 20 records of MAX_DURATIONS step times each
        for _ in range(MAX_DURATIONS):
            timer.step()
        t = time.perf_counter()
        timer.flush()
        per_record = min(per_record, time.perf_counter() - t)
    timer.close()
    return per_step, per_record


def measure(name: str, window_s: float, rounds: int) -> dict[str, float]:
    mod = load(name)
    args = hparams.parse_with_config(mod.parser(), ["--no-flops"])
    s = harness.prepare(args, mod.build, runtime.DistInfo(0, 1, 0, 1))
    fps = flops_per_sample(s.model, s.task.loss_fn, tuple(x[: s.micro_batch] for x in s.train))
    steps(s, 3, 0, None)  # warm-up
    t1 = steps(s, 3, 3, None)
    per_block = max(3, int(window_s / max(t1 / 3, 1e-4)))
    peak_before = matmul_peak()
    dt = steps(s, per_block, 6, None)
    peak_after = matmul_peak()
    peak = max(peak_before, peak_after)
    sps = per_block * s.global_batch / dt
    with tempfile.TemporaryDirectory() as tmp:
        log = MLPerfLogger(os.path.join(tmp, "mllog.txt"), rank=0)
        cadence = ThroughputMeter(log, interval_s=args.log_interval, tokens_per_sample=s.task.tokens_per_sample)
        every = ThroughputMeter(log, interval_s=0.0, tokens_per_sample=s.task.tokens_per_sample)
        bare: list[float] = []
        cad: list[float] = []
        per_step: list[float] = []
        pos = 6 + per_block
        for _ in range(rounds):  # interleaved so load changes hit all three alike
            for bucket, meter in ((bare, None), (cad, cadence), (per_step, every)):
                bucket.append(steps(s, per_block, pos, meter))
                pos += per_block
        ev = event_cost(log)
        log.close()
        rank_step, rank_record = rank_step_cost(tmp)
    step_s = min(bare) / per_block
    mstep = meter_step_cost()
    records_per_step = step_s / args.log_interval if args.log_interval else 1.0
    return {
        "samples_per_s": sps,
        "flops_per_sample": fps,
        "achieved_gflops": fps * sps / 1e9,
        "peak_gflops": peak / 1e9,
        "mfu": fps * sps / peak,
        "step_ms": step_s * 1e3,
        # min over blocks: the block least disturbed by other processes on a shared machine
        "overhead_ab_cadence": min(cad) / min(bare) - 1,
        "overhead_ab_every_step": min(per_step) / min(bare) - 1,
        "event_us": ev * 1e6,
        "meter_step_us": mstep * 1e6,
        "rank_step_us": rank_step * 1e6,
        "rank_record_us": rank_record * 1e6,
        "overhead_model_cadence": (mstep + records_per_step * ev) / step_s,
        # the same with per-rank step timing on (a window record per log interval)
        "overhead_model_ranks": (mstep + rank_step + records_per_step * (ev + rank_record)) / step_s,
        "overhead_model_every_step": (mstep + ev) / step_s,
    }


def time_to_target(name: str, seed: int) -> tuple[int, float | None, float]:
    """(exit code, run_start->run_stop seconds, process wall seconds) of a default run."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "mllog.txt"
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, str(ROOT / "workloads" / f"{name}.py"), "--seed", str(seed),
                               "--mllog", str(log)], capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t
        run = Run(name)
        if log.exists():
            run.feed_lines(log.read_bytes().split(b"\n"))
        v = run.view()
        ttt = v.time_to_train_ms / 1e3 if v.time_to_train_ms is not None and v.converged else None
        return proc.returncode, ttt, wall


def _ttt_cell(rc: int, ttt: float | None) -> str:
    return f"{ttt:.1f} s" if rc == 0 and ttt is not None else f"FAILED rc={rc}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=NAMES, action="append", help="workload(s) to measure (default: all)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--no-ttt", action="store_true", help="skip the time-to-target runs")
    p.add_argument("--window", type=float, default=1.5, help="seconds per throughput block")
    p.add_argument("--rounds", type=int, default=6, help="A/B rounds for the overhead")
    a = p.parse_args()
    runtime.configure_threads()
    print(f"host: {runtime.available_cores()} cores, torch {torch.__version__}, threads {torch.get_num_threads()},"
          f" load average {os.getloadavg()[0]:.2f}")
    for name in a.only or NAMES:
        r = measure(name, a.window, a.rounds)
        print(f"\n[{name}] {r['samples_per_s']:.0f} samples/s, step {r['step_ms']:.1f} ms, "
              f"{r['flops_per_sample'] / 1e6:.1f} MFLOP/sample -> {r['achieved_gflops']:.1f} GFLOP/s; "
              f"matmul peak {r['peak_gflops']:.1f} GFLOP/s; MFU {r['mfu'] * 100:.0f}% (P7 >= 50%)")
        print(f"  overhead, A/B same run: {r['overhead_ab_cadence'] * 100:+.2f}% at the 1 s cadence, "
              f"{r['overhead_ab_every_step'] * 100:+.2f}% logging every step")
        print(f"  overhead, from unit costs (event {r['event_us']:.0f} us, meter.step {r['meter_step_us']:.2f} us): "
              f"{r['overhead_model_cadence'] * 100:.4f}% at the 1 s cadence (P6 <= 1%), "
              f"{r['overhead_model_every_step'] * 100:.2f}% every step")
        print(f"  with per-rank step timing (step {r['rank_step_us']:.2f} us, window record "
              f"{r['rank_record_us']:.0f} us): {r['overhead_model_ranks'] * 100:.4f}% at the 1 s cadence (P6 <= 1%)")
        if a.no_ttt:
            continue
        results = [time_to_target(name, seed) for seed in range(a.seeds)]
        ttts = [t for rc, t, _ in results if rc == 0 and t is not None]
        cells = ", ".join(f"seed {i}: {_ttt_cell(rc, t)} (wall {w:.1f} s)" for i, (rc, t, w) in enumerate(results))
        print(f"  time to target: {cells}")
        if ttts:
            print(f"  {len(ttts)}/{a.seeds} seeds reached the target; max {max(ttts):.1f} s, "
                  f"median {statistics.median(ttts):.1f} s (< 60 s required)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
