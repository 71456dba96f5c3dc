"""Command-line entry point.

Each subcommand lives in its own module under `perfwatch.commands` and exposes
`register(subparsers)`; this module only discovers them, so commands can be
added without editing a central list.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import perfwatch
import perfwatch.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfwatch",
        description="Launch, watch and score deep-learning training benchmarks (MLPerf mllog).",
    )
    parser.add_argument("--version", action="version", version=f"perfwatch {perfwatch.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(perfwatch.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"perfwatch.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
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
