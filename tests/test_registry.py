"""perfwatch.json as typed Structs: old files still read, every planned field survives, states are the enum."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec

from perfwatch.core.control import registry
from perfwatch.core.control.campaign import Launcher, RunSpec
from perfwatch.core.control.controller import ClientController, RunState
from perfwatch.core.mlperf.rulesets import StandsFor
from perfwatch.core.mlperf.targets import Target

# perfwatch.json as perfwatch wrote it before the registry was typed (format 1, plain dict; no
# devices_note, peak_flops, trust; ints where floats are meant), plus a key from some newer version.
OLD_FORMAT = {
    "format": 1, "name": "demo", "file": "/home/u/demo.yaml", "description": None, "logdir": "/tmp/x",
    "created_at": 1732230000.5, "updated_at": 1732230100, "config": {"name": "demo"}, "system": {"name": "box"},
    "baseline": "mlp.bs32", "max_parallel": None, "gpus": None,
    "host": {"hostname": "box", "cores": 2}, "scheduler": None, "from_the_future": {"x": 1},
    "runs": [
        {"run_id": "mlp.bs32.r0", "job": "mlp", "group": "mlp.bs32", "benchmark": "mlp_regression", "index": 0,
         "seed": 1, "argv": ["python", "workloads/mlp.py"], "env": {"A": "1"}, "cwd": "/home/u", "gpus_per_run": 0,
         "threads": 1, "precision": "fp32", "timeout": 60, "stall_after": None, "grace": 10, "target":
         {"key": "eval_accuracy", "value": 0.9, "higher_is_better": True, "source": "config"},
         "exit_at_target": False, "isolate": "none", "flops_per_sample": 1000,
         "launcher": {"type": "direct", "nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None,
                      "rdzv_backend": "c10d"},
         "grid": {"--batch-size": 32}, "cache_clear_cmd": None, "state": "succeeded", "attempt": 2, "exit_code": 0,
         "started_at": 1732230001.0, "ended_at": 1732230050.0, "devices": [], "stalled": False, "reason": None,
         "pid": 4242, "pgid": 4242, "create_time": 1732230001.0, "host": "box", "paused_total": 0,
         "intent": None, "env_delta": {"PERFWATCH_RUN_ID": "mlp.bs32.r0"}, "cache_clear": None},
        {"run_id": "mlp.bs32.r1", "argv": ["python", "workloads/mlp.py"], "state": "hibernating"},
    ],
}


def test_an_old_format_file_reads_typed(tmp_path: Path) -> None:
    (tmp_path / "perfwatch.json").write_text(json.dumps(OLD_FORMAT))
    data = registry.read(tmp_path)
    assert data is not None
    assert (data.name, data.baseline, data.system, data.scheduler) == ("demo", "mlp.bs32", {"name": "box"}, None)
    first, second = data.runs
    assert first.state is RunState.SUCCEEDED and first.attempt == 2 and first.pid == 4242
    assert first.target == Target("eval_accuracy", 0.9, True, "config")
    assert first.flops_per_sample == 1000 and first.timeout == 60
    assert first.spec().launcher == Launcher() and first.spec().grid == {"--batch-size": 32}
    assert first.cache_clear_timeout == 60.0  # a field the old file lacks takes its default
    assert second.state is RunState.UNKNOWN  # a state this perfwatch does not know is not a crash
    assert second.attempt == 1 and second.job == ""
    assert data.targets() == {"mlp.bs32.r0": Target("eval_accuracy", 0.9, True, "config")}


def test_a_client_shows_an_old_file_as_run_states(tmp_path: Path) -> None:
    (tmp_path / "perfwatch.json").write_text(json.dumps(OLD_FORMAT))
    procs = ClientController(tmp_path).procs()
    assert procs["mlp.bs32.r0"].state is RunState.SUCCEEDED
    assert procs["mlp.bs32.r0"].folder == tmp_path / "mlp.bs32.r0"
    assert procs["mlp.bs32.r1"].state is RunState.UNKNOWN


def test_what_is_not_a_registry_reads_as_none(tmp_path: Path) -> None:
    for text in ("{}", "[]", "not json", '{"runs": "x"}', '{"runs": [{"argv": []}]}'):
        (tmp_path / "perfwatch.json").write_text(text)
        assert registry.read(tmp_path) is None, text


def test_every_planned_field_survives_perfwatch_json() -> None:
    # a field added to RunSpec but not to RunRecord would be lost on `attach`: this catches it
    values = {
        "run_id": "j.r3", "job": "j", "group": "j", "benchmark": "bert", "index": 3, "seed": 7,
        "argv": ("python", "x.py"), "env": {"K": "V"}, "cwd": "/w", "devices": 2, "threads": 4, "precision": "bf16",
        "timeout": 12.5, "stall_after": 3.0, "grace": 2.0, "target": Target("eval_accuracy", 0.5, False, "log"),
        "exit_at_target": True, "isolate": "per_device", "flops_per_sample": 3e9,
        "launcher": Launcher("torchrun", 2, 1, 0, None, "c10d"), "grid": {"--lr": 0.1},
        "cache_clear_cmd": ("sync",), "cache_clear_timeout": 5.0, "devices_note": "auto: 2 GPUs",
        "peak_flops": {"*": {"bf16": 1e15}}, "mlperf": StandsFor("bert", "4.0.0", "closed"),
        "stall_factor": 6.0, "on_stall": "restart",
    }
    assert set(values) == {f.name for f in dataclasses.fields(RunSpec)}, "give the new RunSpec field a value here"
    spec = RunSpec(**values)  # type: ignore[arg-type]
    on_disk = json.loads(json.dumps(msgspec.to_builtins(registry.RunRecord.planned(spec))))
    back = msgspec.convert(on_disk, registry.RunRecord, strict=False)
    assert back.spec() == spec
    assert on_disk["gpus_per_run"] == 2 and on_disk["state"] == "queued"  # the names the file always had
