"""The worker side of `bounded.py`: runs mlperf_logging's checkers for the requests on stdin.

`python -m perfwatch.core.mlperf.bounded_worker`: one JSON request a line on stdin, one JSON answer a
line on stdout; what the official code prints goes to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from perfwatch.core.mlperf import checker, rcp


def _serve(request: dict[str, Any]) -> Any:
    args = request.get("args") or {}
    if request.get("call") == "rcp":
        return rcp.run_checker_here(args["paths"], args["benchmark"], args["ruleset"],
                                    bool(args["as_benchmark"])).to_json()
    if request.get("call") == "check":
        return checker.check_here(args["path"], ruleset=args["ruleset"], root=args["root"]).to_json()
    raise ValueError(f"unknown call {request.get('call')!r}")


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # what the official code prints never mixes with the answers
    for line in sys.stdin:
        try:
            answer: dict[str, Any] = {"result": _serve(json.loads(line))}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
