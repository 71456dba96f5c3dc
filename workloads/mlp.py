"""MLP regression: a wide ReLU MLP learns a fixed random teacher network (benchmark "mlp_regression").

Synthetic but learnable data, generated from --data-seed (no download): x ~ N(0, I),
y = teacher(x) + noise, with teacher a random 2-layer tanh network scaled to unit
variance. eval_accuracy is R^2 on a held-out set (higher is better; target 0.90).
The student is matmul-bound (hidden 1024), so its MFU on CPU is meaningful.

    python workloads/mlp.py --mllog out.txt
    python -m torch.distributed.run --nproc_per_node 2 workloads/mlp.py --mllog out.txt
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

from perfwatch.instrument import harness, hparams

BENCHMARK = "mlp_regression"

# `--preset gpu`: sized to keep an H100-class GPU busy (a step is ~2.6e12 FLOPs). Learning rate scaled
# with the width from the CPU defaults (1e-3 at hidden 1024, roughly lr ~ 1/width for Adam, kept at
# 5e-4 for the 16x larger batch), warmed up over one epoch.
PRESETS = {
    "gpu": {"hidden": 4096, "depth": 4, "in_features": 32, "batch_size": 8192, "lr": 5e-4, "warmup_steps": 64,
            "train_samples": 524288, "eval_samples": 32768, "max_epochs": 30, "precision": "bf16"},
}


def make_data(n: int, in_features: int, noise: float, data_seed: int, offset: int) -> tuple[torch.Tensor, ...]:
    """`n` samples of the teacher task; `offset` separates train from eval draws."""
    g = torch.Generator().manual_seed(data_seed)
    w1 = torch.randn(in_features, 8, generator=g) / in_features**0.5 * 2.0
    w2 = torch.randn(8, 1, generator=g) / 8**0.5
    scale = (torch.tanh(torch.randn(4096, in_features, generator=g) @ w1) @ w2).std()  # -> unit variance
    gx = torch.Generator().manual_seed(data_seed * 7919 + offset)
    x = torch.randn(n, in_features, generator=gx)
    y = torch.tanh(x @ w1) @ w2 / scale
    y = y + noise * torch.randn(n, 1, generator=gx)
    return x, y


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(in_features, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        layers.append(nn.Linear(hidden, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def loss_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x).float(), y)


def eval_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    """Sums for R^2: squared error, sum y, sum y^2, count."""
    x, y = batch
    err = (model(x).float() - y).pow(2).sum()
    return torch.stack([err, y.sum(), y.pow(2).sum(), torch.tensor(float(y.numel()), device=y.device)])


def r2(sums: torch.Tensor) -> float:
    sse, sy, syy, n = (float(v) for v in sums)
    var = syy - sy * sy / n
    return 1.0 - sse / var if var > 0 else float("nan")


def parser() -> argparse.ArgumentParser:
    p = hparams.base_parser(__doc__.splitlines()[0], batch_size=512, lr=1e-3, max_epochs=20, target=0.90,
                            presets=PRESETS)
    p.add_argument("--in-features", type=hparams.positive_int, default=16)
    p.add_argument("--hidden", type=hparams.positive_int, default=1024)
    p.add_argument("--depth", type=hparams.positive_int, default=3, help="hidden layers")
    p.add_argument("--train-samples", type=hparams.positive_int, default=32768)
    p.add_argument("--eval-samples", type=hparams.positive_int, default=4096)
    p.add_argument("--noise", type=hparams.nonneg_float, default=0.1, help="label noise std")
    return p


def build(args: argparse.Namespace) -> harness.Task:
    train = make_data(args.train_samples, args.in_features, args.noise, args.data_seed, 1)
    evals = make_data(args.eval_samples, args.in_features, args.noise, args.data_seed, 2)
    model = MLP(args.in_features, args.hidden, args.depth)
    return harness.Task(BENCHMARK, model, train, evals, loss_fn, eval_fn, r2, higher_is_better=True,
                        params={"model_hidden": args.hidden, "model_depth": args.depth,
                                "model_in_features": args.in_features})


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = hparams.parse_with_config(p, argv)
    return harness.train(p, args, build)


if __name__ == "__main__":
    sys.exit(main())
