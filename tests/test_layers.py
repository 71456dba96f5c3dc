"""The layers of perfwatch/core, enforced from the source: no import cycle, no lower layer importing a higher one.

Every module under perfwatch/ is parsed with `ast`; imports at module level *and* inside
functions count, for the layer order and for cycles alike (an import inside a function is still a
dependency, and is how a cycle hides). Imports under `if TYPE_CHECKING:` are for the type checker
only and are skipped. The order is the one in DESIGN.md §2 and docs/INTERFACES.md.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import perfwatch

PKG_ROOT = Path(perfwatch.__file__).parent

# low -> high; a module may import its own layer and any lower one
LAYERS: tuple[tuple[str, ...], ...] = (
    ("perfwatch.core", "perfwatch.core.layout", "perfwatch.core.keys"),
    ("perfwatch.core.ingest",),
    ("perfwatch.core.telemetry",),
    ("perfwatch.core.mlperf",),
    ("perfwatch.core.control",),
    ("perfwatch.core.model",),
    ("perfwatch.core.measure",),
    ("perfwatch.core.results",),
    ("perfwatch.core.engine",),
)
FRONT_ENDS = ("perfwatch.ui", "perfwatch.text", "perfwatch.commands", "perfwatch.cli", "perfwatch.exporters", "textual")
# what perfwatch.instrument (imported by the workloads, inside the training process) may use of core
INSTRUMENT_MAY_USE = ("perfwatch.core", "perfwatch.core.layout", "perfwatch.core.keys")
# the compliance rules perfwatch ships for its own workloads' names are data the checker reads
CORE_MAY_USE_INSTRUMENT = ("perfwatch.instrument.compliance",)


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (or package)
    line: int
    top: bool  # at module level (not inside a function or class body method)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, tree: ast.AST, known: set[str], is_package: bool) -> Iterator[Import]:
    """(module, line, at module level) for every import in `tree`, resolved to a known module where possible."""

    def resolve(base: str, names: list[str]) -> list[str]:
        out = []
        for n in names:
            full = f"{base}.{n}" if base else n
            out.append(full if full in known else base)
        return out

    def visit(node: ast.AST, top: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    yield from visit(sub, top)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(source, alias.name, child.lineno, top)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pkg = source if is_package else source.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{child.module}" if child.module else pkg
                else:
                    base = child.module or ""
                for target in resolve(base, [a.name for a in child.names]):
                    yield Import(source, target, child.lineno, top)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, False)
            else:
                yield from visit(child, top)

    yield from visit(tree, True)


def scan(root: Path = PKG_ROOT) -> list[Import]:
    files = sorted(root.rglob("*.py"))
    names = {module_name(p, root): p for p in files}
    known = set(names)
    out: list[Import] = []
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out.extend(imports_of(name, tree, known, path.name == "__init__.py"))
    return out


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the most specific prefix wins
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return best[1] if best else None


def layer_violations(imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        if _within(imp.source, "perfwatch.core"):
            if any(_within(imp.target, f) for f in FRONT_ENDS):
                bad.append(f"{imp.source}:{imp.line} imports the front end {imp.target}")
                continue
            if _within(imp.target, "perfwatch.instrument") and imp.target not in CORE_MAY_USE_INSTRUMENT:
                bad.append(f"{imp.source}:{imp.line} imports the workload-side {imp.target}")
                continue
            src, dst = layer_of(imp.source), layer_of(imp.target)
            if src is not None and dst is not None and dst > src:
                bad.append(f"{imp.source}:{imp.line} (layer {LAYERS[src][-1]}) imports the higher "
                           f"{imp.target} (layer {LAYERS[dst][-1]})")
        elif _within(imp.source, "perfwatch.instrument") and _within(imp.target, "perfwatch") \
                and not _within(imp.target, "perfwatch.instrument") and imp.target not in (*INSTRUMENT_MAY_USE, "perfwatch"):
            bad.append(f"{imp.source}:{imp.line} (runs inside the workload) imports {imp.target}")
    return bad


def cycles(imports: list[Import], within: str = "perfwatch.core") -> list[list[str]]:
    """Strongly connected components (> 1 module) of the import graph, function-level imports included."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if _within(imp.source, within) and _within(imp.target, within) and imp.source != imp.target:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


# ---- the rules hold for the real tree ------------------------------------------------------------------------------
def test_every_core_module_has_a_layer() -> None:
    core = {module_name(p, PKG_ROOT) for p in (PKG_ROOT / "core").rglob("*.py")}
    assert len(core) > 30
    assert sorted(m for m in core if layer_of(m) is None) == []


def test_no_import_cycle_in_core_counting_function_level_imports() -> None:
    found = scan()
    assert sum(1 for i in found if not i.top and _within(i.source, "perfwatch.core")) > 0  # they are seen
    assert cycles(found) == []


def test_no_lower_layer_imports_a_higher_one_and_core_no_front_end() -> None:
    assert layer_violations(scan()) == []


def test_the_workloads_side_uses_only_the_layout_and_the_keys_of_core() -> None:
    used = {i.target for i in scan() if _within(i.source, "perfwatch.instrument") and _within(i.target, "perfwatch.core")}
    assert used <= set(INSTRUMENT_MAY_USE)
    assert used  # it does use the keys: the contract is shared, not copied


def test_the_supervisor_of_every_run_stays_import_light() -> None:
    # it starts once per run and must not drag perfwatch's heavy dependencies into the run's process group
    code = ("import sys, perfwatch.core.control.supervisor\n"
            "heavy = ('psutil', 'msgspec', 'yaml', 'torch', 'textual', 'mlperf_logging', 'pynvml', 'watchdog')\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_headless_core_imports_no_textual() -> None:
    code = ("import importlib, pkgutil, sys, perfwatch.core\n"
            "for m in pkgutil.walk_packages(perfwatch.core.__path__, 'perfwatch.core.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'textual')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_each_core_package_says_what_it_is_for() -> None:
    import importlib

    for path in sorted((PKG_ROOT / "core").rglob("__init__.py")):
        pkg = importlib.import_module(module_name(path, PKG_ROOT))
        assert pkg.__doc__ and pkg.__doc__.strip(), pkg.__name__


def test_report_command_imports_no_textual(mlperf_logs: Path) -> None:
    code = (
        "import sys\nfrom perfwatch.cli import main\n"
        f"rc = main(['report', {str(mlperf_logs)!r}, '--format', 'json'])\n"
        "assert rc == 0\n"
        "sys.stderr.write(str(any(m.startswith('textual') for m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().endswith("False")


# ---- the checker itself catches what it must -----------------------------------------------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "perfwatch"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_hidden_cycle_and_a_lazy_upward_import_are_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "core/mlperf/__init__.py": "", "core/model/__init__.py": "",
        "core/mlperf/a.py": "from perfwatch.core.mlperf import b\n",
        "core/mlperf/b.py": "import perfwatch.core.mlperf.a\n",
        "core/mlperf/c.py": "def f():\n    from perfwatch.core.model import run\n",
        "core/model/run.py": "from perfwatch.core.mlperf import c\n",
        "core/model/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from perfwatch.ui import app\n",
        "instrument/__init__.py": "from perfwatch.core.model.run import x\n",
    })
    found = scan(root)
    # c -> run is inside a function: a cycle all the same
    assert cycles(found) == [["perfwatch.core.mlperf.a", "perfwatch.core.mlperf.b"],
                             ["perfwatch.core.mlperf.c", "perfwatch.core.model.run"]]
    bad = layer_violations(found)
    assert any(b.startswith("perfwatch.core.mlperf.c:2") and "perfwatch.core.model.run" in b for b in bad)
    assert any(b.startswith("perfwatch.instrument:1") for b in bad)
    assert not any("perfwatch.ui" in b for b in bad)  # type-checking only
    assert len(bad) == 2
