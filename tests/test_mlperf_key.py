"""A campaign's job may name the MLPerf benchmark it stands for (`mlperf:`), checked against mlperf_logging,
recorded in the plan, and used by the live RCP projection when the run's log names no MLPerf benchmark."""

from __future__ import annotations

import json
import logging
import re
import textwrap
from pathlib import Path

import pytest
from mlperf_logging.benchmark_meta import get_allowed_benchmarks
from mlperf_logging.rcp_checker import rcp_checker as rc

from perfwatch.cli import main
from perfwatch.core.control import registry
from perfwatch.core.control.campaign import CampaignError, load_campaign

FAKE = str(Path(__file__).resolve().parents[1] / "tests/workloads_fake/fake.py")
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
    assert "target eval_accuracy ≥ 0.72 (bert's, unless the log gives one)" in lines["mlm.r1"]  # MLPerf's bert target
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


# ---- the live RCP projection of a campaign whose job stands for bert ---------------------------------------
BERT = "v2.1/MosaicML/results/8xA100_80GB-baseline/bert"
_EPOCH_NUM = re.compile(r'("epoch_num": )(\d+)')  # bert logs samples there; the RCP checker counts them
_NAMED = re.compile(r'("key": "submission_benchmark", "value": )"bert"')
STANDIN = f"""
    name: standin
    jobs:
      - name: bertlike
        cmd: [python, {FAKE}]
        repeat: 10
        mlperf: {{benchmark: bert, ruleset: 2.1.0, division: closed}}
    """


def bert_logs(src: Path, factor: float, named: str | None) -> list[str]:
    """MosaicML's bert logs converging at `factor` times their samples (each `epoch_num`, which bert logs
    in samples), naming `named` (None: no submission_benchmark at all) instead of bert: as a stand-in
    workload would log."""
    out = []
    for i in range(10):
        text = (src / f"result_{i}.txt").read_text(encoding="latin-1")
        text = _EPOCH_NUM.sub(lambda m: m.group(1) + str(int(int(m.group(2)) * factor)), text)
        if named is None:
            text = "".join(ln for ln in text.splitlines(keepends=True) if '"submission_benchmark"' not in ln)
        else:
            text = _NAMED.sub(lambda m: m.group(1) + json.dumps(named), text)
        out.append(text)
    return out


def as_bert_results(texts: list[str], folder: Path) -> Path:
    """The same runs as a closed-division bert results folder: what mlperf_logging's checker judges."""
    folder.mkdir(parents=True)
    for i, text in enumerate(texts):
        lines = [ln for ln in text.splitlines(keepends=True) if '"submission_benchmark"' not in ln]
        head = ':::MLLOG {"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", ' \
               '"key": "submission_benchmark", "value": "bert", "metadata": {}}\n'
        body = "".join(lines).replace('"submission_division", "value": "open"', '"submission_division", "value": "closed"')
        (folder / f"result_{i}.txt").write_text(head + body, encoding="latin-1")
    return folder


def checker_says(texts: list[str], tmp_path: Path) -> tuple[bool, float, list[float]]:
    """mlperf_logging on these runs as bert: its RCP checker's verdict and factor on the folder (the package
    checker's and summarizer's call: pruned RCPs, their default bert_train_samples=False), and its per-file
    count of samples to converge."""
    folder = as_bert_results(texts, tmp_path / "as-bert" / "bert")
    logging.disable(logging.WARNING)
    try:
        ok, _msg, norm = rc.check_directory(str(folder), "training", "2.1.0", False, False, rcp_pass="pruned_rcps")
        samples = [float(rc.read_submission_file(str(folder / f"result_{i}.txt"), "2.1.0", False)[1])
                   for i in range(len(texts))]
    finally:
        logging.disable(logging.NOTSET)
    return ok, float(norm), samples


def stand_in_logdir(tmp_path: Path, texts: list[str], campaign: str = STANDIN) -> Path:
    """A campaign LOGDIR (its plan) whose runs `bertlike.rN` logged `texts` (each run's mllog.txt)."""
    logdir = planned(tmp_path, campaign)
    for i, text in enumerate(texts):
        log = logdir / f"bertlike.r{i}" / "mllog.txt"
        log.parent.mkdir()
        log.write_text(text, encoding="latin-1")
    return logdir


def olympic(values: list[float]) -> float:
    kept = sorted(values)[1:-1] if len(values) > 2 else values
    return sum(kept) / len(kept)


@pytest.mark.parametrize(("factor", "named", "state"), [
    (5.0, "mlm_arith", "on track"), (3.75, None, "normalised"), (2.0, "mlm_arith", "fail")])
def test_live_projection_judges_the_runs_as_the_campaigns_benchmark(
        tmp_path: Path, mlperf_logs: Path, factor: float, named: str | None, state: str) -> None:
    from perfwatch.core.engine import attach_session
    from perfwatch.core.results.groups import group_rows
    from perfwatch.core.results.live_rcp import projection_for

    texts = bert_logs(mlperf_logs / BERT, factor, named)
    ok, norm, samples = checker_says(texts, tmp_path)  # what mlperf_logging says of these runs as bert
    logdir = planned(tmp_path, STANDIN)
    session = attach_session(logdir, control=False)  # the plan is all a later attach knows the benchmark from
    book = session.book
    for i, text in enumerate(texts):
        log = logdir / f"bertlike.r{i}" / "mllog.txt"
        log.parent.mkdir()
        log.write_text(text, encoding="latin-1")
        book.feed_file(log, text.encode("latin-1"))  # run by run, as the watcher hands them over
        view = book.get(f"bertlike.r{i}").view()
        assert view.benchmark == named and view.stands_for is not None and view.stands_for.benchmark == "bert"
        assert view.target is not None and view.target.value == 0.72 and "mlperf: bert" in view.target.source
        proj = projection_for(book.views(), f"bertlike.r{i}")
        assert proj is not None and proj.converged == i + 1 and proj.required == 10
        assert proj.text.startswith("RCP as bert (MLPerf Training 2.1, closed): ")
        assert f"{i + 1} of 10 runs converged, {9 - i} to go" in proj.text
        assert proj.mean_epochs == pytest.approx(olympic(samples[: i + 1]))
    # with every run in, the projection is the checker's verdict on the same runs as bert
    assert proj.state == state
    assert (proj.state != "fail") == ok
    assert proj.normalization == pytest.approx(norm)
    if state == "normalised":
        assert f"will be normalised ×{norm:.3f}" in proj.text and norm > 1.0
    if state == "fail":
        assert "will fail: mean" in proj.text and "samples" in proj.text

    # the campaign view (`g`): the group is judged as bert, 10 runs needed, the same projection
    (row,) = group_rows({v.run_id: v for v in book.views()})
    assert (row.group, row.benchmark, row.needed, row.stopped) == ("bertlike", "bert", 10, 10)
    assert row.stands_for is not None and row.rcp == proj.text.split(": ", 1)[1]


def test_without_the_key_nothing_is_projected_and_a_log_naming_its_benchmark_wins(
        tmp_path: Path, mlperf_logs: Path) -> None:
    from perfwatch.core.engine import attach_session
    from perfwatch.core.results.live_rcp import projection_for

    texts = bert_logs(mlperf_logs / BERT, 3.75, "mlm_arith")
    plain = tmp_path / "plain"
    plain.mkdir()
    logdir = stand_in_logdir(plain, texts, STANDIN.replace("mlperf: {benchmark: bert, ruleset: 2.1.0, division: closed}",
                                                           ""))
    book = attach_session(logdir, control=False).book
    for i in range(10):
        log = logdir / f"bertlike.r{i}" / "mllog.txt"
        book.feed_file(log, log.read_bytes())
    assert book.get("bertlike.r9").view().stands_for is None
    assert projection_for(book.views(), "bertlike.r9") is None  # only the campaign's key gives one

    # a log that names an MLPerf benchmark itself is judged as it says (as MLPerf's checkers would)
    named = tmp_path / "named"
    named.mkdir()
    logdir = planned(named, STANDIN)
    book = attach_session(logdir, control=False).book
    krai = (mlperf_logs / "v2.1/Krai/results/7920T_2xA5000_mxnet22.08/resnet/result_0.txt").read_bytes()
    log = logdir / "bertlike.r0" / "mllog.txt"
    log.parent.mkdir()
    log.write_bytes(krai)
    book.feed_file(log, krai)
    view = book.get("bertlike.r0").view()
    assert view.benchmark == "resnet" and view.stands_for is None


def test_launch_headless_prints_the_projection_as_runs_stop(tmp_path: Path, mlperf_logs: Path, capsys,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A real campaign: each run's workload writes one stand-in log (no MLPerf benchmark named in it)."""
    texts = bert_logs(mlperf_logs / BERT, 3.75, "mlm_arith")
    src = tmp_path / "src"
    src.mkdir()
    for i, text in enumerate(texts):
        (src / f"result_{i}.txt").write_text(text, encoding="latin-1")
    replay = tmp_path / "replay.py"
    replay.write_text("import os, shutil, sys\nshutil.copyfile(sys.argv[1], os.environ['PERFWATCH_MLLOG'])\n")
    path = write(tmp_path, f"""
        name: standin
        scheduler: {{max_parallel: 1}}
        jobs:
          - name: bertlike
            cmd: [python, {replay}, "{src}/result_{{index}}.txt"]
            repeat: 10
            devices: 0
            mlperf: {{benchmark: bert, ruleset: 2.1.0}}
        """)
    monkeypatch.chdir(ROOT)
    ok, norm, _samples = checker_says(texts, tmp_path)
    assert main(["launch", str(path), "--headless", "--logdir", str(tmp_path / "logdir")]) == 0
    out = capsys.readouterr().out
    rcp_lines = [ln for ln in out.splitlines() if "RCP as bert (MLPerf Training 2.1, closed): " in ln]
    assert rcp_lines, out
    assert all(" bertlike " in ln for ln in rcp_lines)  # one group, named
    assert ok and norm > 1.0
    assert f"will be normalised ×{norm:.3f}" in rcp_lines[-1] and "10 of 10 runs converged, 0 to go" in rcp_lines[-1]
    assert len(rcp_lines) == len(set(rcp_lines))  # printed when it changes, never twice the same



async def test_campaign_view_and_detail_show_the_stand_in(tmp_path: Path, mlperf_logs: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import DataTable
    from ui_helpers import attach_app, screen_text, table, until

    from perfwatch.ui.screens.groups import GroupsScreen

    monkeypatch.setenv("PERFWATCH_CONFIG_DIR", str(tmp_path / "config"))
    texts = bert_logs(mlperf_logs / BERT, 3.75, "mlm_arith")
    _ok, norm, _samples = checker_says(texts, tmp_path)
    app = attach_app(stand_in_logdir(tmp_path, texts), theme="dark")
    async with app.run_test(size=(200, 40)) as pilot:
        await until(pilot, lambda: len(table(app).visible_ids) == 10, "10 runs")
        await until(pilot, lambda: "stands for bert (MLPerf Training 2.1, closed)" in screen_text(app),
                    "the run detail naming the benchmark it stands for")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupsScreen), "the campaign view")
        screen = app.screen
        await until(pilot, lambda: len(screen.rows) == 1, "one group")
        screen.query_one(DataTable).move_cursor(row=0)
        expected = f"RCP as bert (MLPerf Training 2.1, closed) (the campaign's mlperf:): will be normalised ×{norm:.3f}"
        await until(pilot, lambda: expected in screen_text(app), "the group's projection as bert")
        text = screen_text(app)
        assert "bert (stand-in)" in text and "10/10" in text  # stopped/runs; MLPerf's 10 runs for bert


def test_a_planted_or_unknown_entry_in_perfwatch_json_is_not_used(tmp_path: Path) -> None:
    logdir = planned(tmp_path)
    plain = json.loads((logdir / "perfwatch.json").read_text())
    plain["runs"][0]["mlperf"] = {"benchmark": "../../../etc/x", "ruleset": "2.1.0", "division": "closed"}
    plain["runs"][1]["mlperf"] = {"benchmark": "bert", "ruleset": "../../x", "division": "closed"}
    plain["runs"][2]["mlperf"] = {"benchmark": "bert", "ruleset": "6.1.0", "division": "closed"}  # 6.1.0 has no bert
    plain["runs"][3]["mlperf"] = {"benchmark": "bert", "ruleset": "2.1.0", "division": "closed"}
    (logdir / "perfwatch.json").write_text(json.dumps(plain))
    data = registry.read(logdir)
    assert data is not None
    assert {k: (v.benchmark, v.ruleset) for k, v in data.stand_ins().items()} == {"plain.r0": ("bert", "2.1.0")}


def test_report_judges_a_campaign_logdir_as_the_benchmark_it_stands_for(tmp_path: Path, mlperf_logs: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    texts = bert_logs(mlperf_logs / BERT, 3.75, "mlm_arith")
    ok, norm, _samples = checker_says(texts, tmp_path)
    logdir = stand_in_logdir(tmp_path, texts)
    assert main(["report", str(logdir), "--format", "json", "--no-cpu-peak"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    assert bench["benchmark"] == "mlm_arith"  # the logs' own name (scores, compliance)
    assert bench["stands_for"] == {"benchmark": "bert", "ruleset": "2.1.0", "division": "closed"}
    assert ok and (bench["rcp"]["verdict"], bench["rcp"]["normalization"]) == ("pass", pytest.approx(norm))
    assert main(["report", str(logdir), "--no-cpu-peak"]) == 0
    assert f"pass ×{norm:.4f} as bert" in capsys.readouterr().out
    # the same logs without the campaign's plan: nothing says they stand for bert
    (logdir / "perfwatch.json").unlink()
    assert main(["report", str(logdir), "--format", "json", "--no-cpu-peak"]) == 0
    (bench,) = json.loads(capsys.readouterr().out)["benchmarks"]
    assert bench["stands_for"] is None and bench["rcp"]["verdict"] == "n/a"
