"""The checker's rule YAMLs, read once and then from perfwatch's JSON copy in the user's cache.

Expected records come from PyYAML itself (BaseLoader, the checker's loader), never from perfwatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from mlperf_logging.compliance_checker import mlp_compliance

RULES = Path(mlp_compliance.__file__).parent


def _records_in_fresh_process(path: Path, cache: Path, *, block_yaml: bool) -> object:
    """`rule_files.records` in a new interpreter (its in-process memo empty), PyYAML optionally unimportable."""
    code = ("import sys, json\n"
            + ("sys.modules['yaml'] = None\n" if block_yaml else "")
            + "from perfwatch.core.mlperf import rule_files\n"
            + f"print(json.dumps(rule_files.records({str(path)!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_rule_file_records_equal_pyyaml_and_come_back_from_the_cache_without_pyyaml(tmp_path: Path) -> None:
    official = RULES / "training_4.0.0" / "closed_common.yaml"
    with open(official) as fh:
        expected = yaml.load(fh, Loader=yaml.BaseLoader)
    cache = tmp_path / "cache"
    assert _records_in_fresh_process(official, cache, block_yaml=False) == expected
    assert list((cache / "perfwatch" / "mlperf-rules").glob("*.json")), "the parsed rules were not kept"
    # a second process reads the JSON copy: PyYAML is not even importable there
    assert _records_in_fresh_process(official, cache, block_yaml=True) == expected


def test_an_edited_rule_file_is_read_again(tmp_path: Path) -> None:
    rule = tmp_path / "rules" / "closed_x.yaml"
    rule.parent.mkdir()
    rule.write_text("- KEY:\n    NAME: eval_accuracy\n    ATLEAST_ONE_CHECK: \"v['value'] >= 0.5\"\n")
    cache = tmp_path / "cache"
    first = _records_in_fresh_process(rule, cache, block_yaml=False)
    assert first == [{"KEY": {"NAME": "eval_accuracy", "ATLEAST_ONE_CHECK": "v['value'] >= 0.5"}}]
    rule.write_text("- KEY:\n    NAME: eval_accuracy\n    ATLEAST_ONE_CHECK: \"v['value'] >= 0.75\"\n")
    assert _records_in_fresh_process(rule, cache, block_yaml=False) == [
        {"KEY": {"NAME": "eval_accuracy", "ATLEAST_ONE_CHECK": "v['value'] >= 0.75"}}]


def test_a_broken_or_missing_rule_file_is_none_and_a_bad_cache_entry_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- KEY: [unclosed\n")
    cache = tmp_path / "cache"
    assert _records_in_fresh_process(bad, cache, block_yaml=False) is None
    assert _records_in_fresh_process(tmp_path / "absent.yaml", cache, block_yaml=False) is None
    good = tmp_path / "good.yaml"
    good.write_text("- KEY:\n    NAME: run_start\n")
    assert _records_in_fresh_process(good, cache, block_yaml=False) == [{"KEY": {"NAME": "run_start"}}]
    for copy in (cache / "perfwatch" / "mlperf-rules").glob("*good*.json"):
        copy.write_text("{not json")  # a garbled cache file: parsed again, never trusted
    assert _records_in_fresh_process(good, cache, block_yaml=False) == [{"KEY": {"NAME": "run_start"}}]
