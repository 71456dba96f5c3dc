"""Per-rank step timing: what each rank of a run spends on steps, on data and in collectives.

Every rank writes its own file, `<run folder>/ranks/rank_<N>.jsonl` (`core.layout.rank_file`), beside
rank 0's mllog, which stays the MLPerf log, untouched. One JSON object a line:

    {"kind": "rank", "rank": 1, "local_rank": 1, "world_size": 2, "node": "gpu-07", "pid": 4242,
     "device": "cuda:1", "gpu": 1, "gpu_uuid": "GPU-8f3c…", "t": 1764120000.25}
        once, when the timer opens
    {"kind": "steps", "t": ..., "steps": 812, "step_s": [0.101, 0.099, ...], "data_s": 0.012,
     "coll_s": 0.41, "span_s": 1.02}
        every `interval_s` of training: the durations of the window's steps (at most MAX_DURATIONS, evenly
        thinned), the time the window spent blocked on data and in collectives, the window's length
    {"kind": "beat", "t": ..., "phase": "data", "since": ..., "steps": 812, "collective_since": null}
        every `interval_s` from a daemon thread, also while the training thread is stuck: what the rank is
        doing and since when; `collective_since` is when its oldest unfinished collective began
    {"kind": "end", "t": ...}

Costs per step: a few clock reads and a list append; a record is written once per `interval_s`, so the
overhead stays far below P6's 1 % of a step (`benchmarks/workloads.py`). Collectives are timed by wall
clock on the CPU; on a GPU by CUDA events that are read only once they have completed (`Event.query`), so
timing never synchronises the device.

    timer = RankTimer.for_run(rank=r, local_rank=lr, world_size=w, device="cuda:1", gpu=1)
    timer.resume()
    for batch in timer.timed_data(loader):
        loss = step(batch)
        timer.step()
    timer.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from perfwatch.core import layout

__all__ = ["ENV_RANKS", "MAX_DURATIONS", "Phase", "RankTimer", "ddp_timing_hook"]

ENV_RANKS = "PERFWATCH_RANKS"  # "0" turns per-rank timing off
MAX_DURATIONS = 256  # step durations kept per window record


def node_name() -> str:
    """The node this rank runs on: Slurm's name for it inside a job step (what its telemetry file and
    `srun --nodelist` use), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class Phase:
    """What a rank is doing, as its heartbeat says (plain strings in the file)."""

    IDLE = "idle"
    DATA = "data"
    COMPUTE = "compute"
    COLLECTIVE = "collective"
    EVAL = "eval"


T = TypeVar("T")


class RankTimer:
    """Step, data-wait and collective time of one rank, written to its rank file."""

    def __init__(self, path: Path | str, *, rank: int, local_rank: int = 0, world_size: int = 1,
                 device: str = "cpu", gpu: int | None = None, gpu_uuid: str | None = None, interval_s: float = 1.0,
                 heartbeat: bool = True, clock: Callable[[], float] = time.perf_counter) -> None:
        self.path = Path(path)
        self.rank = rank
        self.interval_s = interval_s
        self.clock = clock
        self.steps = 0
        self.phase = Phase.IDLE
        self._offset = time.time() - clock()  # wall time = clock() + offset
        self.since = clock()
        self._last_step_end: float | None = None
        self._win_start = clock()
        self._durations: list[float] = []
        self._data_s = 0.0
        self._coll_s = 0.0
        self._coll_lock = threading.Lock()
        self._open_collectives: dict[int, float] = {}  # token -> start (clock)
        self._next_token = 0
        self._cuda_pairs: list[Any] = []  # (start event, end event) not yet read
        self._write_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._write({"kind": "rank", "rank": rank, "local_rank": local_rank, "world_size": world_size,
                     "node": node_name(), "pid": os.getpid(), "device": device, "gpu": gpu,
                     "gpu_uuid": gpu_uuid, "t": self._wall(clock())})
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if heartbeat and interval_s > 0:
            self._beat = threading.Thread(target=self._beat_loop, name="perfwatch-rank-beat", daemon=True)
            self._beat.start()

    @classmethod
    def for_run(cls, *, rank: int, local_rank: int = 0, world_size: int = 1, device: str = "cpu",
                gpu: int | None = None, gpu_uuid: str | None = None, mllog: str | None = None,
                interval_s: float = 1.0) -> RankTimer | None:
        """The timer of this rank for the run whose mllog is `mllog` (default $PERFWATCH_MLLOG), or None
        when there is no run folder to write into or $PERFWATCH_RANKS is "0"."""
        if os.environ.get(ENV_RANKS, "1") == "0":
            return None
        mllog = mllog or os.environ.get("PERFWATCH_MLLOG")
        if not mllog:
            return None
        folder = Path(mllog).parent
        return cls(layout.rank_file(folder, rank), rank=rank, local_rank=local_rank, world_size=world_size,
                   device=device, gpu=gpu, gpu_uuid=gpu_uuid, interval_s=interval_s)

    # ---- what the training loop calls ------------------------------------------------------------
    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.since = self.clock()

    def timed_data(self, batches: Iterator[T]) -> Iterator[T]:
        """Yield from `batches`, counting the time spent waiting for each as data wait."""
        it = iter(batches)
        while True:
            self.set_phase(Phase.DATA)
            t0 = self.since
            try:
                item = next(it)
            except StopIteration:
                self.set_phase(Phase.COMPUTE)
                return
            self._data_s += self.clock() - t0
            self.set_phase(Phase.COMPUTE)
            yield item

    @contextlib.contextmanager
    def collective(self) -> Iterator[None]:
        """Time a blocking collective called from Python (e.g. an eval all_reduce) by wall clock."""
        token = self.collective_started()
        try:
            yield
        finally:
            self.collective_finished(token)

    def collective_started(self) -> int:
        with self._coll_lock:
            token = self._next_token
            self._next_token += 1
            self._open_collectives[token] = self.clock()
        return token

    def collective_finished(self, token: int) -> None:
        with self._coll_lock:
            start = self._open_collectives.pop(token, None)
            if start is not None:
                self._coll_s += self.clock() - start

    def collective_on_device(self, token: int, start: Any, end: Any) -> None:
        """Collective `token` is timed on the device by two recorded CUDA events, read once completed."""
        with self._coll_lock:
            self._open_collectives.pop(token, None)
            self._cuda_pairs.append((start, end))

    def step(self) -> None:
        """End of one optimizer step (the first call starts the clock)."""
        now = self.clock()
        if self._last_step_end is not None:
            self._durations.append(now - self._last_step_end)
            self.steps += 1
        self._last_step_end = now
        if now - self._win_start >= self.interval_s:
            self.flush(now)

    def resume(self) -> None:
        """(Re)enter training: the next step() ends a step that starts now."""
        self._last_step_end = self.clock()
        self.set_phase(Phase.COMPUTE)

    def pause(self) -> None:
        """Leave training (eval, checkpoint): flush what is pending; until resume() no step is timed."""
        self.flush(self.clock())
        self._last_step_end = None
        self.set_phase(Phase.EVAL)

    def flush(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        with self._coll_lock:
            coll = self._coll_s + self._read_cuda_pairs()
            self._coll_s = 0.0
        if self._durations:
            durations = self._durations
            if len(durations) > MAX_DURATIONS:
                stride = len(durations) / MAX_DURATIONS
                durations = [durations[int(i * stride)] for i in range(MAX_DURATIONS)]
            self._write({"kind": "steps", "t": self._wall(now), "steps": self.steps,
                         "step_s": [round(d, 6) for d in durations], "data_s": round(self._data_s, 6),
                         "coll_s": round(coll, 6), "span_s": round(now - self._win_start, 6)})
        self._durations = []
        self._data_s = 0.0
        self._win_start = now

    def close(self) -> None:
        if self._fd is None:
            return
        self.flush()
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2)
        self.phase = Phase.IDLE
        self._write({"kind": "end", "t": self._wall(self.clock())})
        with self._write_lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    # ---- inside ------------------------------------------------------------------------------------
    def _read_cuda_pairs(self) -> float:
        """Seconds of the CUDA-timed collectives that have completed; the others wait for the next read."""
        total, waiting = 0.0, []
        for start, end in self._cuda_pairs:
            if end.query():
                total += start.elapsed_time(end) / 1000.0
            else:
                waiting.append((start, end))
        self._cuda_pairs = waiting
        return total

    def _wall(self, t: float) -> float:
        return round(t + self._offset, 6)

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._coll_lock:
                oldest = min(self._open_collectives.values(), default=None)
            self._write({"kind": "beat", "t": self._wall(self.clock()), "phase": self.phase,
                         "since": self._wall(self.since), "steps": self.steps,
                         "collective_since": None if oldest is None else self._wall(oldest)})

    def _write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._write_lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):  # a full disk never stops training
                    os.write(self._fd, line)


def ddp_timing_hook(timer: RankTimer, cuda: bool = False) -> Callable[[Any, Any], Any]:
    """A DistributedDataParallel communication hook: the default all-reduce, timed per bucket.

    From the bucket being ready to its all-reduce finished: on a rank that others wait for this is
    short, on the ranks that wait it is long. On CUDA the end is an event recorded on the stream
    the result is delivered on, read later without a sync.
    """
    import torch
    import torch.distributed as dist

    def hook(state, bucket):  # DDP rejects annotations other than its own
        group = state if state is not None else dist.group.WORLD
        world = dist.get_world_size(group)
        tensor = bucket.buffer().div_(world)
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        token = timer.collective_started()
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def done(f: Any) -> Any:
            if cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                timer.collective_on_device(token, start, end)
            else:
                timer.collective_finished(token)
            return f.value()[0]

        return fut.then(done)

    return hook
