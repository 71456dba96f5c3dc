"""Compliance checks that can be judged while a run is going, fed event by event.

`perfwatch check` runs MLPerf's official checker on a finished file; this module
warns *during* a run about what will make that checker fail, so a user can stop
a doomed run early. It reads the same rule YAMLs the official checker reads
(common -> division_common -> division_benchmark, following the rule files'
own `enqueue_config(...)` the way the checker does) and judges:

- the order rules of `common.yaml` (init_start before init_stop, exactly one
  run_start after init_stop, run_stop after run_start with a `status`), and a
  second init_start after init_stop/run_start: a log file reused by a relaunch;
- the init-time budget (`compile_time_mins`, 30 min closed / 240 open in 4.0,
  read from the ruleset's YAML);
- every CHECK/FIRST_CHECK/ATLEAST_ONE_CHECK expression, the ones reading the checker's
  cross-line state `s` or the record `ll` included: each rule file keeps its own `s`, its
  `BEGIN` code runs once when it is loaded, its `PRE`/`POST` code runs around a record's
  CHECKs (as the checker: on every record, on the first only for `submission_*` keys) and its
  `END` block's CHECKs at the end of the run;
- records a `BEGIN` block builds from the log (`loglines`): stable diffusion's
  `aggregated_eval_accuracy`, one per evaluation step from its FID and CLIP `eval_accuracy`
  records. That code runs once the run is complete (run_stop or `finish()`) over the records whose
  key it names; the records it adds are judged by the rules like any other;
- at the end of the run (run_stop seen or `finish()`), the REQ occurrence rules
  (EXACTLY_ONE duplicated with different values is an error, with equal values a
  warning, as in the checker) and ATLEAST_ONE_CHECK (the quality target).

Not judged live (documented in docs/outputs.md): the official CHECKs of the order keys in
`common.yaml` (the order rules above judge them, with messages that say what went wrong), and
rule files enqueued by a record that comes after run_start. Where two rule files both have a
rule for one key, the later one judges it (the checker drops the earlier file's messages for
that key); the earlier file's `POST` for it does not run.

Cost: the init phase (a few dozen records) is buffered and judged in one go at
run_start, once the benchmark and division are known; after that, a dict
lookup per record and nothing for keys no rule mentions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from pathlib import Path
from types import CodeType
from typing import Any

import msgspec

from perfwatch.core.ingest.mllog import Event
from perfwatch.core.mlperf import rule_files
from perfwatch.core.mlperf.rule_text import division_budget, enqueued_config
from perfwatch.core.mlperf.rulesets import config_for, log_date_ms, ruleset_for
from perfwatch.core.mlperf.targets import RULES_DIR, latest_ruleset

MAX_BUFFERED = 50_000  # records before run_start judged at once; past this we judge with what we know
# a rule text naming the checker's own state (`s[...]`, `ll`) or actions is not judged record by record
_CHECKER_NAMES = frozenset({"s", "ll", "enqueue_config"})
ORDER_KEYS = ("init_start", "init_stop", "run_start", "run_stop", "block_start")
# records whose value names the next rule file (POST: enqueue_config('...{}...'.format(v['value'])))
ENQUEUE_KEYS = frozenset({"submission_division", "submission_benchmark", "opt_name"})
_SAFE_RULE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+ -")
Check = tuple[str, CodeType, str | None]  # the rule's text, compiled; the metadata key it only asks about
COMMON_FILE = "common.yaml"  # the ruleset's first file: its order keys are judged by `_order`


def unsafe_rule_value(value: Any) -> bool:
    """A value that would make the checker load (and run) a rule file from outside its package."""
    return isinstance(value, str) and not (
        0 < len(value) <= 128 and _SAFE_RULE_CHARS.issuperset(value) and ".." not in value)


class Finding(msgspec.Struct, frozen=True):
    """One live verdict: `severity` "error" fails the official checker, "warning" does not."""

    severity: str
    rule: str
    message: str
    time_ms: float | None = None


class KeyRule(msgspec.Struct):
    """What one rule file says about one key, compiled once."""

    file: str  # the rule file's path: whose state `s` its code reads and writes
    name: str
    req: str | None
    checks: tuple[Check, ...]
    first_checks: tuple[Check, ...]
    atleast_one: Check | None
    enqueue: str | None  # rule file name pattern to load with this key's value
    budget: tuple[int, int] | None  # (open, closed) init minutes set by this key (submission_division)
    uses_ll: bool = False  # some code of this rule reads the record as `ll` (else only `v` is built)
    pre: CodeType | None = None  # code run before the CHECKs of a record (the checker's PRE)
    post: CodeType | None = None  # code run after them (POST): updates the file's state `s`
    post_text: str = ""


class RuleFile(msgspec.Struct):
    keys: dict[str, KeyRule] = msgspec.field(default_factory=dict)
    missing: bool = False
    begin: CodeType | None = None  # BEGIN code: sets up `s`, or builds records from `loglines`
    begin_keys: frozenset[str] = frozenset()  # the record keys BEGIN code that reads `loglines` names
    end_pre: CodeType | None = None  # END block: code, then CHECKs on the final state
    end_checks: tuple[Check, ...] = ()


@dataclasses.dataclass
class LogLine:
    """A record as mlperf_logging's parser hands it to rule code (`ll`, `loglines`): these five fields."""

    full_string: str
    timestamp: float
    key: str
    value: dict[str, Any]
    lineno: int


def _logline(ev: Event) -> LogLine:
    return LogLine("", ev.time_ms, ev.key, _v(ev), -1)


def _event(line: LogLine) -> Event | None:
    """A record rule code built, as an Event the rules judge (None when it is not shaped like one)."""
    value = line.value if isinstance(line.value, dict) else {}
    md = value.get("metadata")
    try:
        return Event(time_ms=float(line.timestamp), key=str(line.key), value=value.get("value"),
                     metadata=md if isinstance(md, dict) else {})  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _metadata_member(text: str) -> str | None:
    """`name` for a check that reads "'name' in v['metadata']", the commonest per-record CHECK (every
    epoch and eval record): `_eval` answers it as eval would, without eval."""
    quoted, sep, rest = text.partition(" in ")
    name = quoted[1:-1]
    if sep and rest.strip() == "v['metadata']" and quoted[:1] == quoted[-1:] == "'" and name.isidentifier():
        return name
    return None


def _compile_list(raw: Any, *, stateful: bool = True) -> tuple[Check, ...]:
    """A rule's CHECK expressions compiled; `stateful=False` leaves out those reading `s`, `ll` or actions."""
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    out = []
    for text in items:
        text = str(text).strip()
        if not text:
            continue
        try:
            code = compile(text, "<mlperf rule>", "eval")
        except SyntaxError:
            continue
        if not stateful and not _CHECKER_NAMES.isdisjoint(_names(code)):
            continue
        out.append((text, code, _metadata_member(text)))
    return tuple(out)


def _compile_code(raw: Any) -> CodeType | None:
    """A PRE/POST/BEGIN/END code block, compiled for exec (None when absent or not Python)."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        return compile(raw.strip(), "<mlperf rule>", "exec")
    except SyntaxError:
        return None


def _string_constants(code: CodeType) -> set[str]:
    """Every string literal in the code, its nested blocks' included (the keys BEGIN code selects)."""
    out = {c for c in code.co_consts if isinstance(c, str)}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            out |= _string_constants(const)
    return out


def _names(code: CodeType) -> set[str]:
    """Every global and attribute name an expression's code reads, its comprehensions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names(const)
    return names


@functools.cache
def load_rule_file(path: str) -> RuleFile:
    """Parse one checker YAML (BaseLoader, as the checker does) into compiled key rules."""
    records = rule_files.records(path)
    if records is None:
        return RuleFile(missing=True)
    rf = RuleFile()
    common = Path(path).name == COMMON_FILE
    for record in records:
        if not isinstance(record, dict):
            continue
        begin, end = record.get("BEGIN"), record.get("END")
        if isinstance(begin, dict):
            rf.begin = _compile_code(begin.get("CODE"))
            if rf.begin is not None and "loglines" in _names(rf.begin):
                rf.begin_keys = frozenset(_string_constants(rf.begin))
        if isinstance(end, dict):
            rf.end_pre = _compile_code(end.get("PRE"))
            rf.end_checks = _compile_list(end.get("CHECK"))
        if not isinstance(record.get("KEY"), dict):
            continue
        rec = record["KEY"]
        name = rec.get("NAME")
        if not isinstance(name, str):
            continue
        post = rec.get("POST") if isinstance(rec.get("POST"), str) else ""
        enqueue = enqueued_config(post)
        alo = _compile_list(rec.get("ATLEAST_ONE_CHECK"))
        req = rec.get("REQ")
        stateful = not (common and name in ORDER_KEYS)  # `_order` judges these
        checks = _compile_list(rec.get("CHECK"), stateful=stateful)
        first_checks = _compile_list(rec.get("FIRST_CHECK"), stateful=stateful)
        # the order keys' PRE/POST feed only the state their skipped CHECKs read: `_order` keeps its own
        pre = _compile_code(rec.get("PRE")) if stateful else None
        post_code = _compile_code(post) if stateful else None
        codes = [c for _, c, _ in (*checks, *first_checks, *alo)] + [c for c in (pre, post_code) if c is not None]
        rf.keys[name] = KeyRule(
            file=path,
            name=name,
            req=req.strip() if isinstance(req, str) else None,
            checks=checks,
            first_checks=first_checks,
            atleast_one=alo[0] if alo else None,
            enqueue=enqueue,
            budget=division_budget(post),
            uses_ll=any("ll" in _names(c) for c in codes),
            pre=pre,
            post=post_code,  # its enqueue_config does nothing here: `_flush` loads rule files
            post_text=post.strip(),
        )
    return rf


@functools.cache
def rule_path(config: str) -> str:
    """Resolve a config name the way the checker does (relative to its package; absolute stays).
    Asked for each rule file of each run's chain: remembered."""
    return str(Path(RULES_DIR) / config)


def init_budget_minutes(ruleset: str, division: str) -> int | None:
    """The init-time budget the ruleset's common.yaml gives a division (None if it sets none)."""
    rule = load_rule_file(rule_path(f"training_{ruleset}/common.yaml")).keys.get("submission_division")
    if rule is None or rule.budget is None:
        return None
    return rule.budget[0] if division == "open" else rule.budget[1]


def _v(ev: Event) -> dict[str, Any]:
    return {"value": ev.value, "metadata": ev.md}


_EVAL_GLOBALS = {"math": math, "is_integer": lambda x: abs(round(x) - x) < 0.00001}


def _ignore_enqueue(config: Any) -> None:
    """`enqueue_config` as rule code sees it here: the live checker loads rule files itself (`_flush`)."""


def new_state() -> dict[str, Any]:
    """A rule file's globals, as the checker gives its code: its own `s`, `math`, `is_integer`, `enqueue_config`."""
    return {**_EVAL_GLOBALS, "s": {}, "enqueue_config": _ignore_enqueue}


class LiveChecker:
    """Incremental compliance findings for one run log; `apply` on one thread."""

    def __init__(self, ruleset: str | None = None, config: str | None = None) -> None:
        """`ruleset`/`config` None: chosen at run_start from the log, as `perfwatch check` chooses them."""
        self._requested = (ruleset, config)
        self.version = 0
        self.reset()

    def reset(self) -> None:
        """The log was truncated or replaced: start over."""
        self.ruleset = self._requested[0] or latest_ruleset()
        self.config = self._requested[1]
        self._buffer: list[Event] | None = []
        self._rules: dict[str, KeyRule] = {}
        self._loaded: list[str] = []
        self._alternatives: list[tuple[str, ...]] = []
        self._counts: dict[str, int] = {}
        self._first: dict[str, Any] = {}
        self._differs: set[str] = set()
        self._first_checked: set[str] = set()
        self._alo_hits: set[str] = set()
        self._found: list[Finding] = []
        self._seen: set[tuple[str, str]] = set()
        self._bad_lines = 0
        self._finished = False
        self._state = {"init_started": False, "init_stopped": False, "run_started": False, "run_stopped": False}
        self._first_init: float | None = None
        self._budget_min = 0  # as the checker: 0 until submission_division sets it
        self._states: dict[str, dict[str, Any]] = {}  # rule file path -> its globals (`s`, ...)
        self._begin_keys: frozenset[str] = frozenset()  # records BEGIN code reads: kept until the end
        self._kept: list[Event] = []
        self._builders: list[tuple[str, CodeType]] = []  # (rule file, BEGIN code reading `loglines`)
        self._built = False
        self._cache: tuple[Finding, ...] | None = None
        self.version += 1

    # ---- ingest --------------------------------------------------------------------------------------------
    def apply(self, events: Iterable[Event]) -> None:
        if self._buffer is None:
            self._judge_all(events)
            return
        buffer = self._buffer
        it = iter(events)
        for ev in it:
            buffer.append(ev)
            if ev.key == "run_start" or len(buffer) >= MAX_BUFFERED:
                self._flush()
                self._judge_all(it)  # the rest of this batch
                return

    def _judge_all(self, events: Iterable[Event]) -> None:
        get = self._rules.get  # the hot path: one dict lookup for a key no rule mentions
        judge = self._judge
        keep = self._begin_keys
        for ev in events:
            if keep and ev.key in keep:
                self._kept.append(ev)
            rule = get(ev.key)
            if rule is not None:
                judge(ev, rule)

    def _flush(self) -> None:
        """Load the rule chain the buffered init records select, then judge them in order."""
        buffer = self._buffer or []
        self._buffer = None
        firsts: dict[str, Any] = {}
        for ev in buffer:
            firsts.setdefault(ev.key, ev.value)
        if self.config is None:
            bench = firsts.get("submission_benchmark")
            bench = bench if isinstance(bench, str) else None
            first_ms = log_date_ms(ev.time_ms for ev in buffer)
            self.ruleset = ruleset_for(None, bench, self._requested[0], first_ms)
            self.config = config_for(self.ruleset, bench)
        self._load(self.config)
        progress = True
        while progress:  # rule files enqueue others from a key's value (division, benchmark, optimizer)
            progress = False
            for rule in list(self._rules.values()):
                if rule.enqueue and rule.name in firsts:
                    value = firsts[rule.name]
                    if unsafe_rule_value(value):
                        self._add("error", "config", f"{rule.name}={value!r} names no rule file; perfwatch "
                                  "will not load rules from such a path", None)
                        continue
                    progress |= self._load(rule.enqueue.format(value))
        self._judge_all(buffer)
        self.version += 1

    def _load(self, config: str) -> bool:
        if config in self._loaded:
            return False
        self._loaded.append(config)
        path = rule_path(config)
        rf = load_rule_file(path)
        if rf.missing:
            self._add("error", "config", f"Could not find config file: {config}", None)
            return True
        state = self._states[path] = new_state()
        if rf.begin is not None and rf.begin_keys:
            self._builders.append((path, rf.begin))  # runs over the log's records once it is complete
            self._begin_keys = self._begin_keys | rf.begin_keys
        elif rf.begin is not None:
            self._exec(rf.begin, state, None, "BEGIN", None)
        self._rules.update(rf.keys)  # a later file overrides an earlier one's rules for a key, as in the checker
        for rule in rf.keys.values():
            if rule.req and rule.req.startswith("AT_LEAST_ONE_OR("):
                alts = tuple(sorted({rule.name, *(a.strip() for a in rule.req[16:-1].split(","))}))
                if alts not in self._alternatives:
                    self._alternatives.append(alts)
        return True

    def note_bad_lines(self, total: int) -> None:
        """The parser's count of lines that carry `:::MLLOG` but do not decode."""
        if total != self._bad_lines:
            self._bad_lines = total
            self._cache = None
            self.version += 1

    def finish(self) -> None:
        """The log is complete (the run's process ended): judge end-of-run rules even without run_stop."""
        if self._buffer is not None:
            self._flush()
        self._build_records()
        if not self._finished:
            self._finished = True
            self._cache = None
            self.version += 1

    # ---- rules ---------------------------------------------------------------------------------------------
    def _add(self, severity: str, rule: str, message: str, t: float | None) -> None:
        if (rule, message) in self._seen:
            return
        self._seen.add((rule, message))
        self._found.append(Finding(severity, rule, message, t))
        self._cache = None
        self.version += 1

    def _exec(self, code: CodeType, state: dict[str, Any], ev: Event | None, what: str,
              local: dict[str, Any] | None) -> None:
        """Run a rule file's PRE/POST/BEGIN/END code in its state, as the checker does; a failure is an error."""
        if local is None and ev is not None:
            local = self._locals(ev)
        try:
            exec(code, state, local if local is not None else {})
        except Exception as exc:
            key = ev.key if ev is not None else what
            self._add("error", f"code:{key}", f"Failed executing {what} code for '{key}' "
                      f"({type(exc).__name__}: {exc})", ev.time_ms if ev is not None else None)

    @staticmethod
    def _locals(ev: Event, with_ll: bool = True) -> dict[str, Any]:
        """What rule code sees: `v` (value and metadata) and, where it reads it, the record `ll`."""
        if not with_ll:
            return {"v": _v(ev)}
        line = _logline(ev)
        return {"ll": line, "v": line.value}

    def _eval(self, ev: Event, checks: tuple[Check, ...], state: dict[str, Any] | None = None,
              local: dict[str, Any] | None = None, with_ll: bool = True) -> dict[str, Any] | None:
        for text, code, member in checks:
            if member is not None:  # "'epoch_num' in v['metadata']": what eval would answer, without it
                md = ev.md
                ok = md is not None and member in md
            else:
                if local is None:
                    local = self._locals(ev, with_ll)
                try:
                    ok = eval(code, state if state is not None else _EVAL_GLOBALS, local)
                except Exception:
                    ok = False
            if not ok:
                self._add("error", f"check:{ev.key}", f"CHECK for '{ev.key}' failed: {text}", ev.time_ms)
        return local

    def _judge(self, ev: Event, rule: KeyRule) -> None:
        key = ev.key
        n = self._counts[key] = self._counts.get(key, 0) + 1
        self._cache = None
        if n == 1:
            self._first[key] = ev.value
        elif key not in self._differs and ev.value != self._first.get(key):
            self._differs.add(key)
        if key in ORDER_KEYS:
            self._order(ev)
        if key == "submission_division" and n == 1 and rule.budget is not None:
            self._budget_min = rule.budget[0] if ev.value == "open" else rule.budget[1]
        state = self._states.get(rule.file)
        local = None
        if not (n > 1 and key.startswith("submission_")):  # the checker runs these on the first record only
            if rule.pre is not None and state is not None:
                local = self._locals(ev, rule.uses_ll)
                self._exec(rule.pre, state, ev, "PRE", local)
            if rule.checks:
                local = self._eval(ev, rule.checks, state, local, rule.uses_ll)
            if rule.post is not None and state is not None:
                self._exec(rule.post, state, ev, "POST", local if local is not None else self._locals(ev, rule.uses_ll))
        if rule.first_checks and key not in self._first_checked:
            self._first_checked.add(key)
            self._eval(ev, rule.first_checks, state, local, rule.uses_ll)
        if key == "run_stop":
            self._build_records()
        if rule.atleast_one is not None and key not in self._alo_hits:
            try:
                hit = eval(rule.atleast_one[1], state if state is not None else _EVAL_GLOBALS,
                           local if local is not None else self._locals(ev, rule.uses_ll))
            except Exception:
                hit = False
                self._add("error", f"target:{key}", f"the official checker cannot evaluate {key}={ev.value!r}",
                          ev.time_ms)
            if hit:
                self._alo_hits.add(key)

    def _build_records(self) -> None:
        """Once, when the run is complete: BEGIN code that builds records from the log (`loglines`) runs
        over the records it names, in log order; the records it adds are judged like logged ones. Then the
        END blocks' code and CHECKs run on each rule file's final state."""
        if self._built or self._buffer is not None:
            return
        self._built = True
        for path, code in self._builders:
            lines = [_logline(ev) for ev in self._kept]
            before = len(lines)
            self._exec(code, self._states[path], None, "BEGIN", {"loglines": lines})
            for line in lines[before:]:
                ev = _event(line)
                rule = self._rules.get(ev.key) if ev is not None else None
                if ev is not None and rule is not None:
                    self._judge(ev, rule)
        self._kept = []
        for path in self._loaded_paths():
            rf = load_rule_file(path)
            state = self._states.get(path)
            if state is None or (rf.end_pre is None and not rf.end_checks):
                continue
            if rf.end_pre is not None:
                self._exec(rf.end_pre, state, None, "END", None)
            for text, code, _ in rf.end_checks:
                try:
                    ok = eval(code, state, {})
                except Exception:
                    ok = False
                if not ok:
                    self._add("error", "end", f"END CHECK of {Path(path).name} failed: {text}", None)

    def _loaded_paths(self) -> list[str]:
        return [rule_path(c) for c in self._loaded]

    def _order(self, ev: Event) -> None:
        s = self._state
        key, t = ev.key, ev.time_ms
        if key == "init_start":
            if s["init_stopped"] or s["run_started"]:
                self._add("error", "relaunch", "init_start after init_stop/run_start: two init_start … "
                          "sequences in one file (a log file reused by a relaunch?)", t)
            s["init_started"] = True
            self._first_init = t if self._first_init is None else min(self._first_init, t)
        elif key == "init_stop":
            if not s["init_started"]:
                self._add("error", "order", "init_stop without an init_start before it", t)
            if s["run_started"]:
                self._add("error", "order", "init_stop after run_start", t)
            if self._first_init is not None and t - self._first_init >= self._budget_min * 60_000:
                if self._budget_min == 0:
                    msg = "init_stop before submission_division: the checker's init budget is then 0 min"
                else:
                    took = (t - self._first_init) / 60_000
                    msg = f"init took {took:.1f} min, over the {self._budget_min} min budget of this division"
                self._add("error", "init_budget", msg, t)
            s["init_stopped"] = True
        elif key == "run_start":
            if not s["init_stopped"]:
                self._add("error", "order", "run_start before init_stop", t)
            s["run_started"] = True
        elif key == "run_stop":
            self.version += 1  # end-of-run rules are judged from now on
            if not s["run_started"]:
                self._add("error", "order", "run_stop without a run_start before it", t)
            md = ev.md
            if not isinstance(md, dict) or "status" not in md:
                self._add("error", "run_stop_status", "run_stop has no status in its metadata", t)
            s["run_stopped"] = True
        elif key == "block_start" and not s["run_started"]:
            self._add("error", "order", "block_start before run_start", t)

    def _end_findings(self) -> list[Finding]:
        out: list[Finding] = []
        counts = self._counts
        for name, rule in self._rules.items():
            n = counts.get(name, 0)
            req = rule.req
            if req == "EXACTLY_ONE" and n != 1:
                if n and name not in self._differs:
                    out.append(Finding("warning", "exactly_one", f"Required EXACTLY_ONE occurrence of '{name}' "
                                       f"but found {n} (same value: the checker only warns)"))
                else:
                    extra = " with different values (a log reused by a relaunch?)" if n else ""
                    out.append(Finding("error", "exactly_one",
                                       f"Required EXACTLY_ONE occurrence of '{name}' but found {n}{extra}"))
            elif req == "AT_LEAST_ONE" and n < 1:
                out.append(Finding("error", "required", f"Required AT_LEAST_ONE occurrence of '{name}' but found 0"))
            elif req and req.startswith("AT_LEAST(") and req[9:-1].isdigit() and n < int(req[9:-1]):
                out.append(Finding("error", "required", f"Required {req} occurrence of '{name}' but found {n}"))
            if rule.atleast_one is not None and n and name not in self._alo_hits:  # n == 0: the REQ rule says it
                out.append(Finding("error", "target", f"Failed checks for {name} : {rule.atleast_one[0]}"))
        for alts in self._alternatives:
            if not any(counts.get(k) for k in alts):
                names = " or ".join(f"'{k}'" for k in alts)
                out.append(Finding("error", "required", f"Required AT_LEAST_ONE occurrence of {names}"))
        return out

    # ---- results -------------------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """True once end-of-run rules are judged (run_stop seen or `finish()` called)."""
        return self._finished or self._state["run_stopped"]

    def findings(self) -> tuple[Finding, ...]:
        if self._cache is not None:
            return self._cache
        out = list(self._found)
        if self._bad_lines:
            out.append(Finding("error", "parse", f"{self._bad_lines} line(s) carry :::MLLOG but do not parse: "
                               "the official checker fails logs with parsing errors"))
        if self._buffer is None and self.complete:
            out.extend(self._end_findings())
        self._cache = tuple(out)
        return self._cache

    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings() if f.severity == "error")

    @property
    def passed(self) -> bool | None:
        """The expected official verdict once the run is complete; None before."""
        if not self.complete:
            return None if not self.errors() else False
        return not self.errors()


def check_events(events: Iterable[Event], ruleset: str | None = None, config: str | None = None,
                 bad_lines: int = 0) -> LiveChecker:
    """A finished log's live verdict (what `report` shows for static files)."""
    checker = LiveChecker(ruleset, config)
    checker.apply(events)
    checker.note_bad_lines(bad_lines)
    checker.finish()
    return checker
