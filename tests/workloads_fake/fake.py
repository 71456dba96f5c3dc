"""A fake-but-real workload for launch tests: prints mllog lines, then succeeds, crashes, hangs or ignores SIGTERM.

    python tests/workloads_fake/fake.py --mode ok --epochs 5 --step 0.05
    python tests/workloads_fake/fake.py --gate FILE --stop-status aborted   # run_stop only once FILE exists

Writes `:::MLLOG` records to $PERFWATCH_MLLOG (the way perfwatch hands a run its log path)
and plain progress text to stdout (perfwatch sends it to output.log).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def emit(fh, key: str, value: object = None, **meta: object) -> None:
    rec = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME",
           "key": key, "value": value, "metadata": meta}
    fh.write(":::MLLOG " + json.dumps(rec) + "\n")
    fh.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "crash", "hang", "ignore_term", "no_stop", "child"], default="ok")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--step", type=float, default=0.05, help="seconds per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gate", help="before logging run_stop, wait until this file exists")
    p.add_argument("--stop-status", default="success", help="run_stop's status")
    args = p.parse_args()
    if args.mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.mode == "child":  # leaves a grandchild in the group: perfwatch must not leave it behind
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    path = os.environ.get("PERFWATCH_MLLOG") or os.devnull
    print(f"fake workload {args.mode} pid {os.getpid()} run {os.environ.get('PERFWATCH_RUN_ID')}", flush=True)
    with open(path, "a") as fh:
        emit(fh, "submission_benchmark", "fake")
        emit(fh, "global_batch_size", args.batch_size)
        emit(fh, "seed", args.seed)
        emit(fh, "run_start")
        for epoch in range(1, args.epochs + 1):
            time.sleep(args.step)
            acc = min(0.99, epoch / args.epochs)
            emit(fh, "eval_accuracy", acc, epoch_num=epoch)
            print(f"epoch {epoch} accuracy {acc:.2f}", flush=True)
            if args.mode == "crash" and epoch == 2:
                print("Traceback (most recent call last):\nRuntimeError: fake CUDA error", flush=True)
                return 3
            if args.mode in ("hang", "ignore_term") and epoch == 2:
                print("waiting forever", flush=True)
                while True:
                    time.sleep(1)
        if args.mode == "no_stop":  # reached the target but never stops by itself
            while True:
                time.sleep(1)
        if args.gate:
            print("waiting for the gate file", flush=True)
            while not os.path.exists(args.gate):
                time.sleep(0.05)
        emit(fh, "run_stop", status=args.stop_status)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
