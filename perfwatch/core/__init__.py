"""perfwatch's headless core: log ingest, run model, scores, process control. Never imports Textual.

Layer packages, low to high (a module imports only its own layer and lower ones; tests/test_layers.py
enforces it): `layout`/`keys` (the LOGDIR's file names, perfwatch's own log keys) < `ingest` <
`telemetry` < `mlperf` < `control` < `model` < `measure` < `results` < `engine`. Each package's
`__init__` names what the layers above it use, imported lazily on first access so that a command
(or the per-run supervisor) only pays for what it touches.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `package.<module>` only when one of its names is used."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
