"""mlperf_logging's compliance rule files (YAML) as plain records, kept as JSON in the user's cache.

The live checks and the official targets read these files. Importing PyYAML alone costs more than
the rest of `perfwatch report` on one result file, so the records are kept as JSON in
`layout.user_cache_dir()/RULES_CACHE_DIR` (never in a LOGDIR), one file per rule file, keyed by
its path, size and mtime: a reinstalled or edited mlperf_logging is read again. Parsed with
BaseLoader, as the checker's own loader does: every scalar is a string.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.layout import RULES_CACHE_DIR, user_cache_dir, write_json_atomic

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


@functools.cache
def records(path: str) -> list[Any] | None:
    """The file's top-level YAML records; None when it is missing or not YAML."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = [path, st.st_size, st.st_mtime_ns]
    cached = _cache_path(path)
    with contextlib.suppress(OSError, ValueError):
        with open(cached, "rb") as fh:
            entry = msgspec.json.decode(fh.read())  # what a report reads each time: msgspec, not json
        if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("records"), list):
            return entry["records"]
    parsed = _parse(path)
    if parsed is not None:
        with contextlib.suppress(OSError, TypeError, ValueError):  # an unwritable cache costs a parse next time
            cached.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(cached, {"stamp": stamp, "records": parsed}, indent=None)
    return parsed


def _parse(path: str) -> list[Any] | None:
    import yaml  # only when the cache does not hold this file

    try:
        with open(path, encoding="utf-8") as fh:
            loaded = yaml.load(fh, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))  # libyaml: 10x faster
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if loaded is None:
        return []
    return loaded if isinstance(loaded, list) else [loaded]


def _file_name_of(path: str) -> str:
    """`path` as one file name: each run of characters outside [A-Za-z0-9._-] becomes one "_"."""
    out: list[str] = []
    in_run = False
    for ch in path:
        if ch in _NAME_CHARS:
            out.append(ch)
            in_run = False
        elif not in_run:
            out.append("_")
            in_run = True
    return "".join(out)


def _cache_path(path: str) -> Path:
    name = _file_name_of(os.path.abspath(path)).strip("_")[-180:]
    return user_cache_dir() / RULES_CACHE_DIR / f"{name}.json"
