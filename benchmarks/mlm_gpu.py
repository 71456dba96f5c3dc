"""The masked-LM transformer's training step on one GPU, several variants side by side: step time,
achieved TFLOP/s and MFU against the GPU's datasheet dense peak (P7: the transformer >= 40 % in bf16).

    python benchmarks/mlm_gpu.py                          # a CUDA machine: about 2 minutes on an H100
    python benchmarks/mlm_gpu.py --only preset,preset-compile --steps 50
    python benchmarks/mlm_gpu.py --smoke                  # checks this script on the CPU: every variant at
                                                          # one tiny size, fp32, no compiled variants

Every variant trains the way a run does: workloads/mlm.py's `build`, `harness.prepare` and
`harness.optimizer_step` (bf16 autocast, AdamW, warm-up schedule, data indexed on the device), with
the device synchronised only around the timed block. FLOPs per step are perfwatch's own count
(`perfwatch.instrument.flops`: FlopCounterMode on one real forward+backward, what the workload logs
as perfwatch_flops_per_sample) x the global batch; the peak is perfwatch's resolver
(`perfwatch.core.measure.peaks`: the GPU identified from NVML's name, memory and default power limit,
else from torch's device name). Host syncs per step are counted with
`torch.cuda.set_sync_debug_mode("warn")` over a few extra steps.

Variants:
  legacy-1024        the shape `--preset gpu` had (d_model 1024, 16 heads, 4 layers, FF 4096, 64 tokens,
                     batch 512; 28.9 % MFU on an H200) with the code it had: nn.TransformerEncoder, the
                     masked positions selected by boolean indexing (two host syncs a step), for-each AdamW
  fixed-1024         the same shape with the workload's code now (one QKV projection into
                     scaled_dot_product_attention, the head over every position: no host sync, fused AdamW)
  preset             `--preset gpu` as it is now (the shape gpu.yaml trains)
  preset-seq256      the preset's width with 256-token sequences, batch 128 (the same tokens a step)
  preset-compile     the preset with --compile; "compile s" is the first step's time beyond a steady step
  fixed-1024-compile the 1024 shape with --compile
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # torch's cuda:N = NVML's index N

import torch  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfwatch.core.measure.peaks import PeakFlops, peak_for, peak_for_sample  # noqa: E402
from perfwatch.instrument import harness, hparams, runtime  # noqa: E402
from perfwatch.instrument.flops import flops_per_sample  # noqa: E402

OLD_SHAPE = ["--d-model", "1024", "--heads", "16", "--layers", "4", "--ff", "4096", "--seq-len", "64",
             "--batch-size", "512"]
SMOKE_SHAPE = ["--d-model", "64", "--heads", "4", "--layers", "2", "--ff", "256", "--seq-len", "16",
               "--batch-size", "32", "--train-samples", "256", "--eval-samples", "64"]


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    argv: tuple[str, ...]  # after `--preset gpu`
    legacy: bool = False

    @property
    def compiled(self) -> bool:
        return "--compile" in self.argv


VARIANTS = (
    Variant("legacy-1024", tuple(OLD_SHAPE), legacy=True),
    Variant("fixed-1024", tuple(OLD_SHAPE)),
    Variant("preset", ()),
    Variant("preset-seq256", ("--seq-len", "256", "--batch-size", "128")),
    Variant("preset-compile", ("--compile",)),
    Variant("fixed-1024-compile", (*OLD_SHAPE, "--compile")),
)


def load_mlm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("workload_mlm", ROOT / "workloads" / "mlm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class LegacyEncoder(nn.Module):
    """workloads/mlm.py's model before the sync-free rewrite, kept here as the baseline."""

    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, layers: int, ff: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab + 1, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(self.tok(ids) + self.pos[: ids.shape[1]])
        mask = labels != -100  # data-dependent shapes: a host sync for each of the two selections
        return self.head(self.norm(h[mask])), labels[mask]


def legacy_build(mlm: ModuleType) -> Callable[[argparse.Namespace], harness.Task]:
    def build(args: argparse.Namespace) -> harness.Task:
        task = mlm.build(args)
        model = LegacyEncoder(args.vocab, args.seq_len, args.d_model, args.heads, args.layers, args.ff)
        return dataclasses.replace(task, model=model)
    return build


def resolve_peak(device: torch.device, dtype: str) -> tuple[PeakFlops | None, str]:
    """perfwatch's peak for this device: the GPU by NVML (matched by UUID), else by torch's name; the CPU measured."""
    if device.type != "cuda":
        from perfwatch.core.measure.host_peak import cpu_peak

        return cpu_peak(dtype), "measured CPU peak"
    from perfwatch.core.telemetry.nvml import NvmlSampler

    uuid = runtime.gpu_uuid(device)
    sampler = NvmlSampler()
    try:
        status = sampler.status()
        if status.available and status.gpus:
            gpu = next((g for g in status.gpus if uuid and g.uuid == uuid), status.gpus[0])
            return peak_for_sample(gpu, dtype)
    finally:
        sampler.close()
    props = torch.cuda.get_device_properties(device)
    return peak_for(props.name, dtype, mem_total=props.total_memory)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(mlm: ModuleType, v: Variant, *, smoke: bool, steps: int, warmup: int) -> dict[str, Any]:
    argv = ["--preset", "gpu", *v.argv, "--no-flops", "--seed", "0"]
    if smoke:
        argv += [*SMOKE_SHAPE, "--device", "cpu", "--precision", "fp32"]
    else:
        argv += ["--device", "cuda"]
    args = hparams.parse_with_config(mlm.parser(), argv)
    s = harness.prepare(args, legacy_build(mlm) if v.legacy else mlm.build, runtime.DistInfo(0, 1, 0, 1))
    if v.legacy:  # the optimizer as it was: for-each AdamW (torch's default on CUDA), not the fused kernel
        s.optimizer = torch.optim.AdamW(s.model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                        betas=(0.9, 0.999), eps=1e-8)
        s.scheduler = torch.optim.lr_scheduler.LambdaLR(s.optimizer, lambda k: 1.0)
    dev = s.device
    probe = tuple(x[: min(64, s.micro_batch)] for x in s.train)  # FLOPs per sample do not depend on the batch
    fps = flops_per_sample(harness.base_module(s), s.task.loss_fn, probe)
    order = harness.epoch_order(s, 1)
    done = [0]

    def step() -> None:
        harness.optimizer_step(s, harness.micro_batches(s, order, done[0] % s.steps_per_epoch))
        done[0] += 1

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    sync(dev)
    t0 = time.perf_counter()
    step()  # with --compile: the compilation
    sync(dev)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(dev)
    step_s = (time.perf_counter() - t0) / steps
    syncs = None
    if dev.type == "cuda":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(3):
                    step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        sync(dev)
        syncs = sum("synchroniz" in str(w.message) for w in caught) / 3
    mem = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    return {"args": args, "fps": fps, "step_s": step_s, "first_s": first, "syncs": syncs, "mem": mem}


def free_memory() -> None:
    """Between variants: the last one's model, optimizer state and cached blocks go."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def fmt_row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated variants: " + ", ".join(v.name for v in VARIANTS))
    ap.add_argument("--steps", type=int, default=30, help="timed optimizer steps per variant")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps after the first")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds; variants not started by then are skipped")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, without the compiled variants")
    a = ap.parse_args()
    names = [n.strip() for n in a.only.split(",")] if a.only else None
    known = {v.name for v in VARIANTS}
    if names and set(names) - known:
        ap.error(f"unknown variant(s) {sorted(set(names) - known)}; known: {', '.join(known)}")
    chosen = [v for v in VARIANTS if (v.name in names if names else not (a.smoke and v.compiled))]
    if not a.smoke and not torch.cuda.is_available():
        print("torch sees no CUDA device: nothing to measure (use --smoke to check the script on the CPU)")
        return 0
    start = time.perf_counter()
    mlm = load_mlm()
    device = torch.device("cpu") if a.smoke else torch.device("cuda", torch.cuda.current_device())
    precision = "fp32" if a.smoke else str(mlm.PRESETS["gpu"]["precision"])
    peak, why = resolve_peak(device, precision)
    name = runtime.device_name(device)
    print(f"[{name}] torch {torch.__version__}, peak: {peak.describe() if peak else f'unknown ({why})'}")
    if peak is not None and not peak.measured:
        print(f"  identified by: {why}")
    print(f"  {a.steps} timed steps per variant after {1 + a.warmup} untimed; sizes: {'smoke (tiny, CPU)' if a.smoke else 'real'}")
    head = ["variant", "d_model", "layers", "ff", "seq", "batch", "step ms", "tokens/s", "GFLOP/step", "TFLOP/s",
            "MFU", "syncs/step", "first step s", "peak GiB"]
    widths = [18, 7, 6, 5, 4, 5, 8, 10, 10, 8, 6, 10, 12, 8]
    rows: list[list[str]] = []
    results: dict[str, dict[str, Any]] = {}
    for v in chosen:
        elapsed = time.perf_counter() - start
        if elapsed > a.budget:
            rows.append([v.name, *["" for _ in head[1:-1]], f"skipped: {elapsed:.0f} s > --budget"])
            continue
        t0 = time.perf_counter()
        try:
            r = measure(mlm, v, smoke=a.smoke, steps=a.steps, warmup=a.warmup)
        except Exception as exc:  # one variant failing (out of memory, a compiler error) must not hide the rest
            rows.append([v.name, f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"])
            print(f"  {v.name}: FAILED ({type(exc).__name__})", flush=True)
            continue
        finally:
            free_memory()
        results[v.name] = r
        x = r["args"]
        flops = r["fps"] * x.batch_size
        achieved = flops / r["step_s"]
        mfu = f"{100 * achieved / peak.flops:.1f}%" if peak else "—"
        rows.append([v.name, str(x.d_model), str(x.layers), str(x.ff), str(x.seq_len), str(x.batch_size),
                     f"{r['step_s'] * 1e3:.2f}", f"{x.batch_size * x.seq_len / r['step_s']:,.0f}",
                     f"{flops / 1e9:,.4g}", f"{achieved / 1e12:.4g}", mfu,
                     "—" if r["syncs"] is None else f"{r['syncs']:.2f}", f"{r['first_s']:.1f}",
                     "—" if r["mem"] is None else f"{r['mem']:.1f}"])
        print(f"  {v.name}: {r['step_s'] * 1e3:.2f} ms a step, MFU {mfu}, first step {r['first_s']:.1f} s"
              f" ({time.perf_counter() - t0:.0f} s for the variant)", flush=True)
    print(f"\n[{name}] masked-LM transformer training steps, {precision}"
          f"{'' if a.smoke else ' autocast'}, MFU against {peak.describe() if peak else '—'}")
    print(fmt_row(head, widths))
    for row in rows:
        print(fmt_row(row, widths) if len(row) == len(head) else "  ".join([row[0].ljust(widths[0]), *row[1:]]))
    for base, comp in (("preset", "preset-compile"), ("fixed-1024", "fixed-1024-compile")):
        if base in results and comp in results:
            b, c = results[base], results[comp]
            print(f"compile, {base}: steps {b['step_s'] / c['step_s']:.2f}x as fast, compile time about "
                  f"{c['first_s'] - c['step_s'] - (b['first_s'] - b['step_s']):.0f} s (first step minus eager's)")
    if "legacy-1024" in results and "fixed-1024" in results:
        print(f"fixed-1024 vs legacy-1024: {results['legacy-1024']['step_s'] / results['fixed-1024']['step_s']:.2f}x"
              " as fast a step")
    print(f"P7 (GPU, bf16): the transformer >= 40 % of the datasheet dense peak; `--preset gpu` is the `preset` row"
          f"  [{name}]  total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
