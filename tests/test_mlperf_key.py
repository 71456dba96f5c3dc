"""A campaign's job may name the MLPerf benchmark it stands for (`mlperf:`), checked against mlperf_logging,
recorded in the plan, and used by the live RCP projection when the run's log names no MLPerf benchmark."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from mlperf_logging.benchmark_meta import get_allowed_benchmarks

from perfwatch.cli import main
from perfwatch.core.control import registry
from perfwatch.core.control.campaign import CampaignError, load_campaign

FAKE = "tests/workloads_fake/fake.py"
ROOT = Path(__file__).resolve().parents[1]
RULESETS_DIR = Path(__import__("mlperf_logging.compliance_checker", fromlist=["x"]).__file__).parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def newest_listing(benchmark: str) -> str:
    """The newest training ruleset whose benchmark list (mlperf_logging's) names `benchmark`."""
    versions = sorted((p.name.removeprefix("training_") for p in RULESETS_DIR.glob("training_*")
                       if p.is_dir() and not p.name.endswith("_warn")), key=lambda v: tuple(map(int, v.split("."))))
    return [v for v in versions if benchmark in get_allowed_benchmarks("training", v)][-1]


CAMPAIGN = f"""
    name: standin
    system: {{division: open}}
    defaults:
      mlperf: {{benchmark: bert, ruleset: 2.1.0, division: closed}}
    jobs:
      - name: mlm
        cmd: [python, {FAKE}]
        repeat: 2
      - name: cnn
        cmd: [python, {FAKE}]
        mlperf: resnet
      - name: plain
        cmd: [python, {FAKE}]
        mlperf: null
    """


def test_campaign_key_loads_and_the_plan_shows_it(tmp_path: Path, capsys, monkeypatch) -> None:
    path = write(tmp_path, CAMPAIGN)
    c = load_campaign(path, base=ROOT)
    by_id = {r.run_id: r.mlperf for r in c.runs}
    assert by_id["mlm.r0"] is not None and by_id["mlm.r1"] is not None
    assert (by_id["mlm.r0"].benchmark, by_id["mlm.r0"].ruleset, by_id["mlm.r0"].division) == ("bert", "2.1.0", "closed")
    # no ruleset: the newest that lists the benchmark; no division: the campaign's system.division
    cnn = by_id["cnn.r0"]
    assert cnn is not None and (cnn.benchmark, cnn.ruleset, cnn.division) == ("resnet", newest_listing("resnet"), "open")
    assert by_id["plain.r0"] is None  # `mlperf: null` turns the default off

    monkeypatch.chdir(ROOT)
    assert main(["launch", str(path), "--dry-run", "--logdir", str(tmp_path / "never")]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ") and ln.split()}
    assert "stands for bert (MLPerf Training 2.1, closed)" in lines["mlm.r1"]
    short = ".".join(newest_listing("resnet").split(".")[:2])
    assert f"stands for resnet (MLPerf Training {short}, open)" in lines["cnn.r0"]
    assert "stands for" not in lines["plain.r0"]
    assert not (tmp_path / "never").exists()


def planned(tmp_path: Path, text: str = CAMPAIGN) -> Path:
    """A LOGDIR holding only the campaign's plan (perfwatch.json), as `launch` writes it."""
    c = load_campaign(write(tmp_path, text), base=ROOT)
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    registry.write(logdir, registry.new_registry(c, logdir))
    return logdir


def test_the_plan_records_it_for_a_later_attach(tmp_path: Path) -> None:
    logdir = planned(tmp_path)
    plain = json.loads((logdir / "perfwatch.json").read_text())
    runs = {r["run_id"]: r for r in plain["runs"]}
    assert runs["mlm.r0"]["mlperf"] == {"benchmark": "bert", "ruleset": "2.1.0", "division": "closed"}
    assert runs["plain.r0"]["mlperf"] is None
    data = registry.read(logdir)
    assert data is not None
    assert {k: (v.benchmark, v.ruleset) for k, v in data.stand_ins().items()} == {
        "mlm.r0": ("bert", "2.1.0"), "mlm.r1": ("bert", "2.1.0"), "cnn.r0": ("resnet", newest_listing("resnet"))}


OK_JOB = f"jobs:\n  - name: mlp\n    cmd: [python, {FAKE}]\n"
BAD = [
    # (yaml, line, field, words in the message)
    (OK_JOB + "    mlperf: {benchmark: bret}\n", 4, "jobs[0].mlperf.benchmark",
     "'bret' is not an MLPerf Training benchmark; did you mean 'bert'?"),
    (OK_JOB + "    mlperf:\n      benchmark: bert\n      ruleset: 9.9.9\n", 6, "jobs[0].mlperf.ruleset",
     "unknown MLPerf Training ruleset '9.9.9'"),
    (OK_JOB + "    mlperf:\n      benchmark: bert\n      ruleset: 6.1.0\n", 5, "jobs[0].mlperf.benchmark",
     "bert is not a benchmark of MLPerf Training 6.1.0"),
    (OK_JOB + "    mlperf: {benchmark: bert, division: semi}\n", 4, "jobs[0].mlperf.division",
     "expected 'open' or 'closed'"),
    (OK_JOB + "    mlperf: {ruleset: 4.0.0}\n", 4, "jobs[0].mlperf", "missing key 'benchmark'"),
    (OK_JOB + "    mlperf: {benchmark: bert, rulset: 4.0.0}\n", 4, "jobs[0].mlperf.rulset", "did you mean 'ruleset'"),
    ("defaults:\n  mlperf: mlp_regression\n" + OK_JOB, 2, "defaults.mlperf",
     "'mlp_regression' is not an MLPerf Training benchmark"),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_benchmark_or_ruleset_names_file_line_field(tmp_path: Path, text: str, line: int, field: str,
                                                         words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CampaignError) as info:
        load_campaign(path, base=ROOT)
    err = info.value
    assert (err.line, err.field) == (line, field), str(err)
    assert words in err.message, str(err)


def test_cli_refuses_an_unknown_ruleset_with_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "c.yaml"
    path.write_text(OK_JOB + "    mlperf: {benchmark: resnet, ruleset: 4.2.0}\n")
    assert main(["launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir")]) == 2
    assert f"{path}:4: jobs[0].mlperf.ruleset: unknown MLPerf Training ruleset '4.2.0'" in capsys.readouterr().err
    assert not (tmp_path / "logdir").exists()


def test_it_is_signed_and_plans_without_it_keep_their_digest(tmp_path: Path) -> None:
    from perfwatch.core.control import trust

    plain = json.loads((planned(tmp_path) / "perfwatch.json").read_text())
    assert trust.untrusted_reason(plain) is None
    # a plan written before the key existed has no "mlperf" at all: the same digest as `null`
    older = json.loads(json.dumps(plain))
    del older["runs"][3]["mlperf"]
    assert older["runs"][3]["run_id"] == "plain.r0" and trust.plan_digest(older) == trust.plan_digest(plain)
    # it gives a run its target (and with it when exit_at_target stops it): an edit is not this user's plan
    plain["runs"][0]["mlperf"]["benchmark"] = "resnet"
    assert trust.untrusted_reason(plain) is not None
