"""perfwatch as pip puts it: the sdist and wheel `python -m build` makes, installed into a fresh venv.

The build runs on a copy of the checkout (nothing is written into it). The venv sees the test
environment's packages (`--system-site-packages`, so torch is not downloaded again), but imports
perfwatch from the wheel; the packaged demo then runs in an empty folder.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                                ".benchmarks", "build", "dist", "*.egg-info", "runs")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) of a copy of this checkout, the wheel built from the sdist as `python -m build` does."""
    pytest.importorskip("build", reason="needs the `build` package (the test extra)")
    tmp_path = tmp_path_factory.mktemp("dist")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=IGNORE)
    out = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [sdist] = out.glob("perfwatch-*.tar.gz")
    [wheel] = out.glob("perfwatch-*.whl")
    return sdist, wheel


def clean_env() -> dict[str, str]:
    """The environment without this session's PYTHONPATH (which would import the checkout, not the wheel)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.slow
def test_wheel_and_sdist_hold_what_a_user_and_a_packager_need(built: tuple[Path, Path], tmp_path: Path) -> None:
    sdist, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(info).decode())
        licence = zf.read(next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))).decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert any(r.startswith("rich") for r in meta.get_all("Requires-Dist"))
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    for f in ("demo.yaml", "mlp.py", "cnn.py", "mlm.py"):  # the demo campaign and its workloads
        assert f"perfwatch/workloads/{f}" in names
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
        assert "LICENSE" in members and "workloads/demo.yaml" in members and "tests/conftest.py" in members
        assert any(n.startswith("tests/data/mlperf-logs/") for n in members)
        tf.extractall(tmp_path / "unpacked", filter="data")
    # the sdist's own tests run from it (a few that read tests/data and start the CLI)
    unpacked = next((tmp_path / "unpacked").iterdir())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_layers.py",
                           "tests/test_check.py", "-k", "not slow"], cwd=unpacked,
                          env={**clean_env(), "PYTHONPATH": str(unpacked)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout


@pytest.mark.slow
def test_the_installed_wheel_runs_its_demo_in_an_empty_folder(built: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the demo trains with torch")
    _, wheel = built
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                           "--no-build-isolation", "--quiet", f"{wheel}[workloads]"],
                          env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    where = subprocess.run([str(python), "-c", "import perfwatch; print(perfwatch.__file__)"], cwd=empty,
                           env=clean_env(), capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(env_dir)), where.stdout + where.stderr  # the wheel's, not the checkout's
    # one run of the demo is enough to show the packaged workloads train (the whole demo: test_launch_demo.py)
    demo = subprocess.run([str(env_dir / "bin" / "perfwatch"), "launch", "--demo", "--only", "mlp.bs64.r0",
                           "--headless"], cwd=empty,
                          env=clean_env(), capture_output=True, text=True, timeout=900)
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-2000:]
    [logdir] = (empty / "runs").iterdir()  # the LOGDIR: under the current folder
    data = json.loads((logdir / "perfwatch.json").read_text())
    assert [(r["run_id"], r["state"]) for r in data["runs"]] == [("mlp.bs64.r0", "succeeded")]
    packaged = Path(where.stdout.strip()).parent / "workloads"
    assert {r["cwd"] for r in data["runs"]} == {str(packaged)}
    assert data["runs"][0]["argv"][0] == str(python)  # the interpreter that runs perfwatch
    assert sorted(p.name for p in empty.iterdir()) == ["runs"]  # nothing else written in the folder
