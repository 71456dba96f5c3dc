"""rule_text's matchers give what the regexes they replace give, on mlperf_logging's own files and on
generated text (the regexes are the oracle here: they are what perfwatch used before, and what the
shapes mean)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import mlperf_logging.compliance_checker as cc
import pytest
import yaml
from mlperf_logging.rcp_checker import rcp_checker

from perfwatch.core.mlperf import live_checks, rule_text
from perfwatch.core.mlperf.targets import ruleset_from_path

THRESHOLD = re.compile(r"v\['value'\]\s*(>=|<=)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)")
VERSION = re.compile(r"(?:^|[^0-9a-zA-Z])[vV](\d+)\.(\d+)(?:\.(\d+))?(?![0-9])")
ENQUEUE = re.compile(r"enqueue_config\(\s*'([^']+)'\s*\.format\(\s*v\['value'\]\s*\)\s*\)")
BUDGET = re.compile(r"compile_time_mins'\]\s*=\s*(\d+)\s+if\s+v\['value'\]\s*==\s*'open'\s+else\s+(\d+)")
COUNTS = re.compile(r"'(\w+)'\s*:\s*(\d+)")
IMPURE = re.compile(r"\bs\s*\[|\bs\.|\bll\b|enqueue_config")  # what decided "not judged live" before


def _rule_texts() -> tuple[list[str], list[str]]:
    """Every CHECK / FIRST_CHECK / ATLEAST_ONE_CHECK text and every POST of every training rule file."""
    checks, posts = [], []
    for path in sorted(Path(cc.__file__).parent.glob("training_*/*.yaml")):
        try:
            records = yaml.load(path.read_text(), Loader=yaml.BaseLoader) or []
        except yaml.YAMLError:  # a few shipped files are not YAML (the checker cannot read them either)
            continue
        for record in records if isinstance(records, list) else [records]:
            key = record.get("KEY") if isinstance(record, dict) else None
            if not isinstance(key, dict):
                continue
            for field in ("CHECK", "FIRST_CHECK", "ATLEAST_ONE_CHECK"):
                value = key.get(field)
                checks += [str(v) for v in (value if isinstance(value, list) else [value] if value else [])]
            if isinstance(key.get("POST"), str):
                posts.append(key["POST"])
    return checks, posts


CHECKS, POSTS = _rule_texts()


def _noise(rng: random.Random, pieces: list[str], n: int) -> str:
    return "".join(rng.choice(pieces) for _ in range(n))


def _as_groups(m: re.Match[str] | None) -> tuple[str | None, ...] | None:
    return m.groups() if m else None


def test_the_real_rule_files_are_many() -> None:
    assert len(CHECKS) > 200 and len(POSTS) > 20  # the comparisons below see mlperf_logging's real texts
    assert sum(1 for t in CHECKS if THRESHOLD.search(t)) > 20
    assert sum(1 for p in POSTS if ENQUEUE.search(p)) >= 3 and any(BUDGET.search(p) for p in POSTS)


def test_threshold_as_the_regex() -> None:
    rng = random.Random(1)
    pieces = ["v['value']", " ", "\t", ">=", "<=", ">", "=", "0", "7", ".", "e", "E", "-", "+", "12", "x", "١"]
    texts = CHECKS + [_noise(rng, pieces, rng.randint(1, 14)) for _ in range(20_000)]
    for text in texts:
        assert rule_text.threshold(text) == _as_groups(THRESHOLD.search(text)), text


def test_version_in_name_as_the_regex() -> None:
    rng = random.Random(2)
    pieces = ["v", "V", "x", "_", "-", ".", "4", "0", "10", "١", "/", "training_results_", " "]
    names = ["v4.0", "training_results_v2.1", "v2.1.3", "nv4.0", "V3.10x", "v1.", "results-v0.7.", "v٣.1"]
    names += [_noise(rng, pieces, rng.randint(1, 10)) for _ in range(20_000)]
    for name in names:
        assert rule_text.version_in_name(name) == _as_groups(VERSION.search(name)), name


def test_enqueue_and_budget_as_the_regexes() -> None:
    rng = random.Random(3)
    pieces = ["enqueue_config(", "'", "training_4.0.0/closed_{}.yaml", " ", "\n", ".format(", "v['value']", ")",
              "compile_time_mins']", "=", "==", "30", "240", "if", "else", "'open'", "s['x']", ";"]
    posts = POSTS + [_noise(rng, pieces, rng.randint(1, 16)) for _ in range(30_000)]
    for post in posts:
        assert rule_text.enqueued_config(post) == (m.group(1) if (m := ENQUEUE.search(post)) else None), post
        b = BUDGET.search(post)
        assert rule_text.division_budget(post) == ((int(b.group(1)), int(b.group(2))) if b else None), post


def test_quoted_counts_as_the_regex() -> None:
    source = Path(rcp_checker.__file__).read_text()
    block = source[source.find('"training"'):source.find('"hpc"')]
    expected = {m.group(1): int(m.group(2)) for m in COUNTS.finditer(block)}
    assert expected["bert"] == 10 and expected["resnet"] == 5  # the checker's submission sizes
    assert rule_text.quoted_counts(block) == expected
    rng = random.Random(4)
    pieces = ["'", "bert", "a b", "_", ":", " ", "10", "5", ",", "\n", "'x'"]
    for _ in range(20_000):
        text = _noise(rng, pieces, rng.randint(1, 12))
        assert rule_text.quoted_counts(text) == {m.group(1): int(m.group(2)) for m in COUNTS.finditer(text)}, text


def test_live_checks_skip_the_same_real_rule_texts() -> None:
    """On every real rule text, the live checker leaves out what names the checker's state exactly where
    the regex did (`s[...]`, `s.`, `ll`, enqueue_config)."""
    kept = {text for text, _, _ in live_checks._compile_list(CHECKS)}
    for text in CHECKS:
        text = text.strip()
        try:
            compile(text, "<rule>", "eval")
        except SyntaxError:
            continue
        assert (text in kept) == (not IMPURE.search(text)), text


@pytest.mark.parametrize("path, ruleset", [
    ("/data/training_results_v4.0/NVIDIA/results/x/bert/result_0.txt", "4.0.0"),
    ("/data/v2.1/MosaicML/results/x/bert", "2.1.0"),
    ("/srv/nv4.0/bert/result_0.txt", None),  # a "v" inside a word is not a version
    ("/data/v9.9/bert", None),  # no such ruleset in mlperf_logging
])
def test_ruleset_from_path(path: str, ruleset: str | None) -> None:
    assert ruleset_from_path(path) == ruleset
