"""RCP (reference convergence points): is a benchmark folder's convergence acceptable, and by what factor
is its score normalised (what MLPerf's review writes into scaling.json)?

Offline (`folder_verdict`) the verdict is mlperf_logging's own RCP checker, called as its package
checker and result summarizer call it: `rcp_checker.check_directory(folder, "training", ruleset,
verbose=False, bert_train_samples=False, rcp_pass="pruned_rcps")` (their defaults), with
`set_scaling=False`, so nothing is written into the user's folder. It runs in a worker process with
a time budget (`bounded.py`), and only on files perfwatch parsed as valid mllog: a folder holding
another gets `n/a` naming that file. Groups that are not a `result_N.txt` folder (a perfwatch LOGDIR's repeats) are
handed to it as a temporary folder of `result_N.txt` symlinks.

Live (`project`) no anchor has this: from the runs that have finished so far, the checker's own
RCP record for the batch size (found, interpolated, or the smallest, as `check_directory` picks)
and its epoch counting (`read_submission_file`), the mean the folder is heading for is compared
with what the rule allows: "on track", "will be normalised ×1.012" or "will fail: mean … < …".

mlperf_logging's RCP module imports scipy (about a second here): it is imported only when a
verdict is actually needed (a closed-division folder whose ruleset has an RCP for its benchmark).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from perfwatch.core.layout import RCP_CACHE, user_cache_dir, write_json_atomic
from perfwatch.core.mlperf.rule_text import quoted_counts

USAGE = "training"
RCP_PASS = "pruned_rcps"
BERT_TRAIN_SAMPLES = False  # the summarizer's and the package checker's default


class RcpVerdict(msgspec.Struct, frozen=True):
    verdict: str  # "pass" | "fail" | "n/a"
    normalization: float
    mean_epochs: float | None  # the olympic mean of epochs (samples for bert/llama) to converge
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "normalization": self.normalization, "mean_epochs": self.mean_epochs,
                "message": self.message}


def _rcp_dir() -> Path | None:
    spec = importlib.util.find_spec("mlperf_logging")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "rcp_checker"


def rcp_file(benchmark: str | None, ruleset: str | None) -> Path | None:
    """mlperf_logging's RCP data for the benchmark in the ruleset, if it ships one (no import needed)."""
    if not benchmark or not ruleset or "/" in benchmark or benchmark.startswith("."):
        return None
    base = _rcp_dir()
    if base is None:
        return None
    path = base / f"{USAGE}_{ruleset}" / f"rcps_{benchmark}.json"
    return path if path.is_file() else None


def required_runs(benchmark: str) -> int | None:
    """How many runs a submission of `benchmark` holds (the RCP checker's `submission_runs`), read
    from its source so that this needs no import of the module (which imports scipy)."""
    source = (_rcp_dir() or Path("/nonexistent")) / "rcp_checker.py"
    return _submission_runs(str(source)).get(benchmark)


@functools.cache
def _submission_runs(source: str) -> dict[str, int]:
    try:
        text = Path(source).read_text()
    except OSError:
        return {}
    return quoted_counts(text[text.find('"training"'):text.find('"hpc"')])


def not_applicable(benchmark: str | None, ruleset: str | None, division: str | None) -> str | None:
    """Why no RCP verdict applies (None when one does)."""
    if not benchmark:
        return "no submission_benchmark in the logs"
    if not ruleset:
        return "no ruleset"
    if division == "open":
        return "open division: MLPerf checks RCPs only in the closed division"
    if benchmark == "minigo":
        return "minigo has no RCP check"
    if rcp_file(benchmark, ruleset) is None:
        return f"ruleset {ruleset} has no RCP for {benchmark}"
    if required_runs(benchmark) is None:  # the checker stops with KeyError; the summarizer then gives no RCP
        return f"mlperf_logging's RCP checker has no submission size for {benchmark} (no RCP verdict, as in the summarizer)"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The checker reports through the root logger; keep it off the user's terminal."""
    from perfwatch.core.mlperf.checker import captured_logs

    with captured_logs():
        yield


_TOKEN = ":::MLLOG"


@contextlib.contextmanager
def _as_results_folder(paths: Sequence[str], named: str | None = None) -> Iterator[str]:
    """A temporary folder of `result_N.txt` copies of `paths` holding only the lines the RCP checker reads
    (`_write_relevant`); `named`: copies that name that benchmark (`_write_named`). The checker never
    sees the user's folder, and reads a few hundred lines a file instead of every line."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="perfwatch-rcp-") as tmp:
        for i, p in enumerate(paths):
            dst = os.path.join(tmp, f"result_{i}.txt")
            if named is None:
                _write_relevant(p, dst)
            else:
                _write_named(p, dst, named)
        yield tmp


# every branch of the checker's `read_submission_file` needs one of these in a line carrying the token:
# a line with none of them changes nothing it computes (train_samples counts only with BERT_TRAIN_SAMPLES)
_RCP_NEEDLES = (b"global_batch_size", b"submission_benchmark", b"eval_error", b"eval_accuracy", b"run_stop",
                *((b"train_samples",) if BERT_TRAIN_SAMPLES else ()))


def _write_relevant(src_path: str, dst_path: str) -> None:
    """A copy of the log with only the lines the RCP checker's reader can use, in order: those that carry
    the token and one of `_RCP_NEEDLES` (each needle is searched for in the whole file, a C-speed scan,
    not each line tested in Python), less the evals a later eval overwrites (`_overwritten_evals`)."""
    with open(src_path, "rb") as fh:
        data = fh.read()
    token = _TOKEN.encode()
    spans: set[tuple[int, int]] = set()
    for needle in _RCP_NEEDLES:
        at = data.find(needle)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end + 1
            if data.find(token, start, end) >= 0:
                spans.add((start, end))
            at = data.find(needle, end)
    lines = [data[start:end] for start, end in sorted(spans)]
    dropped = _overwritten_evals(lines)
    with open(dst_path, "wb") as out:
        for i, line in enumerate(lines):
            if i not in dropped:
                out.write(line if line.endswith(b"\n") else line + b"\n")


# the checker's reader (`read_submission_file`) counts these benchmarks' convergence in eval samples
# (`samples_count`), every other in `epoch_num`; stable diffusion keeps every eval (tests/test_rcp.py
# compares this set with the reader's source)
READER_SAMPLES_COUNT = frozenset({"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                                  "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"})
_READER_TOKEN = _TOKEN + " "  # the reader's TOKEN
_EVAL_WORDS = ("eval_error", "eval_accuracy")
_OTHER_WORDS = ("global_batch_size", "submission_benchmark", "train_samples", "run_stop")


def _overwritten_evals(lines: Sequence[bytes]) -> set[int]:
    """Indices of eval lines whose only effect on the reader is overwritten: the reader keeps the last eval's
    epochs (or samples) seen before run_stop, so an eval followed by another eval with no run_stop between
    changes nothing, provided it holds the fields the reader takes from it (else it would raise there,
    and it is kept). Nothing is dropped where the reader works otherwise: stable diffusion (every eval
    counts), bert counted in train_samples, a submission_benchmark it cannot read."""
    if BERT_TRAIN_SAMPLES:
        return set()
    import json

    texts = []
    for line in lines:
        text = line.decode("latin-1")
        at = text.rfind(_READER_TOKEN)
        texts.append(text[at + len(_READER_TOKEN):].strip() if at >= 0 else "")
    benchmark: Any = None
    branch: list[Any] = []  # the reader's benchmark when it reaches each line
    for text in texts:
        if "submission_benchmark" in text:
            try:
                benchmark = json.loads(text)["value"]
            except (ValueError, KeyError, TypeError):
                return set()
            if benchmark == "stable_diffusion":
                return set()
        branch.append(benchmark)
    dropped: set[int] = set()
    overwritten = False
    for i in range(len(texts) - 1, -1, -1):
        text = texts[i]
        if "run_stop" in text:
            overwritten = False
        if not any(w in text for w in _EVAL_WORDS):
            continue
        if overwritten and not any(w in text for w in _OTHER_WORDS) and _reader_takes(text, branch[i]):
            dropped.add(i)
        overwritten = True
    return dropped


def _reader_takes(text: str, benchmark: Any) -> bool:
    """The reader can take its epochs (or samples) from this eval line without raising. Decoded with msgspec:
    what it decodes, the reader's json.loads decodes alike (json also takes NaN and the like: such a line is
    kept, never judged here)."""
    try:
        record = msgspec.json.decode(text)
        metadata = record["metadata"]
        if benchmark in READER_SAMPLES_COUNT:
            metadata["samples_count"]  # noqa: B018  (what the reader reads)
            record["value"]  # noqa: B018
        else:
            round(metadata["epoch_num"], 3)
    except Exception:
        return False
    return True


def _write_named(src_path: str, dst_path: str, benchmark: str) -> None:
    """A copy of the log that names `benchmark`: a `submission_benchmark` record saying it first, and the
    log's own `submission_benchmark` records saying it too; every other line as it is. Read and written as
    the checker reads (latin-1), streamed (a long log is never held whole)."""

    first = {"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", "key": "submission_benchmark",
             "value": benchmark, "metadata": {}}
    with open(src_path, encoding="latin-1") as src, open(dst_path, "w", encoding="latin-1") as dst:
        dst.write(f"{_TOKEN} {json.dumps(first)}\n")
        for line in src:
            at = line.find(_TOKEN)
            if at >= 0 and '"submission_benchmark"' in line:
                try:
                    record = json.loads(line[at + len(_TOKEN):])
                except ValueError:
                    record = None
                if isinstance(record, dict) and record.get("key") == "submission_benchmark":
                    record["value"] = benchmark
                    line = f"{line[:at]}{_TOKEN} {json.dumps(record)}\n"
            dst.write(line)


@contextlib.contextmanager
def _named_as(path: str, benchmark: str) -> Iterator[str]:
    """A temporary copy of one log that names `benchmark` (`_write_named`)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="perfwatch-rcp-") as tmp:
        copy = os.path.join(tmp, "result_0.txt")
        _write_named(path, copy, benchmark)
        yield copy


def _trimmed_mean(epochs: Sequence[float], benchmark: str) -> float | None:
    """The checker's olympic mean of epochs (drops 1 each end, 4 for unet3d)."""
    drop = 4 if benchmark == "unet3d" else 1
    kept = sorted(epochs)[drop : len(epochs) - drop]
    return sum(kept) / len(kept) if kept else None


def folder_verdict(paths: Sequence[str], benchmark: str | None, ruleset: str | None,
                   division: str | None, *, cache: Path | None = None, as_benchmark: bool = False,
                   refused: Sequence[str] | None = None) -> RcpVerdict:
    """mlperf_logging's RCP verdict on one benchmark folder's run logs (module docstring).

    Judged only on a complete folder (as many runs as a submission holds: a partial one is what
    `project` is for). The checker reads every line with a regex per line (a minute for a 200k-line
    log) and imports scipy: its verdict is kept in the user's cache, keyed by the files' paths,
    sizes and modification times, the ruleset and the mlperf_logging version.
    `as_benchmark`: the logs stand in for `benchmark` (a campaign's `mlperf:`): the checker reads copies
    of them that name it (as `project` does).
    `refused`: why some of `paths` are not valid mllog (`bounded.unreadable`), when the caller parsed them
    already; else each file is parsed here first. Such a folder is not handed to the checker.
    """
    why = not_applicable(benchmark, ruleset, division)
    if why is not None or not paths:
        return RcpVerdict("n/a", 1.0, None, why or "no runs")
    assert benchmark is not None and ruleset is not None
    need = required_runs(benchmark)
    if need is not None and len(paths) < need:
        return RcpVerdict("n/a", 1.0, None, f"{len(paths)} of the {need} runs a {benchmark} submission holds: "
                          "the RCP check judges a complete folder (the live view projects it)")
    key = _cache_key(paths, benchmark, ruleset, as_benchmark)
    hit = _cached(key, cache)
    if hit is not None:
        return hit
    from perfwatch.core.mlperf import bounded

    if refused is None:
        refused = [why for why in map(bounded.unreadable, paths) if why is not None]
    if refused:
        more = f" (and {len(refused) - 1} more file(s))" if len(refused) > 1 else ""
        return RcpVerdict("n/a", 1.0, None, f"not checked: {refused[0]}{more}")
    try:
        verdict = RcpVerdict(**bounded.rcp_verdict(paths, benchmark, ruleset, as_benchmark))
    except bounded.OfficialTimeout as exc:
        return RcpVerdict("n/a", 1.0, None, f"the RCP checker was stopped: {exc}")
    except bounded.OfficialFailure as exc:
        return RcpVerdict("fail", 1.0, None, f"the RCP checker failed: {exc}")
    if key is not None and not verdict.message.startswith("the RCP checker failed"):
        _store(key, verdict, cache)
    return verdict


def run_checker_here(paths: Sequence[str], benchmark: str, ruleset: str, as_benchmark: bool = False) -> RcpVerdict:
    """mlperf_logging's RCP checker in this process (the bounded worker's side: `folder_verdict` calls it there)."""
    from mlperf_logging.rcp_checker import rcp_checker as rc

    from perfwatch.core.mlperf.checker import captured_logs

    with captured_logs() as lines, _as_results_folder(paths, benchmark if as_benchmark else None) as folder:
        try:
            passed, msg, norm = _check_directory(rc, folder, ruleset)
        except Exception as exc:  # the checker raises on logs it cannot read (no eval metadata, ...)
            return RcpVerdict("fail", 1.0, None, f"the RCP checker failed: {type(exc).__name__}: {exc}")
    # the mean the checker compared (it logs it; a second pass over the files would double the time)
    mean_logged = re.compile(_MEAN_LOGGED)
    means = [float(m.group(1)) for ln in lines if (m := mean_logged.search(ln))]
    mean = means[-1] if means else None
    detail = msg
    if mean is not None:
        detail += f"; mean {mean:.6g} {_unit(benchmark)} to converge"
    if passed and float(norm) > 1.0:
        detail += f"; score normalised ×{float(norm):.4f}"
    return RcpVerdict("pass" if passed else "fail", float(norm), mean, detail)


_CHECKERS: dict[tuple[str, str | None], Any] = {}


def _checker(rc: Any, ruleset: str, benchmark: str | None) -> Any:
    """One `RCP_Checker` per (ruleset, benchmark) for the worker's life: building one loads the RCP data and
    computes its statistics and pruning, which `check_directory` does again for every folder."""
    key = (ruleset, benchmark)
    if key not in _CHECKERS:
        _CHECKERS[key] = rc.RCP_Checker(USAGE, ruleset, benchmark, False, None)
    return _CHECKERS[key]


def _check_directory(rc: Any, folder: str, ruleset: str) -> tuple[bool, str, float]:
    """`rc.check_directory(folder, "training", ruleset, False, BERT_TRAIN_SAMPLES, rcp_pass=RCP_PASS,
    rcp_bypass=False, set_scaling=False)`, step for step with the checker's own functions, but for the
    `RCP_Checker` it builds anew per folder: a kept one (`_checker`)."""
    import glob

    files = glob.glob(f"{folder.rstrip('/')}/result_*.txt")
    bs, subm_epochs, benchmark = rc.get_submission_epochs(files, ruleset, BERT_TRAIN_SAMPLES)
    norm = 1.0
    checker = _checker(rc, ruleset, benchmark)
    if bs == -1:
        return False, "Could not detect global_batch_size", norm
    if subm_epochs is None:
        return False, "Insufficient convergence", norm
    record = checker._find_rcp(bs, RCP_PASS)
    if record is not None:
        ok, norm = checker._eval_submission_record(record, subm_epochs, "")
        return ok, "RCP found", norm
    low = checker._find_top_min_rcp(bs, RCP_PASS)
    high = checker._find_bottom_max_rcp(bs, RCP_PASS)
    if low is not None and high is not None:
        _name, interp = checker._create_interp_rcp(bs, low, high)
        ok, norm = checker._eval_submission_record(interp, subm_epochs, "")
        return ok, "RCP Interpolation", norm
    if low is not None:
        return False, f"Missing RCP, please submit RCP with BS = {bs}", norm
    if high is not None:
        ok, norm = checker._eval_submission_record(checker._find_min_rcp(RCP_PASS), subm_epochs, "")
        return ok, ("RCP not found but slower convergence on smaller batch size" if ok
                    else f"Missing RCP, please submit RCP with BS = {bs}"), norm
    return False, "Cannot find any RCPs", norm


_MEAN_LOGGED = r"Submission mean epochs: ([0-9.eE+-]+)"  # compiled only when the checker runs
_CACHE_ENTRIES = 512


def _cache_file(cache: Path | None) -> Path:
    return (cache or user_cache_dir()) / RCP_CACHE


def _cache_key(paths: Sequence[str], benchmark: str, ruleset: str, as_benchmark: bool = False) -> str | None:
    """The logs and what judges them: the installed checker's source and the benchmark's RCP data, by file
    identity (device and inode: any spelling of a path, symlinks too, without resolving each component),
    size and mtime (an upgrade of mlperf-logging rewrites both).
    The fingerprint itself is the key: no digest to collide."""
    checker = (_rcp_dir() or Path("/nonexistent")) / "rcp_checker.py"
    try:
        parts = [ruleset, benchmark, str(BERT_TRAIN_SAMPLES), *(["as benchmark"] if as_benchmark else [])]
        for p in (str(checker), str(rcp_file(benchmark, ruleset) or checker), *sorted(paths)):
            st = os.stat(p)
            parts.append(f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    except (OSError, ValueError, ImportError):
        return None
    return "|".join(parts)


def _cached(key: str | None, cache: Path | None) -> RcpVerdict | None:
    if key is None:
        return None
    try:
        entry = msgspec.json.decode(_cache_file(cache).read_bytes()).get(key)
        return RcpVerdict(str(entry["verdict"]), float(entry["normalization"]),
                          None if entry["mean_epochs"] is None else float(entry["mean_epochs"]), str(entry["message"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _store(key: str, verdict: RcpVerdict, cache: Path | None) -> None:

    path = _cache_file(cache)
    try:
        table = json.loads(path.read_text())
        if not isinstance(table, dict):
            table = {}
    except (OSError, ValueError):
        table = {}
    table[key] = {**verdict.to_json(), "at": time.time()}
    if len(table) > _CACHE_ENTRIES:
        for old in sorted(table, key=lambda k: table[k].get("at", 0) if isinstance(table[k], dict) else 0)[
                : len(table) - _CACHE_ENTRIES]:
            del table[old]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, table, indent=None)
    except OSError:
        pass  # an unwritable cache costs a re-check next time


# benchmarks whose convergence the checker counts in samples (read_submission_file: bert with
# bert_train_samples, the LLM/diffusion ones from eval metadata samples_count)
_IN_SAMPLES = frozenset({"bert", "llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                         "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4", "stable_diffusion"})


def _unit(benchmark: str) -> str:
    return "samples" if benchmark in _IN_SAMPLES else "epochs"


@functools.lru_cache(maxsize=32)
def convergence_prior(benchmark: str, ruleset: str, batch: int) -> tuple[float, float, str] | None:
    """(RCP mean, RCP stdev, unit) of the record the checker would judge batch size `batch` against: how long
    a reference run of this benchmark takes to converge; None without RCP data for it."""
    try:
        from mlperf_logging.rcp_checker import rcp_checker as rc

        with _quiet():
            checker = rc.RCP_Checker(USAGE, ruleset, benchmark, False)
            record, _how = _record(checker, batch)
    except Exception:  # no RCP data, or a checker that cannot read it
        return None
    if record is None:
        return None
    return float(record["RCP Mean"]), float(record["RCP Stdev"]), _unit(benchmark)


# ---- live projection ------------------------------------------------------------------------------
class Projection(msgspec.Struct, frozen=True):
    state: str  # "on track" | "normalised" | "fail" | "n/a" | "waiting"
    text: str
    converged: int
    required: int
    mean_epochs: float | None
    allowed_min: float | None
    normalization: float | None

    @property
    def remaining(self) -> int:
        return max(self.required - self.converged, 0)


def _record(checker: Any, bs: int) -> tuple[dict[str, Any] | None, str]:
    """The RCP record `check_directory` would judge against for batch size `bs`, with its name."""
    record = checker._find_rcp(bs, RCP_PASS)
    if record is not None:
        return record, "RCP found"
    low = checker._find_top_min_rcp(bs, RCP_PASS)
    high = checker._find_bottom_max_rcp(bs, RCP_PASS)
    if low is not None and high is not None:
        return checker._create_interp_rcp(bs, low, high)[1], "RCP Interpolation"
    if low is None and high is not None:
        return checker._find_min_rcp(RCP_PASS), "RCP of the smallest batch size"
    return None, f"Missing RCP, please submit RCP with BS = {bs}" if low is not None else "Cannot find any RCPs"


def project(finished: Sequence[str], benchmark: str | None, ruleset: str | None, division: str | None = "closed",
            required: int | None = None, *, as_benchmark: bool = False) -> Projection:
    """Where the RCP verdict is heading, from the run logs that have finished so far (any order).

    `as_benchmark`: the logs are a campaign's stand-ins for `benchmark` (its `mlperf:` key) and name
    another benchmark or none; the checker reads each as a copy whose `submission_benchmark` says
    `benchmark` (it counts bert in samples, the LLM benchmarks in eval samples, by that name)."""
    why = not_applicable(benchmark, ruleset, division)
    if why is not None:
        return Projection("n/a", f"RCP: n/a ({why})", 0, required or 0, None, None, None)
    assert benchmark is not None and ruleset is not None
    from mlperf_logging.rcp_checker import rcp_checker as rc

    need = required or required_runs(benchmark) or 0
    epochs: list[float] = []
    failed = 0
    bs = -1
    with _quiet(), contextlib.ExitStack() as stack:
        for path in finished:
            if as_benchmark:
                path = stack.enter_context(_named_as(path, benchmark))
            not_converged, subm_epochs, run_bs, _ = rc.read_submission_file(path, ruleset, BERT_TRAIN_SAMPLES)
            if not_converged:
                failed += 1
                continue
            epochs.append(float(subm_epochs))
            bs = run_bs if bs == -1 else bs
        if not epochs:
            return Projection("waiting", f"RCP: waiting for a converged run (0 of {need})", 0, need, None, None, None)
        checker = rc.RCP_Checker(USAGE, ruleset, benchmark, False)
        record, how = _record(checker, bs)
    n = len(epochs)
    left = f"{n} of {need} runs converged, {max(need - n - failed, 0)} to go"
    drop = 4 if benchmark == "unet3d" else 1
    if failed > drop:
        return Projection("fail", f"RCP: will fail: {failed} runs did not converge ({left})", n, need, None, None,
                          None)
    mean = (_trimmed_mean(epochs, benchmark) if n > 2 * drop else None) or sum(epochs) / n
    if record is None:
        return Projection("fail", f"RCP: will fail: {how} ({left})", n, need, mean, None, None)
    allowed = float(record["RCP Mean"]) / float(record["Max Speedup"])
    norm = float(checker._find_norm_factor(record, mean))
    unit = _unit(benchmark)
    if mean < allowed:
        return Projection("fail", f"RCP: will fail: mean {mean:.4g} {unit} < {allowed:.4g} allowed ({how}; {left})",
                          n, need, mean, allowed, norm)
    if norm > 1.0 and not math.isclose(norm, 1.0):
        return Projection("normalised", f"RCP: will be normalised ×{norm:.3f} (mean {mean:.4g} {unit} < RCP mean "
                          f"{float(record['RCP Mean']):.4g}; {left})", n, need, mean, allowed, norm)
    return Projection("on track", f"RCP: on track (mean {mean:.4g} {unit} ≥ RCP mean "
                      f"{float(record['RCP Mean']):.4g}; {left})", n, need, mean, allowed, norm)
