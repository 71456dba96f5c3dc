"""A stand-in for a cache-clear command (`[sudo, /sbin/sysctl, vm.drop_caches=3]` needs root).

    python tests/workloads_fake/clear_cache.py --marker FILE [--exit N] [--sleep S]

Appends one JSON line (pid, process group, run id, time) to FILE so a test can see that it ran,
when, and in which process group; prints a line (perfwatch sends it to the run's output.log);
then sleeps `--sleep` seconds (a hanging cache clear) and exits with `--exit`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--marker", required=True)
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    args = p.parse_args()
    with open(args.marker, "a") as fh:
        fh.write(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "time": time.time(),
                             "run_id": os.environ.get("PERFWATCH_RUN_ID")}) + "\n")
    print(f"fake cache clear: dropped caches (exit {args.exit})", flush=True)
    if args.sleep:
        time.sleep(args.sleep)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
