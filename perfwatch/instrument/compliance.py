"""Official MLPerf compliance rules, re-targeted at perfwatch's own workload names.

The checker's division files accept only MLPerf's benchmark names (and enqueue
`<division>_<benchmark>.yaml`, which does not exist for ours). This module derives, from
the *installed* `training_<ruleset>/common.yaml` and `closed_common.yaml`, one rules
file that keeps every official rule and changes only two things:
- `submission_benchmark` accepts `WORKLOAD_BENCHMARKS` and enqueues nothing;
- `submission_division` keeps its compile-time rule but enqueues nothing (the division
  file's other rules, e.g. `gradient_accumulation_steps`, are merged in instead).

Regenerate the shipped files after upgrading mlperf-logging:
    python -m perfwatch.instrument.compliance --write
Check a log (the checker's own CLI; `--config` takes an absolute path):
    python -m mlperf_logging.compliance_checker --usage training --ruleset 6.1.0 \
        --config "$(python -m perfwatch.instrument.compliance --path 6.1.0)" LOG
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

WORKLOAD_BENCHMARKS = ("mlp_regression", "cnn_shapes", "mlm_arith")
SHIPPED_RULESETS = ("4.0.0", "6.1.0")
RULES_DIR = Path(__file__).with_name("rules")
_ENQUEUE = re.compile(r"enqueue_config\([^;]*\)\s*;?")


def checker_dir() -> Path:
    import mlperf_logging.compliance_checker as cc

    return Path(cc.__file__).parent


def rules_path(ruleset: str) -> Path:
    """The shipped rules file for a ruleset (absolute, as the checker's --config needs)."""
    return (RULES_DIR / f"training_{ruleset}_perfwatch.yaml").resolve()


def _load(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        data = yaml.load(f, Loader=yaml.BaseLoader)  # the checker's own loader: every scalar a string
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of rules")
    return data


def derive(ruleset: str, benchmarks: tuple[str, ...] = WORKLOAD_BENCHMARKS) -> list[dict[str, Any]]:
    """The official common rules of `ruleset` (+ closed-division rules) applied to `benchmarks`."""
    base = checker_dir() / f"training_{ruleset}"
    rules = _load(base / "common.yaml")
    names = {next(iter(r.values()))["NAME"] for r in rules if "KEY" in r}
    for extra in _load(base / "closed_common.yaml"):
        if "KEY" in extra and extra["KEY"]["NAME"] not in names:
            rules.append(extra)
            names.add(extra["KEY"]["NAME"])
    if "submission_benchmark" not in names:
        rules.append({"KEY": {"NAME": "submission_benchmark", "REQ": "EXACTLY_ONE"}})
    for rule in rules:
        key = rule.get("KEY")
        if not key:
            continue
        if key["NAME"] == "submission_benchmark":
            key["CHECK"] = f" v['value'] in {list(benchmarks)!r} "
            key.pop("POST", None)
        elif "POST" in key and "enqueue_config" in key["POST"]:
            post = _ENQUEUE.sub("", key["POST"]).strip()
            if post:
                key["POST"] = f" {post} "
            else:
                key.pop("POST")
    text = yaml.safe_dump(rules, sort_keys=False)
    if "enqueue_config" in text:
        raise ValueError(f"training_{ruleset}: a rule still enqueues another file; update derive()")
    return rules


def render(ruleset: str) -> str:
    header = (f"# Derived by perfwatch.instrument.compliance from mlperf_logging's training_{ruleset}/common.yaml\n"
              f"# (+ closed_common.yaml): every official rule, with submission_benchmark accepting\n"
              f"# {', '.join(WORKLOAD_BENCHMARKS)}. Do not edit; regenerate with --write.\n")
    return header + yaml.safe_dump(derive(ruleset), sort_keys=False, width=200)


def write(rulesets: tuple[str, ...] = SHIPPED_RULESETS) -> list[Path]:
    RULES_DIR.mkdir(exist_ok=True)
    out = []
    for rs in rulesets:
        path = rules_path(rs)
        path.write_text(render(rs), encoding="utf-8")
        out.append(path)
    return out


def checker_argv(log: str | Path, ruleset: str = "6.1.0", log_output: str | Path | None = None) -> list[str]:
    """argv (no shell) that runs the unmodified official checker on `log` with our rules."""
    argv = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
            "--ruleset", ruleset, "--config", str(rules_path(ruleset))]
    if log_output is not None:
        argv += ["--log_output", str(log_output)]
    return argv + [str(log)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfwatch.instrument.compliance", description=__doc__)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="regenerate the shipped rules files")
    g.add_argument("--path", metavar="RULESET", help="print the absolute path of a shipped rules file")
    g.add_argument("--show", metavar="RULESET", help="print the derived rules for any installed ruleset")
    args = p.parse_args(argv)
    if args.write:
        for path in write():
            print(path)
    elif args.path:
        path = rules_path(args.path)
        if not path.exists():
            p.error(f"no shipped rules for ruleset {args.path} (have {', '.join(SHIPPED_RULESETS)})")
        print(path)
    else:
        try:
            sys.stdout.write(render(args.show))
        except FileNotFoundError as exc:
            p.error(f"ruleset {args.show} is not in the installed mlperf_logging: {exc.filename}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
