"""Inside a distributed run: per-rank step timing, the straggler with its cause, the hang watchdog.

The end-to-end tests train the project's MLP with torchrun (gloo, 2 ranks on the CPU) and use the
workloads' fault drills: `--slow-rank` makes one rank sleep every step, `--hang-rank` stops one rank
before its collective. Expected values come from the drills' own parameters and from the records
written, never from the code under test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perfwatch.core import layout
from perfwatch.core.telemetry import ranks as R
from perfwatch.instrument.ranks import RankTimer

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
TINY_MLP = ["--device", "cpu", "--hidden", "64", "--depth", "2", "--train-samples", "4096", "--eval-samples", "512",
            "--batch-size", "64", "--no-flops", "--log-interval", "0.5"]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_rank_timer_writes_what_the_steps_took(tmp_path: Path) -> None:
    clock = Clock()
    path = layout.rank_file(tmp_path, 3)
    timer = RankTimer(path, rank=3, local_rank=1, world_size=4, device="cuda:1", gpu=1, interval_s=10.0,
                      heartbeat=False, clock=clock)
    timer.resume()
    durations = [0.10, 0.12, 0.30, 0.11, 0.10]
    for d in durations:
        def batches():
            clock.t += 0.02  # waiting for the batch
            yield "batch"
        for _ in timer.timed_data(batches()):
            pass
        with timer.collective():
            clock.t += 0.05
        clock.t += d - 0.07
        timer.step()
    timer.close()
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["rank", "steps", "end"]
    assert recs[0]["rank"] == 3 and recs[0]["gpu"] == 1 and recs[0]["pid"] == os.getpid()
    win = recs[1]
    assert win["steps"] == 5 and win["step_s"] == pytest.approx(durations)
    assert win["data_s"] == pytest.approx(0.02 * 5) and win["coll_s"] == pytest.approx(0.05 * 5)
    stats = R.rank_stats(R.read_rank_files(tmp_path))
    (s,) = stats
    assert s.rank == 3 and s.steps == 5 and s.ended
    assert s.step_median_s == pytest.approx(statistics.median(durations))
    assert s.step_p95_s == pytest.approx(statistics.quantiles(durations, n=20, method="inclusive")[-1])
    assert s.data_share == pytest.approx(0.1 / sum(durations))


def _rank_file(folder: Path, rank: int, busy: float, data: float, gpu: int | None = None,
               t: float = 1000.0) -> None:
    path = layout.rank_file(folder, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"kind": "rank", "rank": rank, "node": "n1", "pid": 10 + rank, "gpu": gpu, "t": t - 30},
             {"kind": "steps", "t": t, "steps": 100, "step_s": [0.1] * 100, "span_s": 10.0,
              "coll_s": 10.0 - busy, "data_s": data}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_rank_others_wait_for_is_the_straggler_and_its_data_wait_is_the_cause(tmp_path: Path) -> None:
    for rank in range(4):
        _rank_file(tmp_path, rank, busy=9.0 if rank == 2 else 6.0, data=3.0 if rank == 2 else 0.1)
    found = R.find_straggler(R.rank_stats(R.read_rank_files(tmp_path)))
    assert found is not None and found.rank == 2
    assert found.excess == pytest.approx(9.0 / 6.0 - 1)
    assert found.cause == "30 % of its time waiting for data"


def test_a_power_capped_gpu_is_named_as_the_cause(tmp_path: Path) -> None:
    for rank in range(4):
        _rank_file(tmp_path, rank, busy=8.0 if rank == 1 else 6.0, data=0.1, gpu=rank)
    telemetry = [{"time": 1000.0 - i, "gpus": [
        {"index": g, "sm_clock": 1980, "throttle": ["sw_power_cap"] if g == 1 and i % 5 < 2 else []}
        for g in range(4)]} for i in range(60)]
    found = R.find_straggler(R.rank_stats(R.read_rank_files(tmp_path)), telemetry)
    assert found is not None and found.rank == 1
    assert found.cause == "GPU 1 power-capped 40 % of the last minute"


def test_ranks_that_wait_alike_have_no_straggler(tmp_path: Path) -> None:
    for rank in range(3):
        _rank_file(tmp_path, rank, busy=6.0 + 0.1 * rank, data=0.1)
    assert R.find_straggler(R.rank_stats(R.read_rank_files(tmp_path))) is None


def test_watchdog_follows_the_runs_own_rhythm_and_is_not_fooled_by_an_eval() -> None:
    assert not R.judge_stall(100.0, 0.5, 104.9, factor=10, floor_s=1).stalled
    v = R.judge_stall(100.0, 0.5, 105.1, factor=10, floor_s=1)
    assert v.stalled and v.limit_s == pytest.approx(5.0) and "5 s" in v.why
    # an eval that the log announces: judged against the longest eval so far, not the step time
    assert not R.judge_stall(100.0, 0.5, 160.0, factor=10, floor_s=1, in_eval=True, longest_eval_s=8).stalled
    assert R.judge_stall(100.0, 0.5, 181.0, factor=10, floor_s=1, in_eval=True, longest_eval_s=8).stalled
    # the first eval of a run: a generous floor, never the step time
    assert not R.judge_stall(100.0, 0.5, 200.0, in_eval=True).stalled
    assert not R.judge_stall(None, 0.5, 1e9).stalled


@pytest.mark.slow
def test_launch_marks_a_hung_torchrun_run_stalled_and_keeps_every_ranks_stacks(tmp_path: Path) -> None:
    """The campaign owner's watchdog, end to end: `perfwatch launch --headless` on a 2-rank job whose
    rank 1 is slow, then hangs: the straggler is printed, the run turns `stalled` with the reason, the
    stacks are kept, then `on_stall: stop` ends it (long before its timeout)."""
    campaign = tmp_path / "hang.yaml"
    campaign.write_text(f"""
name: hang
logdir: {tmp_path / 'runs'}
defaults: {{timeout: 150s, stall_after: 4s, stall_factor: 5, on_stall: stop, grace: 2s, threads: 1}}
jobs:
  - name: ddp
    benchmark: mlp_regression
    launcher: {{type: torchrun, nproc_per_node: 2}}
    cmd: [python, {WORKLOADS / 'mlp.py'}, --no-flops]
    args: {{--device: cpu, --hidden: 64, --depth: 2, --train-samples: 4096, --eval-samples: 512,
            --batch-size: 64, --log-interval: 0.5, --target: 2, --max-epochs: 50,
            --slow-rank: "1:0.1:data", --hang-rank: "1:100"}}
""")
    proc = subprocess.run([sys.executable, "-m", "perfwatch", "launch", str(campaign), "--headless"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "ranks     straggler rank 1: busy" in out and "waiting for data" in out, out[-3000:]
    assert "stalled" in out and "no step for" in out, out[-3000:]
    assert "stopped by the hang watchdog (on_stall: stop)" in out and "timeout" not in out, out[-3000:]
    run = tmp_path / "runs" / "ddp.r0"
    captures = sorted((run / layout.STACKS_DIR).glob("*.json"))
    assert len(captures) == 1, out[-3000:]  # once per stall
    record = json.loads(captures[0].read_text())
    assert record["stuck_ranks"] == [1] and record["waiting_ranks"] == [0], record
    by_rank = {r["rank"]: r for r in record["ranks"]}
    frames = {rank: [f for t in r["threads"] for f in t["frames"]] for rank, r in by_rank.items()}
    assert any(f.startswith("drill_batches") for f in frames[1])  # where the hung rank stopped
    assert by_rank[0]["in_collective"] is True and by_rank[1]["in_collective"] is False
    # `report` on the LOGDIR shows the same ranks: medians as the raw records give them, rank 1 marked
    raw = {}
    for rank in (0, 1):
        lines = layout.rank_file(run, rank).read_text().splitlines()
        raw[rank] = [d for rec in map(json.loads, lines) if rec["kind"] == "steps" for d in rec["step_s"]]
    rep = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(tmp_path / "runs"), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    body = json.loads(rep.stdout)["ranks"]["ddp.r0"]
    assert [r["rank"] for r in body["ranks"]] == [0, 1]
    for row in body["ranks"]:
        assert row["step_median_ms"] == pytest.approx(statistics.median(raw[row["rank"]]) * 1e3)
    assert body["straggler"]["rank"] == 1 and "waiting for data" in body["straggler"]["cause"]
    table = subprocess.run([sys.executable, "-m", "perfwatch", "report", str(tmp_path / "runs")],
                           capture_output=True, text=True, timeout=120).stdout
    assert "RANKS" in table and "slowest" in table and "straggler rank 1" in table and "stuck" in table


async def test_rank_view_shows_each_rank_marks_the_straggler_and_shows_the_stacks(tmp_path: Path) -> None:
    """The real app over a folder with a distributed run: `d` opens its ranks and the captured stacks."""
    from tests.ui_helpers import attach_app, mllog, screen_text, until

    run = tmp_path / "ddp.r0"
    run.mkdir()
    (run / layout.MLLOG_FILE).write_text(mllog("run_start", t=1000) + mllog("tracked_stats", {"throughput": 5.0},
                                                                            t=2000, step=1, samples_count=64))
    for rank in range(4):
        _rank_file(run, rank, busy=9.0 if rank == 2 else 6.0, data=3.0 if rank == 2 else 0.1)
    capture = {"verdict": "stalled: no step for 95 s (limit 30 s)", "stuck_ranks": [2], "waiting_ranks": [0, 1, 3],
               "flight_recorder": [], "ranks": [
                   {"rank": 2, "pid": 12, "node": "n1", "phase": "data", "threads": [
                       {"name": "MainThread", "frames": ["drill_batches (harness.py:280)", "<module> (mlp.py:9)"]}]},
                   {"rank": 0, "pid": 10, "node": "n1", "phase": "compute", "threads": [
                       {"name": "MainThread", "frames": ["_engine_run_backward (graph.py:8)"]}]}]}
    stacks = layout.stacks_file(run, "20261126T000000Z")
    stacks.parent.mkdir()
    stacks.write_text(json.dumps(capture))
    app = attach_app(tmp_path, theme="dark")
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: "ddp.r0" in screen_text(app), "the run")
        await pilot.press("d")
        await until(pilot, lambda: "◀ slowest" in screen_text(app), "the rank table")
        text = screen_text(app)
        assert "straggler: rank 2: busy +50 %" in text and "30 % of its time waiting for data" in text
        rows = [line for line in text.splitlines() if " n1 " in line]
        assert len(rows) == 4 and "◀ slowest" in rows[2]
        # a run with captured stacks opens on them: stuck ranks first; x hides them
        await until(pilot, lambda: "drill_batches (harness.py:280)" in screen_text(app), "the stacks")
        text = screen_text(app)
        assert "rank 2 (STUCK)" in text and text.index("rank 2 (STUCK)") < text.index("rank 0 (waiting)")
        await pilot.press("x")
        await until(pilot, lambda: "drill_batches" not in screen_text(app), "the stacks hidden")
        await pilot.press("escape")
        await until(pilot, lambda: "◀ slowest" not in screen_text(app), "back to the runs")


def test_metrics_export_each_ranks_step_time_and_the_straggler_as_the_rank_files_give_them(tmp_path: Path) -> None:
    """The endpoint formats the same rank report: parsed back with prometheus_client's OpenMetrics parser."""
    from prometheus_client.openmetrics.exposition import generate_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from perfwatch.exporters.metrics import families
    from perfwatch.exporters.source import ExportSnapshot, LiveRun

    durations = {0: [0.1, 0.2, 0.3], 1: [0.1, 0.1, 0.5], 2: [0.2, 0.2, 0.2]}
    for rank, ds in durations.items():
        path = layout.rank_file(tmp_path, rank)
        path.parent.mkdir(exist_ok=True)
        recs = [{"kind": "rank", "rank": rank, "node": f"n{rank // 2}", "t": 1.0},
                {"kind": "steps", "t": 2.0, "steps": 3, "step_s": ds, "span_s": 10.0,
                 "coll_s": 1.0 if rank == 1 else 5.0, "data_s": 0.0}]
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    report = R.rank_report(tmp_path)
    assert report is not None
    snap = ExportSnapshot("c", tmp_path, (LiveRun("ddp.r0", None, "ddp", "stalled", (), None, True, report),),
                        None, "/l", "h")

    class Fixed:
        def collect(self) -> list:
            return families(snap, {})

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    got = {(s.name, s.labels.get("rank") or s.labels.get("perfwatch_run_state")): s.value
           for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples}
    for rank, ds in durations.items():
        assert got[("perfwatch_rank_step_seconds", str(rank))] == pytest.approx(statistics.median(ds))
        assert got[("perfwatch_rank_straggler", str(rank))] == (1.0 if rank == 1 else 0.0)
    assert got[("perfwatch_run_state", "stalled")] == 1.0  # the stalled flag: a member of the state set



def test_a_multi_node_runs_straggler_is_joined_to_its_nodes_gpu_telemetry(tmp_path: Path) -> None:
    """A Slurm job's ranks on two nodes, GPU 0 on each: the node files tell the two GPU 0s apart."""
    for rank in range(4):
        node = "n1" if rank < 2 else "n2.cluster.example"  # a rank's host name; the node file's is the short one
        path = layout.rank_file(tmp_path, rank)
        path.parent.mkdir(exist_ok=True)
        recs = [{"kind": "rank", "rank": rank, "node": node, "gpu": rank % 2, "t": 970.0},
                {"kind": "steps", "t": 1000.0, "steps": 100, "step_s": [0.1] * 100, "span_s": 10.0,
                 "coll_s": 2.0 if rank == 2 else 4.0, "data_s": 0.1}]
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for node, capped in (("n1", False), ("n2", True)):
        lines = [{"time": 1000.0 - i, "gpus": [
            {"index": g, "sm_clock": 1980, "throttle": ["sw_power_cap"] if capped and g == 0 else []}
            for g in range(2)]} for i in range(30)]
        (tmp_path / layout.node_telemetry_name(node)).write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = R.rank_report(tmp_path)
    assert report is not None and report.straggler is not None and report.straggler.rank == 2
    assert report.straggler.cause == "GPU 0 on n2 power-capped 100 % of the last minute"
    assert report.gpus[0]["reasons"] == {} and report.gpus[2]["reasons"] == {"sw_power_cap": 1.0}


def test_a_long_rank_file_is_read_from_its_tail_keeping_its_header(tmp_path: Path) -> None:
    """Hours of records: the last minute and the rank's identity are what the statistics need."""
    path = layout.rank_file(tmp_path, 0)
    path.parent.mkdir()
    lines = [{"kind": "rank", "rank": 0, "node": "n7", "pid": 42, "t": 0.0}]
    lines += [{"kind": "steps", "t": float(i), "steps": 100 * i, "step_s": [0.5] * 100, "span_s": 1.0,
               "coll_s": 0.1, "data_s": 0.0} for i in range(1, 4001)]
    lines.append({"kind": "steps", "t": 4001.0, "steps": 400100, "step_s": [0.25] * 100, "span_s": 1.0,
                  "coll_s": 0.1, "data_s": 0.0})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert path.stat().st_size > R.MAX_RANK_FILE_BYTES
    (rf,) = R.read_rank_files(tmp_path)
    assert rf.info["node"] == "n7" and rf.bad_lines == 0 and rf.windows[-1]["steps"] == 400100
    (s,) = R.rank_stats([rf])
    assert s.node == "n7" and s.pid == 42 and s.steps == 400100 and s.step_now_s == 0.25
