"""Small ResNet on synthetic images: classify shifted, noisy class templates (benchmark "cnn_shapes").

Data (from --data-seed, no download): each of --classes classes has a smooth random
colour template (a coarse random grid upsampled to --image-size); a sample is its
class template, rolled by up to --max-shift pixels each way, scaled by a random
contrast, plus Gaussian noise. Translation is what convolutions are built for, so a
ResNet learns it in a few epochs. eval_accuracy = top-1 accuracy on a held-out set.

    python workloads/cnn.py --mllog out.txt
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.nn import functional as F

from perfwatch.instrument import harness, hparams

BENCHMARK = "cnn_shapes"

# `--preset gpu`: width 64, two blocks per stage, 32x32 images, batch 1024. Learning rate scaled as
# 1/width from the CPU default (2e-3 at width 32 -> 1e-3), warmed up over one epoch.
PRESETS = {
    "gpu": {"width": 64, "blocks": 2, "image_size": 32, "max_shift": 4, "batch_size": 1024, "lr": 1e-3,
            "warmup_steps": 32, "train_samples": 32768, "eval_samples": 4096, "max_epochs": 30, "precision": "bf16"},
}


def make_data(n: int, classes: int, size: int, max_shift: int, noise: float, data_seed: int,
              offset: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(data_seed)
    coarse = torch.randn(classes, 3, 4, 4, generator=g)
    templates = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    templates = templates / templates.flatten(1).std(dim=1).view(-1, 1, 1, 1)
    gx = torch.Generator().manual_seed(data_seed * 7919 + offset)
    y = torch.randint(0, classes, (n,), generator=gx)
    x = templates[y]
    shifts = torch.randint(-max_shift, max_shift + 1, (n, 2), generator=gx)
    for dy in range(-max_shift, max_shift + 1):  # roll per sample, grouped by shift
        for dx in range(-max_shift, max_shift + 1):
            sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
            if sel.any():
                x[sel] = torch.roll(x[sel], shifts=(dy, dx), dims=(2, 3))
    contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=gx)
    x = x * contrast + noise * torch.randn(x.shape, generator=gx)
    return x.contiguous(memory_format=torch.channels_last), y


class Block(nn.Module):
    """Basic residual block (two 3x3 convs), with a 1x1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(out)) + self.proj(x))


class ResNet(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages: list[nn.Module] = []
        cin = width
        for i, cout in enumerate((width, width * 2)):
            for j in range(blocks):
                stages.append(Block(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


def loss_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x).float(), y)


def eval_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    x, y = batch
    correct = (model(x).argmax(dim=1) == y).sum().double()
    return torch.stack([correct, torch.tensor(float(y.numel()), dtype=torch.float64, device=y.device)])


def accuracy(sums: torch.Tensor) -> float:
    return float(sums[0] / sums[1])


def parser() -> argparse.ArgumentParser:
    p = hparams.base_parser(__doc__.splitlines()[0], batch_size=128, lr=2e-3, max_epochs=20, target=0.95,
                            presets=PRESETS)
    p.add_argument("--width", type=hparams.positive_int, default=32, help="channels of the first stage")
    p.add_argument("--blocks", type=hparams.positive_int, default=1, help="residual blocks per stage")
    p.add_argument("--classes", type=hparams.positive_int, default=10)
    p.add_argument("--image-size", type=hparams.positive_int, default=16)
    p.add_argument("--max-shift", type=hparams.nonneg_int, default=3)
    p.add_argument("--noise", type=hparams.nonneg_float, default=1.0, help="pixel noise std")
    p.add_argument("--train-samples", type=hparams.positive_int, default=2048)
    p.add_argument("--eval-samples", type=hparams.positive_int, default=1024)
    return p


def build(args: argparse.Namespace) -> harness.Task:
    shape = (args.classes, args.image_size, args.max_shift, args.noise, args.data_seed)
    train = make_data(args.train_samples, *shape, offset=1)
    evals = make_data(args.eval_samples, *shape, offset=2)
    model = ResNet(args.width, args.blocks, args.classes).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return harness.Task(BENCHMARK, model, train, evals, loss_fn, eval_fn, accuracy, higher_is_better=True,
                        eval_batch_size=1024,
                        params={"model_width": args.width, "model_blocks": args.blocks,
                                "model_classes": args.classes, "model_image_size": args.image_size})


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = hparams.parse_with_config(p, argv)
    return harness.train(p, args, build)


if __name__ == "__main__":
    sys.exit(main())
