"""The GPU paths of per-rank timing and the hang watchdog, on a real CUDA GPU with nccl (skip elsewhere).

One GPU is enough: a one-process nccl group (world size 1) runs real nccl collectives. Checked here:
DDP buckets timed by CUDA events read without a sync, and PyTorch's NCCL Flight Recorder asked to
dump through its pipe by `trigger_flight_recorder`, as the watchdog does for a stalled run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from perfwatch.core import layout
from perfwatch.core.telemetry import ranks as R
from perfwatch.core.telemetry import stacks

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CHILD = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from perfwatch.instrument.ranks import RankTimer, ddp_timing_hook
    from perfwatch.instrument.runtime import gpu_uuid
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    model = DistributedDataParallel(nn.Linear(1024, 1024).cuda(), device_ids=[0])
    timer = RankTimer(sys.argv[1], rank=0, device="cuda:0", gpu=0, gpu_uuid=gpu_uuid(torch.device("cuda:0")),
                      interval_s=0.5)
    model.register_comm_hook(None, ddp_timing_hook(timer, cuda=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device="cuda")
    timer.resume()
    for _ in range(200):
        model(x).square().mean().backward()
        opt.step(); opt.zero_grad()
        timer.step()
    torch.cuda.synchronize()
    timer.close()
    print("trained", flush=True)
    if sys.argv[2] == "hang":
        time.sleep(120)
    dist.destroy_process_group()
""")


@pytest.mark.gpu
@needs_cuda
def test_ddp_buckets_are_timed_by_cuda_events_on_nccl(tmp_path: Path) -> None:
    path = layout.rank_file(tmp_path, 0)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), "end"], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    windows = [r for r in recs if r["kind"] == "steps"]
    assert sum(len(w["step_s"]) for w in windows) == 200 and recs[0]["gpu"] == 0
    assert sum(w["coll_s"] for w in windows) > 0  # every bucket's all-reduce timed on the device
    (s,) = R.rank_stats(R.read_rank_files(tmp_path))
    assert s.collective_share is not None and 0 < s.collective_share < 1
    import pynvml  # the rank's GPU UUID is the one NVML (and so perfwatch's telemetry) gives that GPU

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    handle = (pynvml.nvmlDeviceGetHandleByUUID(visible) if visible.startswith("GPU-")
              else pynvml.nvmlDeviceGetHandleByIndex(int(visible)))
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    assert s.gpu_uuid == (uuid.decode() if isinstance(uuid, bytes) else uuid)


@pytest.mark.gpu
@needs_cuda
def test_flight_recorder_dumps_when_the_watchdog_asks(tmp_path: Path) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29562", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
           "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "fr_pipe_"),
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "fr_dump_")}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(layout.rank_file(tmp_path, 0)), "hang"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "trained"
        deadline = time.monotonic() + 60
        done: list[str] = []
        while not done and time.monotonic() < deadline:  # the pipe appears when the group's watchdog starts
            done = stacks.trigger_flight_recorder([(0, proc.pid)])
            time.sleep(0.5)
        assert done, sorted(p.name for p in tmp_path.iterdir())
        dump = tmp_path / "fr_dump_0"
        while not (dump.exists() and dump.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert dump.exists() and dump.stat().st_size > 0, sorted(p.name for p in tmp_path.iterdir())
        py = stacks.dump_stacks(proc.pid)
        assert py.error is None and any("sleep" in f or "<module>" in f for t in py.threads for f in t.frames)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
