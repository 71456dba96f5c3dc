"""Command-line entry point.

Each subcommand lives in its own module under `perfwatch.commands` and exposes
`register(subparsers)`; this module only discovers them, so commands can be
added without editing a central list.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import perfwatch
import perfwatch.commands


def command_names() -> list[str]:
    """The modules of `perfwatch.commands`."""
    names = {n[:-3] for d in perfwatch.commands.__path__ for n in os.listdir(d) if n.endswith(".py")}
    return sorted(n for n in names if not n.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` just that subcommand (startup imports one module, not all)."""
    parser = argparse.ArgumentParser(
        prog="perfwatch",
        description="Launch, watch and score deep-learning training benchmarks (MLPerf mllog).",
    )
    parser.add_argument("--version", action="version", version=f"perfwatch {perfwatch.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_names():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"perfwatch.commands.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in command_names() and "-h" not in argv[:1] else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from perfwatch.commands._options import ruleset_error

    bad = ruleset_error(args)
    if bad:
        print(f"perfwatch {args.command}: {bad}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `perfwatch report ... | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
