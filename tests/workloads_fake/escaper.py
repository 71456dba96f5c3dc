"""A workload whose grandchild escapes its process group and ignores SIGTERM (tests of stop/kill).

It forks a child that forks the grandchild and exits (a classic daemon double fork): the grandchild
calls setsid() (or setpgid(0, 0) with --setpgid), ignores SIGTERM, writes its pid to --pidfile and
sleeps forever holding memory. The workload itself then hangs (or exits 0 after --exit-after s).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pidfile", required=True)
    p.add_argument("--setpgid", action="store_true")
    p.add_argument("--exit-after", type=float, default=None)
    args = p.parse_args()
    if os.fork() == 0:  # child
        if os.fork() == 0:  # grandchild
            if args.setpgid:
                os.setpgid(0, 0)
            else:
                os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            hold = bytearray(16 * 1024 * 1024)  # noqa: F841 - memory it would keep holding
            tmp = args.pidfile + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(tmp, args.pidfile)
            while True:
                time.sleep(1)
        os._exit(0)
    os.wait()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the workload ignores SIGTERM too: SIGKILL after grace
    print("escaper: grandchild started", flush=True)
    if args.exit_after is not None:
        time.sleep(args.exit_after)
        return 0
    while True:
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
