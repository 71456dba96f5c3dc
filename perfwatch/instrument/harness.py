"""A small data-parallel training loop that emits the full MLPerf event sequence.

A workload supplies a `Task` (model, tensors, loss, eval metric, target); `train()` does
the rest the reference rules ask for: seeding, determinism, device, bf16 autocast,
gradient accumulation (the optimizer step sees the same samples and gradient whatever
the micro-batch split or process count), DDP under torchrun with rank-0 logging, eval
each epoch with all-reduced metrics, stop at the target or at --max-epochs, and
SIGTERM -> run_stop aborted.

Exit codes: 0 target reached (run_stop success); 3 max epochs without the target
(run_stop aborted); 128+signal when stopped by SIGTERM/SIGINT; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from perfwatch.core import keys
from perfwatch.instrument import runtime
from perfwatch.instrument.flops import flops_per_sample
from perfwatch.instrument.mllogger import MLPerfLogger
from perfwatch.instrument.ranks import RankTimer, ddp_timing_hook
from perfwatch.instrument.throughput import ThroughputMeter

EXIT_SUCCESS = 0
EXIT_ABORTED = 3
EXIT_USAGE = 2

Batch = tuple[torch.Tensor, ...]


@dataclass
class Task:
    """What a workload defines; the loop is generic."""

    benchmark: str
    model: nn.Module
    train: Batch  # tensors indexed along dim 0 (samples)
    eval: Batch
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor]  # mean loss over the batch
    eval_fn: Callable[[nn.Module, Batch], torch.Tensor]  # 1-D tensor of sums, all-reduced
    finalize: Callable[[torch.Tensor], float]  # sums over the eval set -> eval_accuracy
    higher_is_better: bool = True
    tokens_per_sample: int | None = None
    params: dict[str, Any] = field(default_factory=dict)  # model hyperparameters to log
    uses_attention: bool = False
    eval_batch_size: int = 4096


@dataclass
class Setup:
    """Everything `train` prepared; also what tests and benchmarks drive step by step."""

    args: argparse.Namespace
    task: Task
    device: torch.device
    dist: runtime.DistInfo
    model: nn.Module  # DDP-wrapped when world_size > 1
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    micro_batch: int
    train: Batch
    eval: Batch
    uncompiled: nn.Module | None = None  # with --compile: `model` before torch.compile wrapped it

    @property
    def eager(self) -> nn.Module:
        """The model without torch.compile's wrapper (DDP-wrapped when world_size > 1): evals run it."""
        return self.model if self.uncompiled is None else self.uncompiled

    @property
    def global_batch(self) -> int:
        return int(self.args.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        return int(self.train[0].shape[0]) // self.global_batch


def check_batching(args: argparse.Namespace, world_size: int, n_train: int) -> str | None:
    """An error message when the global batch cannot be split evenly, else None."""
    parts = args.grad_accum * world_size
    if args.batch_size % parts:
        return (f"--batch-size {args.batch_size} must be divisible by --grad-accum x processes "
                f"= {args.grad_accum} x {world_size} = {parts}")
    if args.batch_size > n_train:
        return f"--batch-size {args.batch_size} is larger than the training set ({n_train} samples)"
    return None


def prepare(args: argparse.Namespace, build: Callable[[argparse.Namespace], Task],
            info: runtime.DistInfo | None = None) -> Setup:
    """Seed, pick the device, build the task and wrap the model (no logging)."""
    info = info or runtime.dist_env()
    runtime.configure_threads(info.local_world_size)
    runtime.set_deterministic(bool(args.deterministic))
    device = runtime.pick_device(args.device, info.local_rank, info.local_world_size)
    runtime.init_distributed(info, device)
    runtime.seed_everything(args.seed)
    task = build(args)
    model = task.model.to(device)
    if info.world_size > 1:
        model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    # on a GPU the fused AdamW kernel: the same update in a few kernels instead of one per tensor and op
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                            betas=(0.9, 0.999), eps=1e-8, fused=True if device.type == "cuda" else None)
    warm = int(args.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    train = tuple(t.to(device) for t in task.train)
    evals = tuple(t[info.rank::info.world_size].to(device) for t in task.eval)  # eval is sharded by rank
    micro = args.batch_size // (args.grad_accum * info.world_size)
    if getattr(args, "compile", False):
        # training steps run the compiled graph, compiled at the first step (so inside run_start..run_stop:
        # compile time counts in time-to-train); evals run the same module uncompiled: eval mode, no grad
        # and another batch size would each be one more compilation, for a few forward passes per epoch
        compiled = cast(nn.Module, torch.compile(model))
        return Setup(args, task, device, info, compiled, opt, sched, micro, train, evals, uncompiled=model)
    return Setup(args, task, device, info, model, opt, sched, micro, train, evals)


def base_module(s: Setup) -> nn.Module:
    """The workload's own module, inside torch.compile's and DDP's wrappers."""
    return s.eager.module if isinstance(s.eager, DistributedDataParallel) else s.eager


def epoch_order(s: Setup, epoch: int) -> torch.Tensor:
    """The same permutation on every rank: seeded by (seed, epoch), independent of the process count."""
    g = torch.Generator().manual_seed(s.args.seed * 100_003 + epoch)
    return torch.randperm(int(s.train[0].shape[0]), generator=g).to(s.device)


def micro_batches(s: Setup, order: torch.Tensor, step: int) -> Iterator[Batch]:
    """This rank's micro-batches of optimizer step `step`: slices of one global batch."""
    gb, mb, ws = s.global_batch, s.micro_batch, s.dist.world_size
    base = step * gb
    for a in range(s.args.grad_accum):
        lo = base + (a * ws + s.dist.rank) * mb
        idx = order[lo:lo + mb]
        yield tuple(t.index_select(0, idx) for t in s.train)


def optimizer_step(s: Setup, batches: Iterator[Batch]) -> torch.Tensor:
    """Accumulate gradients over the micro-batches, then one optimizer step; returns the mean loss."""
    accum = s.args.grad_accum
    total = torch.zeros((), device=s.device)
    ddp = isinstance(s.eager, DistributedDataParallel)
    for i, batch in enumerate(batches):
        sync = not ddp or i == accum - 1
        ctx = contextlib.nullcontext() if sync else s.eager.no_sync()  # type: ignore[operator]
        with ctx:
            with runtime.autocast(s.args.precision, s.device):
                loss = s.task.loss_fn(s.model, batch)
            (loss / accum).backward()
        total += loss.detach().float()
    s.optimizer.step()
    s.optimizer.zero_grad(set_to_none=True)
    s.scheduler.step()
    return total / accum


@torch.no_grad()
def evaluate(s: Setup, timer: RankTimer | None = None) -> float:
    """The eval metric over the whole eval set (sums all-reduced over ranks)."""
    model = s.eager
    model.eval()
    sums: torch.Tensor | None = None
    n = int(s.eval[0].shape[0])
    bs = s.task.eval_batch_size
    for lo in range(0, n, bs):
        batch = tuple(t[lo:lo + bs] for t in s.eval)
        with runtime.autocast(s.args.precision, s.device):
            part = s.task.eval_fn(model, batch).double()
        sums = part if sums is None else sums + part
    assert sums is not None
    if s.dist.world_size > 1:
        with timer.collective() if timer else contextlib.nullcontext():
            dist.all_reduce(sums)
    model.train()
    return float(s.task.finalize(sums.cpu()))


def reached(value: float, target: float, higher_is_better: bool) -> bool:
    if not math.isfinite(value):
        return False
    return value >= target if higher_is_better else value <= target


def _precision_name(p: str) -> str:
    return "bfloat16" if p == "bf16" else "fp32"


def rank_devices(s: Setup) -> list[tuple[str, str, str]]:
    """(host, device, device name) of every rank, in rank order; a collective: every rank calls it."""
    mine = (socket.gethostname(), str(s.device), runtime.device_name(s.device))
    if s.dist.world_size == 1:
        return [mine]
    out: list[Any] = [None] * s.dist.world_size
    dist.all_gather_object(out, mine)
    return [tuple(x) for x in out]


def log_preamble(log: MLPerfLogger, s: Setup, fps: float | None,
                 devices: list[tuple[str, str, str]] | None = None) -> None:
    """Everything between init_start and init_stop: submission, hyperparameters, disclosures."""
    a, t = s.args, s.task
    dev = runtime.device_name(s.device)
    devices = devices or [(socket.gethostname(), str(s.device), dev)]
    plat = a.submission_platform or f"{s.dist.world_size}x{dev.replace(' ', '_')}-{platform.machine()}"
    log.submission(t.benchmark, org=a.submission_org, division="open", platform=plat)
    prec = _precision_name(a.precision)
    log.params({
        "seed": a.seed,
        "global_batch_size": s.global_batch,
        "gradient_accumulation_steps": a.grad_accum,
        "micro_batch_size": s.micro_batch,
        "train_samples": int(t.train[0].shape[0]),
        "eval_samples": int(t.eval[0].shape[0]),
        "max_epochs": a.max_epochs,
        "opt_name": "adamw",
        "opt_base_learning_rate": a.lr,
        "opt_adamw_beta_1": 0.9,
        "opt_adamw_beta_2": 0.999,
        "opt_adamw_epsilon": 1e-8,
        "opt_adamw_weight_decay": a.weight_decay,
        "opt_learning_rate_warmup_steps": a.warmup_steps,
        "lowest_numerical_precision_in_linear": prec,
        "lowest_numerical_precision_in_attn": prec if t.uses_attention else "fp32",
        "lowest_numerical_precision_in_comm": "fp32",
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": 1,
        "expert_parallelism": 1,
        "config_filename": a.config or "none",
        **t.params,
    })
    log.target(a.target, higher_is_better=t.higher_is_better)
    if fps:
        log.event(keys.FLOPS_PER_SAMPLE, fps)
    if t.tokens_per_sample:
        log.event(keys.TOKENS_PER_SAMPLE, t.tokens_per_sample)
    log.event(keys.PRECISION, a.precision)
    log.event(keys.WORLD_SIZE, s.dist.world_size)
    log.event(keys.DEVICE, dev)
    log.event(keys.DEVICES, [name for _, _, name in devices])
    log.event(keys.DEVICE_COUNT, len({(host, d) for host, d, _ in devices if d != "cpu"}))
    if dev.startswith("cpu"):
        # CPU MFU is measured against this host's matmul peak *for the threads the run used*
        log.event(keys.THREADS, torch.get_num_threads())


def _say(s: Setup, msg: str) -> None:
    if s.dist.is_main:
        print(f"[{s.task.benchmark}] {msg}", file=sys.stderr, flush=True)


def _say_rank(s: Setup, msg: str) -> None:
    print(f"[{s.task.benchmark} rank {s.dist.rank}] {msg}", file=sys.stderr, flush=True)


def rank_timer(s: Setup) -> RankTimer | None:
    """This rank's step timer (perfwatch.instrument.ranks), its DDP buckets timed, or None."""
    cuda = s.device.type == "cuda"
    timer = RankTimer.for_run(rank=s.dist.rank, local_rank=s.dist.local_rank, world_size=s.dist.world_size,
                              device=str(s.device), gpu=s.device.index if cuda else None,
                              gpu_uuid=runtime.gpu_uuid(s.device) if cuda else None,
                              mllog=getattr(s.args, "mllog", None),
                              interval_s=max(float(s.args.log_interval), 0.5))
    if timer is not None and isinstance(s.eager, DistributedDataParallel):
        s.eager.register_comm_hook(None, ddp_timing_hook(timer, cuda=cuda))
    return timer


def drill_batches(s: Setup, batches: Iterator[Batch], step: int) -> Iterator[Batch]:
    """`--slow-rank` and `--hang-rank`: this rank sleeps before its step's data or compute."""
    slow, hang = getattr(s.args, "slow_rank", None), getattr(s.args, "hang_rank", None)
    if hang and hang[0] == s.dist.rank and step >= hang[1]:
        _say_rank(s, f"--hang-rank: rank {s.dist.rank} stops before its collective at step {step}")
        while True:
            time.sleep(3600)
    if slow and slow[0] == s.dist.rank and slow[2] == "data":
        time.sleep(slow[1])
    yield from batches
    if slow and slow[0] == s.dist.rank and slow[2] == "compute":
        time.sleep(slow[1])


def run_loop(s: Setup, log: MLPerfLogger, stop: runtime.StopSignal) -> int:
    """From run_start to run_stop; returns the exit code."""
    timer = rank_timer(s)
    try:
        return _run_loop(s, log, stop, timer)
    finally:
        if timer is not None:
            timer.close()


def _run_loop(s: Setup, log: MLPerfLogger, stop: runtime.StopSignal, timer: RankTimer | None) -> int:
    a, t = s.args, s.task
    meter = ThroughputMeter(log, interval_s=a.log_interval, tokens_per_sample=t.tokens_per_sample)
    samples = 0
    stop.arm()
    log.run_start()
    meter.restart_window()
    if timer is not None:
        timer.resume()
    for epoch in range(1, a.max_epochs + 1):
        if stop.requested:  # arrived during the last eval
            log.run_stop("aborted", epoch_num=epoch - 1, samples_count=samples, reason=stop.name)
            return stop.exit_code
        log.block_start(epoch, samples)
        order = epoch_order(s, epoch)
        step_no = (epoch - 1) * s.steps_per_epoch
        for step in range(s.steps_per_epoch):
            batches = micro_batches(s, order, step)
            if getattr(a, "slow_rank", None) or getattr(a, "hang_rank", None):
                batches = drill_batches(s, batches, step_no + step)
            if timer is not None:
                batches = timer.timed_data(batches)
            loss = optimizer_step(s, batches)
            samples += s.global_batch
            meter.step(s.global_batch, loss)
            if timer is not None:
                timer.step()
            if stop.requested:
                meter.flush()
                log.run_stop("aborted", epoch_num=epoch, samples_count=samples, reason=stop.name)
                _say(s, f"stopped by {stop.name} at epoch {epoch}")
                return stop.exit_code
        meter.flush()
        log.block_stop(epoch, samples)
        if epoch % a.eval_interval and epoch != a.max_epochs:
            continue
        if timer is not None:
            timer.pause()
        log.eval_start(epoch, samples)
        value = evaluate(s, timer)
        log.eval_accuracy(value, epoch, samples)
        log.eval_stop(epoch, samples)
        meter.restart_window()
        if timer is not None:
            timer.resume()
        _say(s, f"epoch {epoch} samples {samples} eval_accuracy {value:.4f} (target {a.target})")
        if reached(value, a.target, t.higher_is_better):
            log.run_stop("success", epoch_num=epoch, samples_count=samples)
            return EXIT_SUCCESS
    log.run_stop("aborted", epoch_num=a.max_epochs, samples_count=samples, reason="max_epochs")
    return EXIT_ABORTED


def train(parser: argparse.ArgumentParser, args: argparse.Namespace,
          build: Callable[[argparse.Namespace], Task]) -> int:
    """Run one workload from parsed arguments; returns the process exit code."""
    stop = runtime.StopSignal().install()
    info = runtime.dist_env()
    log = MLPerfLogger(args.mllog, rank=info.rank, echo=bool(args.echo_mllog))
    s: Setup | None = None
    try:
        log.init_start()
        try:
            s = prepare(args, build, info)
        except runtime.DeviceError as exc:
            log.run_stop("aborted", reason="no usable device")
            parser.error(str(exc))
        err = check_batching(args, info.world_size, int(s.train[0].shape[0]))
        if err:
            log.run_stop("aborted", reason="bad arguments")
            parser.error(err)
        fps = None
        if not args.no_flops:
            probe = base_module(s)
            first = tuple(x[: s.micro_batch] for x in s.train)
            fps = flops_per_sample(probe, s.task.loss_fn, first)
        log_preamble(log, s, fps, rank_devices(s))
        log.init_stop()
        return run_loop(s, log, stop)
    except BaseException as exc:  # a crash or an early signal still tells perfwatch the run ended
        if not log.stopped and (stop.requested or not isinstance(exc, SystemExit | KeyboardInterrupt)):
            log.run_stop("aborted", reason=stop.name or type(exc).__name__)
        raise
    finally:
        log.close()
        stop.restore()
        s = None  # free DDP's reducer before its process group: the other order can hang at exit
        gc.collect()
        runtime.shutdown_distributed()
