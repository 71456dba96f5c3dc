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

# `--preset gpu`: a 4-layer d_model-2048 encoder, batch 1024 x 32 tokens (~4e13 FLOPs a step). Width is what
# makes a transformer step matmul-bound: its matmul FLOPs grow as d_model^2 per token, its memory-bound work
# (LayerNorm, GELU, residual adds, autocast casts) as d_model; at d_model 1024 that work held the step to
# 28.9 % of an H200's bf16 peak. The CPU default learning rate (3e-3 at d_model 192) does not converge at
# these widths; it is scaled as 1/width (3e-3 x 192/2048 = 2.8e-4 -> 2.5e-4) and warmed up over the first
# two epochs (32 steps each, an eval after each). 32-token sequences, as on the CPU: a scaled-down copy
# (d_model 64, lr 8e-3, on the CPU) had 0.895 after 96 steps with them, 0.07 after 128 steps with 64 tokens.
PRESETS = {
    "gpu": {"d_model": 2048, "heads": 16, "layers": 4, "ff": 8192, "seq_len": 32, "vocab": 64, "batch_size": 1024,
            "lr": 2.5e-4, "warmup_steps": 64, "train_samples": 32768, "eval_samples": 4096, "max_epochs": 20,
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


class Block(nn.Module):
    """One pre-norm encoder layer: x + attn(norm1(x)), then x + ff(norm2(x)), GELU, no dropout.

    The math (and the initialisation) of `nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
    dropout=0)`, written out so the attention is one QKV projection viewed as (batch, heads, seq, head_dim)
    and passed to `F.scaled_dot_product_attention` (flash attention on a GPU): `nn.MultiheadAttention` works
    sequence-first, so it copies its input, q/k/v and its output between layouts, forward and backward.
    """

    def __init__(self, d_model: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ff)
        self.ff2 = nn.Linear(ff, d_model)
        nn.init.xavier_uniform_(self.qkv.weight)  # as nn.MultiheadAttention initialises its in-projection
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)  # (b, heads, n, head_dim), no mask: bidirectional
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, layers: int, ff: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab + 1, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))
        self.body = nn.ModuleList(Block(d_model, heads, ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, targets): on the CPU at the masked positions only; on a GPU at every position, with
        target -100 (ignored) where nothing is masked.

        Selecting the masked positions (`h[labels != -100]`) has a data-dependent shape: on a GPU that is a
        host sync every step (and a graph break under torch.compile). Running the head everywhere instead
        costs vocab/(12 x d_model x layers) more FLOPs (0.07 % at `--preset gpu`); on the CPU, where
        selection is free, the head runs only where there is a target.
        """
        h = self.tok(ids) + self.pos[: ids.shape[1]]
        for block in self.body:
            h = block(h)
        if ids.device.type != "cpu":
            return self.head(self.norm(h)).flatten(0, 1), labels.flatten()
        mask = labels != -100
        return self.head(self.norm(h[mask])), labels[mask]


def loss_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    logits, target = model(*batch)
    return F.cross_entropy(logits.float(), target)  # the mean over the masked positions (-100 is ignored)


def eval_fn(model: nn.Module, batch: harness.Batch) -> torch.Tensor:
    """(correct, masked positions) as float64 sums, computed on the device (no host sync)."""
    logits, target = model(*batch)
    scored = target != -100
    correct = ((logits.argmax(dim=-1) == target) & scored).sum()
    return torch.stack([correct, scored.sum()]).double()


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
