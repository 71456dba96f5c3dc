"""The headless core must never pull in Textual (report, check and --headless run without it)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import perfwatch.core


def test_core_imports_no_textual() -> None:
    modules = [f"perfwatch.core.{m.name}" for m in pkgutil.iter_modules(perfwatch.core.__path__)]
    assert len(modules) >= 5
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"perfwatch.core imported Textual modules: {out.stdout.strip()}"


def test_report_command_imports_no_textual(mlperf_logs) -> None:
    code = (
        "import sys\nfrom perfwatch.cli import main\n"
        f"rc = main(['report', {str(mlperf_logs)!r}, '--format', 'json'])\n"
        "assert rc == 0\n"
        "sys.stderr.write(str(any(m.startswith('textual') for m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().endswith("False")
