"""Typed, constrained command-line hyperparameters that may also come from a JSON file.

MLPerf's reference rules: a flag for every tunable hyperparameter, constraints in the
flag's type (integers take only integers), correct defaults, and a JSON file whose
values the command line overrides. JSON values go through the same type checks as the
command line, so `{"batch_size": 0.5}` fails exactly like `--batch-size 0.5`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def _typed(name: str, check: Callable[[str], Any]) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        try:
            return check(str(text))
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(f"must be {name}, got {text!r}") from exc

    conv.__name__ = name
    return conv


def _pos_int(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise ValueError(text)
    return v


def _nonneg_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise ValueError(text)
    return v


def _pos_float(text: str) -> float:
    v = float(text)
    if not v > 0 or v == float("inf"):
        raise ValueError(text)
    return v


def _nonneg_float(text: str) -> float:
    v = float(text)
    if not v >= 0 or v == float("inf"):
        raise ValueError(text)
    return v


def _unit_float(text: str) -> float:
    v = float(text)
    if not 0.0 <= v < 1.0:
        raise ValueError(text)
    return v


def _slow_rank(text: str) -> tuple[int, float, str]:
    """RANK:SECONDS[:data|compute]"""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(text)
    where = parts[2] if len(parts) == 3 else "compute"
    if where not in ("data", "compute"):
        raise ValueError(text)
    return _nonneg_int(parts[0]), _nonneg_float(parts[1]), where


def _hang_rank(text: str) -> tuple[int, int]:
    """RANK:STEP"""
    rank, sep, step = text.partition(":")
    if not sep:
        raise ValueError(text)
    return _nonneg_int(rank), _nonneg_int(step)


positive_int = _typed("a positive integer", _pos_int)
slow_rank = _typed("RANK:SECONDS[:data|compute]", _slow_rank)
hang_rank = _typed("RANK:STEP", _hang_rank)
nonneg_int = _typed("an integer >= 0", _nonneg_int)
positive_float = _typed("a positive number", _pos_float)
nonneg_float = _typed("a number >= 0", _nonneg_float)
unit_float = _typed("a number in [0, 1)", _unit_float)
any_float = _typed("a number", float)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with named presets: sets of defaults (`--preset gpu`) under --config and flags."""

    presets: Mapping[str, Mapping[str, Any]] = {}


def base_parser(description: str, *, batch_size: int, lr: float, max_epochs: int, target: float,
                eval_interval: int = 1, presets: Mapping[str, Mapping[str, Any]] | None = None) -> Parser:
    """The flags every workload shares; the workload adds its model's flags.

    `presets` maps a name to defaults keyed by destination (`{"gpu": {"hidden": 4096, ...}}`):
    `--preset NAME` applies them; `--config` values and explicit flags still win.
    """
    p = Parser(description=description)
    p.presets = dict(presets or {})
    if p.presets:
        p.add_argument("--preset", choices=sorted(p.presets),
                       help="a set of defaults: " + "; ".join(f"{k}: " + ", ".join(f"{d}={v}" for d, v in vals.items())
                                                              for k, vals in p.presets.items()))
    p.add_argument("--config", metavar="JSON", help="hyperparameters from a JSON object; the command line wins")
    p.add_argument("--mllog", metavar="PATH", help="mllog output (default: $PERFWATCH_MLLOG, else stdout)")
    p.add_argument("--echo-mllog", action="store_true", help="with --mllog/$PERFWATCH_MLLOG: also print to stdout")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed for model init and data order")
    p.add_argument("--data-seed", type=nonneg_int, default=1234, help="seed of the synthetic dataset")
    p.add_argument("--batch-size", type=positive_int, default=batch_size,
                   help="global batch size: samples per optimizer step over all processes and micro-steps")
    p.add_argument("--grad-accum", type=positive_int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--lr", type=positive_float, default=lr, help="base learning rate")
    p.add_argument("--weight-decay", type=nonneg_float, default=0.0, help="decoupled weight decay (AdamW)")
    p.add_argument("--warmup-steps", type=nonneg_int, default=0, help="linear learning-rate warm-up steps")
    p.add_argument("--max-epochs", type=positive_int, default=max_epochs,
                   help="stop with run_stop status=aborted after this many epochs")
    p.add_argument("--eval-interval", type=positive_int, default=eval_interval, help="epochs between evals")
    p.add_argument("--target", type=any_float, default=target, help="eval_accuracy that ends the run (success)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16 = autocast AMP")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--deterministic", action="store_true", help="deterministic kernels only")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model for the training steps (compiled at the first step, which counts)")
    p.add_argument("--log-interval", type=nonneg_float, default=1.0, help="seconds between tracked_stats")
    p.add_argument("--no-flops", action="store_true", help="skip the FLOPs-per-sample measurement")
    p.add_argument("--submission-org", default="perfwatch")
    p.add_argument("--submission-platform", default="", help="system name (default: derived from the device)")
    drills = p.add_argument_group("fault drills (try perfwatch's straggler and hang detection)")
    drills.add_argument("--slow-rank", type=slow_rank, metavar="RANK:SECONDS[:data|compute]",
                        help="rank RANK sleeps SECONDS every optimizer step, while fetching data or computing")
    drills.add_argument("--hang-rank", type=hang_rank, metavar="RANK:STEP",
                        help="rank RANK stops before its collective at optimizer step STEP (counted from 0) "
                             "and sleeps until signalled")
    return p


def _normalize(key: str) -> str:
    return key.lstrip("-").replace("-", "_")


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse argv; values from `--config FILE` become defaults, so explicit flags win.

    Unknown JSON keys and JSON values of the wrong type end the program through
    `parser.error` (exit 2) with a message naming the file, the key and the flag.
    """
    first = parser.parse_args(argv)
    preset = getattr(first, "preset", None)
    if preset and isinstance(parser, Parser):
        parser.set_defaults(**parser.presets[preset])
        first = parser.parse_args(argv)
    path = getattr(first, "config", None)
    if not path:
        return first
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        parser.error(f"--config {path}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        parser.error(f"--config {path}: not valid JSON ({exc.msg} at line {exc.lineno})")
    if not isinstance(data, dict):
        parser.error(f"--config {path}: must hold a JSON object of hyperparameters")
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config", "preset")}
    defaults: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = _normalize(str(raw_key))
        action = actions.get(key)
        if action is None:
            parser.error(f"--config {path}: unknown hyperparameter {raw_key!r}")
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, bool):
                parser.error(f"--config {path}: {raw_key!r} ({flag}) must be true or false, got {value!r}")
            defaults[key] = value
            continue
        if isinstance(value, bool | dict | list) or value is None:
            parser.error(f"--config {path}: {raw_key!r} ({flag}) has a bad value {value!r}")
        if action.type in (positive_int, nonneg_int) and isinstance(value, float):  # 64.0 is not an int
            parser.error(f"--config {path}: {raw_key!r} ({flag}) must be an integer, got {value!r}")
        conv = action.type or str
        try:
            converted = conv(str(value))  # type: ignore[operator]
        except argparse.ArgumentTypeError as exc:
            parser.error(f"--config {path}: {raw_key!r} ({flag}) {exc}")
        if action.choices is not None and converted not in action.choices:
            parser.error(f"--config {path}: {raw_key!r} ({flag}) must be one of "
                         f"{', '.join(map(str, action.choices))}, got {value!r}")
        defaults[key] = converted
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)
