"""Every path of this repository that the README, the docs or a docstring/comment names exists.

A path counts when it starts with one of the repository's folders or perfwatch's packages
(`docs/watch.md`, `core/ingest/tail.py`, `ui/widgets/plot.py`) and is found as written or as the end of a
tracked path; a bare module name (`nvml.py`) must be some tracked file's name. Files in examples that are
not the repository's (a user's `train.py`) are listed below.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    ".ci", "benchmarks", "docs", "grafana", "perfwatch", "tests", "themes", "workloads",
    "backends", "commands", "control", "core", "exporters", "ingest", "instrument", "measure", "mlperf", "model",
    "results", "screens", "telemetry", "text", "ui", "widgets",
}
# examples of files that are not this repository's: a user's script, a submitter's code in a results tree
USER_FILES = {"train.py", "run_pretraining.py", "workloads/X.py", "workloads/bert.py", "mllog_utils.py"}
PATH = re.compile(r"(?<![\w./~$-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|tcss|toml|yaml|json|png|sh))(?![\w/])")
DOCS = ["README.md", "DESIGN.md", "CHANGELOG.md", "benchmarks/RESULTS.md", "docs/*.md"]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [p for p in out.stdout.split("\n") if p and (ROOT / p).exists()]


def _texts() -> Iterator[tuple[str, str]]:
    for pattern in DOCS:
        for path in sorted(ROOT.glob(pattern)):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "perfwatch").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        parts = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    parts.append(doc)
        parts += [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
        yield str(path.relative_to(ROOT)), "\n".join(parts)


def named_paths(text: str) -> Iterator[str]:
    """The repository paths (or module file names) a text names."""
    for m in PATH.finditer(text):
        name = m.group(1)
        if name in USER_FILES:
            continue
        if "/" in name:
            if name.split("/")[0] in FOLDERS:
                yield name
        elif name.endswith((".py", ".tcss")):
            yield name


def missing(text: str, tracked: list[str]) -> list[str]:
    names = {p.rsplit("/", 1)[-1] for p in tracked}
    out = []
    for name in named_paths(text):
        found = (name in tracked or any(p.endswith("/" + name) for p in tracked)) if "/" in name else name in names
        if not found:
            out.append(name)
    return out


def test_every_named_path_exists() -> None:
    tracked = _tracked()
    stale = {f"{where}: {name}" for where, text in _texts() for name in missing(text, tracked)}
    assert sorted(stale) == []


def test_a_stale_path_is_caught() -> None:
    tracked = ["perfwatch/core/ingest/tail.py", "perfwatch/core/telemetry/nvml.py", "docs/watch.md"]
    text = "See `core/ingest/tail.py`, nvml.py and docs/watch.md; not core/tail.py, telemetry_nvml.py or x/y.py."
    assert missing(text, tracked) == ["core/tail.py", "telemetry_nvml.py"]


def test_the_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```", 2)[1].splitlines()[1:]
    assert len(first_block) == 2  # install + demo, install + tests
    assert first_block[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
