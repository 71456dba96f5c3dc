"""What perfwatch reads out of mlperf_logging's rule files and RCP checker: on the shipped files and on
small examples of each shape."""

from __future__ import annotations

from pathlib import Path

import mlperf_logging.compliance_checker as cc
import pytest
import yaml
from mlperf_logging.rcp_checker import rcp_checker

from perfwatch.core.mlperf import rule_text
from perfwatch.core.mlperf.targets import ruleset_from_path


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


def test_the_real_rule_files_are_read() -> None:
    """On mlperf_logging's shipped rule files: quality thresholds, per-value rule files and the
    division init budget are found where the files hold them."""
    assert len(CHECKS) > 200 and len(POSTS) > 20
    found = [t for t in (rule_text.threshold(c) for c in CHECKS) if t]
    assert len(found) > 20 and {op for op, _ in found} <= {">=", "<="}
    assert {"0.720", "0.75"} <= {number for _, number in found}  # BERT and ResNet quality targets
    patterns = {p for p in map(rule_text.enqueued_config, POSTS) if p}
    assert len(patterns) >= 2 and all("{}" in p and p.endswith(".yaml") for p in patterns)
    budgets = {b for b in map(rule_text.division_budget, POSTS) if b}
    assert budgets and all(open_ > 0 and closed > 0 for open_, closed in budgets)


@pytest.mark.parametrize("check, expected", [
    ("v['value'] >= 0.720 and v['value'] < 1.0", (">=", "0.720")),
    ("v['value']<=  2.5e-3", ("<=", "2.5e-3")),
    ("v['value'] <= .9", ("<=", ".9")),
    ("v['value'] > 0.72", None),  # only >= and <= are thresholds
    ("'epoch_num' in v['metadata']", None),
])
def test_threshold(check: str, expected: tuple[str, str] | None) -> None:
    assert rule_text.threshold(check) == expected


@pytest.mark.parametrize("name, expected", [
    ("training_results_v2.1", ("2", "1", None)),
    ("v4.0", ("4", "0", None)),
    ("results-v2.1.3", ("2", "1", "3")),
    ("nv4.0", None),  # a "v" inside a word
    ("v1.", None),
])
def test_version_in_name(name: str, expected: tuple[str, str, str | None] | None) -> None:
    assert rule_text.version_in_name(name) == expected


def test_enqueue_and_budget() -> None:
    post = "enqueue_config( 'training_4.0.0/closed_{}.yaml'.format(v['value']) )"
    assert rule_text.enqueued_config(post) == "training_4.0.0/closed_{}.yaml"
    assert rule_text.enqueued_config("enqueue_config('x.yaml')") is None
    budget = "s['compile_time_mins'] = 30 if v['value'] == 'open' else 20"
    assert rule_text.division_budget(budget) == (30, 20)
    assert rule_text.division_budget("s['compile_time_mins'] = 30") is None


def test_quoted_counts_read_the_rcp_checker() -> None:
    source = Path(rcp_checker.__file__).read_text()
    block = source[source.find('"training"'):source.find('"hpc"')]
    counts = rule_text.quoted_counts(block)
    assert counts["bert"] == 10 and counts["resnet"] == 5  # the checker's submission sizes
    assert rule_text.quoted_counts("{'a_b': 3, 'c d': 4, 'e':5}") == {"a_b": 3, "e": 5}


@pytest.mark.parametrize("path, ruleset", [
    ("/data/training_results_v4.0/NVIDIA/results/x/bert/result_0.txt", "4.0.0"),
    ("/data/v2.1/MosaicML/results/x/bert", "2.1.0"),
    ("/srv/nv4.0/bert/result_0.txt", None),  # a "v" inside a word is not a version
    ("/data/v9.9/bert", None),  # no such ruleset in mlperf_logging
    # a system folder named with another version, inside the v5.1 round (Krai's v5.1 llama2_70b_lora)
    ("/data/v5.1/Krai/results/Cray-XD670-H200-SXM5-141GB_n2_v5.0/llama2_70b_lora/result_0.txt", "5.1.0"),
    ("/data/training_results_v5.1/Krai/results/x_v5.0/llama2_70b_lora", "5.1.0"),
    ("/copied/Cray-XD670-H200-SXM5-141GB_n2_v5.0/llama2_70b_lora", "5.0.0"),  # no round folder: the one there is
])
def test_ruleset_from_path(path: str, ruleset: str | None) -> None:
    assert ruleset_from_path(path) == ruleset
