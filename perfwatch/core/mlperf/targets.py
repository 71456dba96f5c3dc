"""MLPerf quality targets, read from the rule YAMLs that `mlperf_logging` ships.

No table is typed in here: the target of a benchmark in a ruleset is the
threshold in the `ATLEAST_ONE_CHECK` of its `eval_accuracy` rule (for example
`v['value'] >= 0.720` for bert, `v['value'] <= 0.925` for llama2_70b_lora,
where lower is better). A benchmark whose check is not a plain threshold
(stable_diffusion's FID/CLIP pair) has no single target.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import mlperf_logging.compliance_checker as _cc
import msgspec

from perfwatch.core.mlperf.rule_text import round_in_name, threshold, version_in_name

RULES_DIR = Path(_cc.__file__).parent


class Target(msgspec.Struct, frozen=True):
    key: str
    value: float
    higher_is_better: bool = True
    source: str = "config"

    def reached(self, value: float) -> bool:
        return value >= self.value if self.higher_is_better else value <= self.value

    def describe(self) -> str:
        op = "≥" if self.higher_is_better else "≤"
        return f"{self.key} {op} {self.value:g}"


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in name.split("."))
    except ValueError:
        return (-1,)


@functools.cache
def training_rulesets() -> tuple[str, ...]:
    """Training rulesets this mlperf_logging knows, oldest first ("4.0.0", ...)."""
    names = [
        name.removeprefix("training_")
        for name in os.listdir(RULES_DIR)
        if name.startswith("training_") and not name.endswith("_warn") and (RULES_DIR / name).is_dir()
    ]
    return tuple(sorted(names, key=_version_key))


def latest_ruleset() -> str:
    return training_rulesets()[-1]


def ruleset_from_path(path: str | Path) -> str | None:
    """`.../training_results_v2.1/...` or `.../v4.0/...` -> "2.1.0" / "4.0.0" when mlperf_logging knows it.
    A folder named for the round wins over a version inside another folder's name (a system `..._v5.0`
    in the v5.1 round); the one nearest the file first."""
    known = set(training_rulesets())
    parts = list(reversed(Path(path).parts))
    for read in (round_in_name, version_in_name):
        for part in parts:
            found = read(part)
            if found:
                version = f"{found[0]}.{found[1]}.{found[2] or 0}"
                if version in known:
                    return version
    return None


def _rule_file(benchmark: str, ruleset: str, division: str) -> Path | None:
    folder = RULES_DIR / f"training_{ruleset}"
    for name in (f"{division}_{benchmark}.yaml", f"closed_{benchmark}.yaml", f"{benchmark}.yaml"):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def official_target(benchmark: str, ruleset: str | None = None, division: str = "closed") -> Target | None:
    """The eval_accuracy threshold for `benchmark` in `ruleset` (latest if None), or None if unknown."""
    if not benchmark or "/" in benchmark or "\\" in benchmark or benchmark.startswith("."):
        return None
    rulesets = [ruleset] if ruleset else list(reversed(training_rulesets()))
    for rs in rulesets:
        path = _rule_file(benchmark, rs, division)
        if path is None:
            continue
        from perfwatch.core.mlperf import rule_files

        rules = rule_files.records(str(path))
        if rules is None:
            return None
        for rule in rules:
            key = rule.get("KEY") if isinstance(rule, dict) else None
            if not isinstance(key, dict) or key.get("NAME") != "eval_accuracy":
                continue
            check = key.get("ATLEAST_ONE_CHECK")
            if not isinstance(check, str):
                return None
            # inclusive comparisons are quality targets; strict ones ("< 1.0", "> 0.0") are sanity bounds
            found = threshold(check)
            if found is None:
                return None
            op, number = found
            return Target(
                key="eval_accuracy",
                value=float(number),
                higher_is_better=op.startswith(">"),
                source=f"mlperf_logging training_{rs}/{path.name}",
            )
        return None
    return None
