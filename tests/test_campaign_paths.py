"""Campaign paths resolve against the campaign file's folder; the interpreter is the campaign's `python`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from launch_helpers import ROOT

from perfwatch.core.control.campaign import CampaignError, load_campaign


def campaign_folder(tmp_path: Path, body: str) -> Path:
    """A campaign folder a user would share: the YAML beside its script (a real mllog workload)."""
    folder = tmp_path / "project"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(ROOT / "tests/workloads_fake/fake.py", folder / "train.py")
    (folder / "campaign.yaml").write_text(body)
    return folder / "campaign.yaml"


def test_launch_by_absolute_path_from_another_directory_runs_the_scripts_beside_the_yaml(tmp_path: Path) -> None:
    yaml = campaign_folder(tmp_path, "name: paths\nlogdir: out/{name}\njobs:\n"
                                     "  - {name: a, cmd: [python, train.py, --epochs, '2']}\n"
                                     "  - {name: b, cwd: sub, cmd: [python, ../train.py, --epochs, '2']}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(yaml), "--headless"], cwd=elsewhere,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((elsewhere / "out/paths/perfwatch.json").read_text())  # LOGDIR: under the current dir
    cwd = {r["run_id"]: r["cwd"] for r in data["runs"]}
    assert cwd == {"a.r0": str(yaml.parent), "b.r0": str(yaml.parent / "sub")}
    assert {r["state"] for r in data["runs"]} == {"succeeded"}
    assert not (yaml.parent / "out").exists()  # nothing written beside the campaign file


def test_relative_to_current_dir_is_the_campaigns_own_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    yaml = campaign_folder(tmp_path, "relative_to: current_dir\njobs:\n  - {name: a, cmd: [python, train.py]}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(CampaignError, match=f"no such script: {elsewhere}/train.py"):
        load_campaign(yaml)
    shutil.copy(yaml.parent / "train.py", elsewhere / "train.py")
    assert load_campaign(yaml).runs[0].cwd == str(elsewhere)
    yaml.write_text("relative_to: here\njobs:\n  - {name: a, cmd: [python, train.py]}\n")
    with pytest.raises(CampaignError, match="campaign.yaml:1: relative_to: expected one of campaign_file, "
                                            "current_dir, got 'here'"):
        load_campaign(yaml)


def test_python_names_the_interpreter_and_a_missing_torch_is_refused_before_anything_starts(tmp_path: Path) -> None:
    yaml = campaign_folder(tmp_path, "jobs:\n  - {name: a, cmd: [python, train.py]}\n")
    assert load_campaign(yaml).runs[0].argv[0] == sys.executable  # default: the interpreter running perfwatch
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a real interpreter without torch (as under pipx)
    script = yaml.parent / "train.py"
    script.write_text("import os\nimport torch\n")
    yaml.write_text("python: ../bare/bin/python\njobs:\n  - {name: a, cmd: [python, train.py]}\n")
    with pytest.raises(CampaignError) as err:
        load_campaign(yaml)
    msg = str(err.value)
    assert msg.startswith(f"{yaml}:3: jobs[0].cmd[1]: train.py imports torch, but the interpreter {bare}/bin/python "
                          "has no torch"), msg
    assert "pip install 'perfwatch[workloads]'" in msg and "`python:`" in msg
    script.write_text("import os\n")  # a script without torch runs in that interpreter
    c = load_campaign(yaml)
    assert c.python == str(bare / "bin/python") and c.runs[0].argv[0] == str(bare / "bin/python")
    yaml.write_text("python: ../bare/bin/python\njobs:\n  - name: d\n    launcher: {type: torchrun}\n"
                    "    cmd: [python, train.py]\n")
    with pytest.raises(CampaignError, match="torchrun, but the interpreter .* has no torch"):
        load_campaign(yaml)
    yaml.write_text("python: no-such-python-here\njobs:\n  - {name: a, cmd: [python, train.py]}\n")
    with pytest.raises(CampaignError, match="campaign.yaml:1: python: program 'no-such-python-here' not found"):
        load_campaign(yaml)


def test_launch_demo_plans_the_packaged_campaign_from_any_folder(tmp_path: Path) -> None:
    import perfwatch

    done = subprocess.run([sys.executable, "-m", "perfwatch", "launch", "--demo", "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    packaged = Path(perfwatch.__file__).parent / "workloads"
    assert f"working directory: {packaged.resolve()}" in done.stdout  # the scripts beside the demo.yaml
    # workloads/demo.yaml: the mlp grid (2 batch sizes x 2 repeats), cnn, mlm and the torchrun mlp: 7 runs
    assert "campaign demo: 7 runs -> runs/demo-" in done.stdout  # LOGDIR: under the current folder
    assert (packaged / "demo.yaml").read_bytes() == (ROOT / "workloads/demo.yaml").read_bytes()  # one copy
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing
    both = subprocess.run([sys.executable, "-m", "perfwatch", "launch", "--demo", str(ROOT / "workloads/demo.yaml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "name a campaign YAML file, or --demo" in both.stderr


def test_launch_only_picks_runs_by_job_group_or_run_id(tmp_path: Path) -> None:
    def plan(*names: str) -> subprocess.CompletedProcess[str]:
        only = [arg for name in names for arg in ("--only", name)]
        return subprocess.run([sys.executable, "-m", "perfwatch", "launch", "workloads/demo.yaml", *only, "--dry-run"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    # workloads/demo.yaml: job mlp is the grid bs32/bs64 x r0/r1, its baseline the group mlp.bs32
    done = plan("mlp.bs32", "mlm")
    assert done.returncode == 0, done.stderr
    planned = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:2] == ["seed"]]
    assert planned == ["mlp.bs32.r0", "mlp.bs32.r1", "mlm.r0"]
    assert "campaign demo: 3 runs ->" in done.stdout and "baseline: mlp.bs32" in done.stdout
    done = plan("cnn.r0")  # the baseline's runs are not launched: no baseline
    planned = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:2] == ["seed"]]
    assert planned == ["cnn.r0"] and "campaign demo: 1 run ->" in done.stdout and "baseline" not in done.stdout
    wrong = plan("mlm", "mlp.bs128")
    assert wrong.returncode == 2
    assert "--only mlp.bs128: no such job, run group or run (jobs: mlp, cnn, mlm, mlp-ddp)" in wrong.stderr
    assert wrong.stdout == ""
