"""Small transformer trained with masked-language modelling on structured sequences (benchmark "mlm_arith").

Data (from --data-seed, no download): each sequence is an arithmetic progression
modulo the vocabulary, t_i = (a + b*i) mod V, with a random start a and a random
step b from --steps-set; --mask-prob of the positions are replaced by a [MASK]
token (static masks, as in MLPerf's BERT data). Recovering a masked token needs the
neighbours and the sequence's step, i.e. attention across positions.
eval_accuracy = accuracy on the masked positions of a held-out set.

    python workloads/mlm.py --mllog out.txt
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.nn import functional as F

from perfwatch.instrument import harness, hparams

BENCHMARK = "mlm_arith"

# `--preset gpu`: a 4-layer d_model-1024 encoder, batch 512 x 64 tokens (~1e13 FLOPs a step). The CPU
# default learning rate (3e-3 at d_model 192) does not converge at this width; it is scaled as 1/width
# (3e-3 x 192/1024 = 5.6e-4 -> 5e-4) and warmed up over the first epoch.
PRESETS = {
    "gpu": {"d_model": 1024, "heads": 16, "layers": 4, "ff": 4096, "seq_len": 64, "vocab": 64, "batch_size": 512,
            "lr": 5e-4, "warmup_steps": 128, "train_samples": 65536, "eval_samples": 8192, "max_epochs": 30,
            "precision": "bf16"},
}


def make_data(n: int, vocab: int, seq_len: int, steps: list[int], mask_prob: float, data_seed: int,
              offset: int) -> tuple[torch.Tensor, ...]:
    """(masked input ids, labels with -100 where not masked)."""
    g = torch.Generator().manual_seed(data_seed * 7919 + offset)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    step = torch.tensor(steps)[torch.randint(0, len(steps), (n, 1), generator=g)]
    tokens = (start + step * torch.arange(seq_len).view(1, -1)) % vocab
    mask = torch.rand(n, seq_len, generator=g) < mask_prob
    mask[:, 0] |= ~mask.any(dim=1)  # every sequence has at least one target
    inputs = tokens.masked_fill(mask, vocab)  # id `vocab` is [MASK]
    labels = tokens.masked_fill(~mask, -100)
    return inputs, labels


class Encoder(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, layers: int, ff: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab + 1, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Logits at the masked positions only (the head is not run where there is no target)."""
        h = self.body(self.tok(ids) + self.pos[: ids.shape[1]])
        return self.head(self.norm(h[labels != -100]))


def loss_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    ids, labels = batch
    return F.cross_entropy(model(ids, labels).float(), labels[labels != -100])


def eval_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    ids, labels = batch
    target = labels[labels != -100]
    correct = (model(ids, labels).argmax(dim=-1) == target).sum().double()
    return torch.stack([correct, torch.tensor(float(target.numel()), dtype=torch.float64, device=ids.device)])


def accuracy(sums: torch.Tensor) -> float:
    return float(sums[0] / sums[1])


def _steps(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}") from exc
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}")
    return out


def parser() -> argparse.ArgumentParser:
    p = hparams.base_parser(__doc__.splitlines()[0], batch_size=128, lr=3e-3, max_epochs=20, target=0.90,
                            presets=PRESETS)
    p.add_argument("--vocab", type=hparams.positive_int, default=64)
    p.add_argument("--seq-len", type=hparams.positive_int, default=32)
    p.add_argument("--d-model", type=hparams.positive_int, default=192)
    p.add_argument("--heads", type=hparams.positive_int, default=4)
    p.add_argument("--layers", type=hparams.positive_int, default=2)
    p.add_argument("--ff", type=hparams.positive_int, default=768, help="feed-forward width")
    p.add_argument("--mask-prob", type=hparams.unit_float, default=0.15)
    p.add_argument("--steps-set", type=_steps, default=[1, 2, 3], help="progression steps, e.g. 1,2,3")
    p.add_argument("--train-samples", type=hparams.positive_int, default=4096)
    p.add_argument("--eval-samples", type=hparams.positive_int, default=1024)
    return p


def build(args: argparse.Namespace) -> harness.Task:
    shape = (args.vocab, args.seq_len, args.steps_set, args.mask_prob, args.data_seed)
    train = make_data(args.train_samples, *shape, offset=1)
    evals = make_data(args.eval_samples, *shape, offset=2)
    model = Encoder(args.vocab, args.seq_len, args.d_model, args.heads, args.layers, args.ff)
    return harness.Task(BENCHMARK, model, train, evals, loss_fn, eval_fn, accuracy, higher_is_better=True,
                        tokens_per_sample=args.seq_len, uses_attention=True, eval_batch_size=256,
                        params={"model_d_model": args.d_model, "model_layers": args.layers,
                                "model_heads": args.heads, "model_ff": args.ff, "model_vocab": args.vocab,
                                "max_sequence_length": args.seq_len, "mask_prob": args.mask_prob})


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = hparams.parse_with_config(p, argv)
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    return harness.train(p, args, build)


if __name__ == "__main__":
    sys.exit(main())
