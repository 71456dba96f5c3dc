"""Command-line entry point.

Each subcommand lives in its own module under `perfwatch.commands` and exposes
`register(subparsers)`; this module only discovers them, so commands can be
added without editing a central list.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import gc
import importlib
import os
import sys
import types
from typing import NoReturn

import perfwatch
import perfwatch.commands


def _import_msgspec_without_backports() -> None:
    """Import msgspec (every core value type is one of its Structs) without `typing_extensions`.

    msgspec reaches for typing_extensions only for back-ports of what Python 3.11's `typing` has
    (perfwatch requires 3.11); that module and the `inspect` it pulls in were ~10 ms of a ~0.1 s
    `perfwatch report`. Hidden for this one import only: anything imported later (Textual) gets it.
    Three more modules it imports get stand-ins for this import (`_stand_ins`).
    Here, not in `perfwatch.core`: the per-run supervisor imports the core package and must not load
    msgspec at all.
    """
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # its import fails: typing is used
    stand_ins = _stand_ins()
    try:
        import msgspec  # noqa: F401
    finally:
        del sys.modules["typing_extensions"]
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class _StandIn(types.ModuleType):
    """In `sys.modules` only while msgspec is imported: the real module is imported on the first read of
    an attribute the stand-in does not hold, and answers it (and every later one)."""

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _stand_ins() -> dict[str, types.ModuleType]:
    """Modules msgspec's import loads that perfwatch never uses, or uses for one answer:
    - `platform` (~1.5 ms: a dozen regexes compiled), imported by `uuid` on Linux only to call
      `platform.system()` once at import: the stand-in holds that answer (`os.uname().sysname` on POSIX);
    - `textwrap` (~1 ms: its regexes) and `msgspec.inspect` (~0.7 ms: dozens of Struct classes), which
      msgspec imports for its type introspection and JSON-schema generator, neither of which perfwatch uses.
    Already imported modules are left alone; a later `import` of any gets the real module."""
    made: dict[str, types.ModuleType] = {}
    if sys.platform not in ("win32", "darwin") and "platform" not in sys.modules and "uuid" not in sys.modules:
        platform = _StandIn("platform", "os.uname().sysname, for uuid's import only (perfwatch.cli)")
        sysname = os.uname().sysname
        platform.system = lambda: sysname  # type: ignore[attr-defined]
        made["platform"] = platform
    for name in ("textwrap", "msgspec.inspect"):
        if name not in sys.modules:
            made[name] = _StandIn(name, "imported on first use (perfwatch.cli)")
    sys.modules.update(made)
    return made


def command_names() -> list[str]:
    """The modules of `perfwatch.commands` (a listing, not `pkgutil`, which imports `inspect`: 7 ms)."""
    names = {n[:-3] for d in perfwatch.commands.__path__ for n in os.listdir(d) if n.endswith(".py")}
    return sorted(n for n in names if not n.startswith("_"))


@functools.cache
def _help_width() -> int:
    """What argparse's help formatter takes from `shutil.get_terminal_size()` (COLUMNS, else the terminal,
    else 80; less 2), asked once: argparse asks on every `add_argument`, and importing shutil (zlib,
    bz2, lzma) cost ~1 ms of a start-up where nothing else needs it."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too: they are made as the parent's class), help as wide as
    `_help_width()`."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` just that subcommand (startup imports one module, not all)."""
    parser = _Parser(
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


# one-shot commands that only read and print: as the program (not when a test calls `main([...])`), they
# leave without tearing the interpreter down (see `_leave`)
LEAVE_AT_ONCE = frozenset({"report", "check", "compare"})


def main(argv: list[str] | None = None) -> int:
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    if as_program and first in LEAVE_AT_ONCE:
        # a one-shot reader makes no garbage cycles worth collecting before it leaves (`_leave`): the
        # collector's passes over the modules and records it builds were ~4 % of a `report` on a folder
        gc.disable()
    _import_msgspec_without_backports()
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
        rc = int(args.func(args) or 0)
        if as_program and args.command in LEAVE_AT_ONCE:
            _leave(rc)
        return rc
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `perfwatch report ... | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0


def _leave(rc: int) -> NoReturn:
    """Exit now: atexit callbacks run and the streams are flushed, but the interpreter does not free every
    module and object one by one. That teardown (msgspec's module state alone ~25 ms) was 30–60 ms of a
    ~0.17 s `perfwatch report` on a results folder. Everything a command writes is closed before it returns."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): nothing more to say
            stream.flush()
    os._exit(rc)


if __name__ == "__main__":
    raise SystemExit(main())
