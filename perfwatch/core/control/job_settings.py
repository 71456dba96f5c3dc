"""Per-job settings of a campaign (`defaults:` and each job's own keys), validated on YAML nodes.

Split from campaign.py so that module stays about expansion: a job's settings are
`defaults` overlaid with the job's keys, each checked with its file:line:field.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

from perfwatch.core.control.peak_values import ANY, PEAK_DTYPES, parse_flops
from perfwatch.core.control.yaml_nodes import LocatedNode
from perfwatch.core.mlperf.rulesets import StandsFor, UnknownBenchmark, UnknownRuleset, stands_for
from perfwatch.core.mlperf.targets import Target, training_rulesets

SETTING_KEYS = (
    "benchmark", "repeat", "seed", "seeds", "env", "cwd", "target", "exit_at_target", "timeout",
    "stall_after", "stall_factor", "on_stall", "devices", "precision", "flops_per_sample", "threads", "isolate", "grace",
    "cache_clear_cmd", "cache_clear_timeout", "peak_flops", "mlperf",
)
CACHE_CLEAR_KEYS = ("cache_clear_cmd", "cache_clear_timeout")  # also allowed at the top level
CACHE_CLEAR_TIMEOUT = 60.0
TARGET_KEYS = ("key", "value", "higher_is_better")
MLPERF_KEYS = ("benchmark", "ruleset", "division")
RUN_FIELDS = ("seed", "index", "run_id", "name", "job")
PRECISIONS = ("fp32", "fp16", "bf16", "amp", "tf32", "fp8")
ISOLATE = ("none", "per_device")
ON_STALL = ("capture", "stop", "restart")  # what the hang watchdog does after capturing the stacks
STALL_FACTOR = 10.0  # stalled after this many times the run's own step time
# set by perfwatch for every run: a campaign cannot set them (silently overriding would lie)
RESERVED_ENV = {
    "PERFWATCH_MLLOG": "perfwatch points it at the run's own mllog.txt",
    "PERFWATCH_RUN_ID": "perfwatch sets it to the run id",
    "PERFWATCH_SEED": "perfwatch sets it from `seed`/`seeds`",
    "CUDA_VISIBLE_DEVICES": "perfwatch assigns GPUs from `devices` (and `scheduler: {gpus: [...]}`)",
    "CUDA_DEVICE_ORDER": "perfwatch sets PCI_BUS_ID so CUDA and NVML number GPUs alike",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Settings:
    benchmark: str | None = None
    repeat: int = 1
    repeat_set: bool = False
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    seeds_y: LocatedNode | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    target: Target | None = None
    exit_at_target: bool = False
    timeout: float | None = None
    stall_after: float | None = None
    stall_factor: float = STALL_FACTOR
    on_stall: str = "capture"
    devices: int | None = None  # GPUs per run; None = auto (resolved against the host's GPUs)
    devices_y: LocatedNode | None = None
    precision: str | None = None
    flops_per_sample: float | None = None
    threads: int = 1
    isolate: str = "none"
    grace: float = 10.0
    cache_clear_cmd: tuple[str, ...] | None = None  # argv run by the runner before each attempt
    cache_clear_y: LocatedNode | None = None
    cache_clear_timeout: float | None = CACHE_CLEAR_TIMEOUT
    peak_flops: dict[str, dict[str, float]] | None = None  # {device pattern | "*": {dtype | "*": FLOP/s}}
    mlperf: StandsFor | None = None  # the MLPerf benchmark the job stands for (validated)
    mlperf_division_set: bool = False  # False: the campaign's system.division (else closed) applies

    def copy(self) -> Settings:
        return Settings(**{**self.__dict__, "env": dict(self.env)})


def check_template(y: LocatedNode, text: str, allowed: tuple[str, ...]) -> str:
    """A string with `{field}` placeholders: known fields only, no format specs, no NUL bytes."""
    if "\0" in text:
        raise y.error("contains a NUL byte (a process argument or environment value cannot hold one)")
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise y.error(f"bad template {text!r}: {exc}; write {{{{ and }}}} for literal braces") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in allowed:
            raise y.error(f"unknown placeholder {{{name}}}; known: {', '.join('{' + a + '}' for a in allowed)}")
        if spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise y.error(f"{shown}: format specs and conversions are not supported; write {{{name}}}")
    return text


def env_name(y: LocatedNode, name: str) -> str:
    """An environment variable name a process can have, that perfwatch does not set itself."""
    if not _ENV_NAME.fullmatch(name):
        raise y.error(f"environment variable name {name!r}: use letters, digits and _ (no '=', no spaces, "
                      "not starting with a digit)")
    if name in RESERVED_ENV:
        raise y.error(f"{name} cannot be set here: {RESERVED_ENV[name]}")
    return name


def argv_list(y: LocatedNode, example: str) -> list[LocatedNode]:
    """A command as an argv list of strings (templated with the run's fields); never a shell string."""
    if y.shape == "scalar" and not y.is_null():
        raise y.error(f"expected an argv list like {example}, got a string (no shell strings)")
    items = y.seq()
    if not items:
        raise y.error("empty command")
    for it in items:
        if it.shape != "scalar":
            raise it.expected("a string")
        check_template(it, it.string(), RUN_FIELDS)
    return items


def target(y: LocatedNode) -> Target | None:
    if y.is_null():
        return None
    if kind_is_number(y):
        return Target("eval_accuracy", y.number(), True, "campaign")
    m = y.mapping(TARGET_KEYS)
    if "value" not in m:
        raise y.error("missing key 'value' (the quality threshold)")
    key = m["key"].string() if "key" in m else "eval_accuracy"
    hib = m["higher_is_better"].boolean() if "higher_is_better" in m else True
    return Target(key, m["value"].number(), hib, "campaign")


def kind_is_number(y: LocatedNode) -> bool:
    return y.node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def settings(m: dict[str, LocatedNode], base: Settings) -> Settings:
    s = base.copy()
    for key, y in m.items():
        if key == "benchmark":
            s.benchmark = y.string()
        elif key == "repeat":
            s.repeat, s.repeat_set = y.integer(minimum=1), True
        elif key == "seed":
            s.seed = y.integer()
        elif key == "seeds":
            items = y.seq()
            if not items:
                raise y.error("empty list; give at least one seed or use `seed: BASE`")
            s.seeds, s.seeds_y = tuple(i.integer() for i in items), y
        elif key == "env":
            for k, v in y.mapping().items():
                env_name(v, k)
                if v.shape != "scalar" or v.is_null():
                    raise v.expected("a string or number")
                s.env[k] = check_template(v, str(v.text()), RUN_FIELDS)
        elif key == "cwd":
            s.cwd = y.string()
            if "\0" in s.cwd:
                raise y.error("contains a NUL byte")
        elif key == "target":
            s.target = target(y)
        elif key == "exit_at_target":
            s.exit_at_target = y.boolean()
        elif key == "timeout":
            s.timeout = y.duration()
        elif key == "stall_after":
            s.stall_after = y.duration()
        elif key == "stall_factor":
            s.stall_factor = y.number()
            if not 2 <= s.stall_factor <= 1000:
                raise y.error(f"expected a number from 2 to 1000 (times the run's step time), got {y.text()!r}")
        elif key == "on_stall":
            s.on_stall = y.string()
            if s.on_stall not in ON_STALL:
                raise y.error(f"expected one of {', '.join(ON_STALL)}, got {s.on_stall!r}")
        elif key == "grace":
            s.grace = y.duration() or 0.0
        elif key == "cache_clear_cmd":
            if y.is_null():
                s.cache_clear_cmd, s.cache_clear_y = None, None  # a job can switch the campaign's off
            else:
                items = argv_list(y, "[sudo, /sbin/sysctl, vm.drop_caches=3]")
                s.cache_clear_cmd, s.cache_clear_y = tuple(it.string() for it in items), y
        elif key == "cache_clear_timeout":
            s.cache_clear_timeout = y.duration()
        elif key == "devices":
            if y.text() == "auto":
                s.devices = None
            elif y.node.tag != "tag:yaml.org,2002:int":
                raise y.error(f"expected 'auto' or a number of GPUs per run (0 = CPU), got {y.text()!r}")
            else:
                s.devices = y.integer(minimum=0)
            s.devices_y = y
        elif key == "threads":
            s.threads = y.integer(minimum=1)
        elif key == "precision":
            p = y.string()
            if p not in PRECISIONS:
                raise y.error(f"expected one of {', '.join(PRECISIONS)}, got {p!r}")
            s.precision = p
        elif key == "mlperf":
            s.mlperf, s.mlperf_division_set = (None, False) if y.is_null() else mlperf(y)
        elif key == "peak_flops":
            s.peak_flops = None if y.is_null() else peak_flops(y)
        elif key == "flops_per_sample":
            s.flops_per_sample = y.number()
            if s.flops_per_sample <= 0:
                raise y.error("expected a positive number of FLOPs per sample")
        elif key == "isolate":
            iso = y.string()
            if iso not in ISOLATE:
                raise y.error(f"expected one of {', '.join(ISOLATE)}, got {iso!r}")
            s.isolate = iso
    return s


def mlperf(y: LocatedNode) -> tuple[StandsFor, bool]:
    """`mlperf: {benchmark: bert, ruleset: 4.0.0, division: closed}` (or `mlperf: bert`): the MLPerf
    Training benchmark the job stands for, checked against the benchmark lists and rule folders
    mlperf_logging ships. Without `ruleset`: the newest that lists the benchmark. Returns it and
    whether `division` was given (if not, the campaign's `system.division`, else closed, applies)."""
    if y.shape == "scalar":
        m = {"benchmark": y}
    else:
        m = y.mapping(MLPERF_KEYS)
        if "benchmark" not in m:
            raise y.error("missing key 'benchmark' (the MLPerf Training benchmark the job stands for, e.g. bert)")
    bench = m["benchmark"].string()
    division = "closed"
    if "division" in m:
        division = m["division"].string()
        if division not in ("open", "closed"):
            raise m["division"].error(f"expected 'open' or 'closed', got {division!r}")
    ruleset = m["ruleset"].text() if "ruleset" in m else None
    if "ruleset" in m and (ruleset is None or m["ruleset"].is_null() or m["ruleset"].shape != "scalar"):
        raise m["ruleset"].expected("an MLPerf Training ruleset such as 4.0.0")
    try:
        return stands_for(bench, ruleset, division), "division" in m
    except UnknownRuleset:
        raise m["ruleset"].error(f"unknown MLPerf Training ruleset {ruleset!r}; mlperf_logging knows "
                                 f"{', '.join(training_rulesets())}") from None
    except UnknownBenchmark as exc:
        raise m["benchmark"].error(str(exc)) from None


# ---- peak_flops: the MFU denominator a campaign may set ---------------------------------------------------
def _peak_value(y: LocatedNode) -> float:
    if y.shape != "scalar" or y.is_null():
        raise y.expected("FLOP/s per device (989e12 or '989 TFLOPS')")
    try:
        return parse_flops(y.value())
    except ValueError as exc:
        raise y.error(str(exc)) from None


def _per_dtype(y: LocatedNode) -> dict[str, float]:
    if y.shape == "scalar":
        return {ANY: _peak_value(y)}
    return {dtype: _peak_value(v) for dtype, v in y.mapping((*PEAK_DTYPES, ANY)).items()}


def peak_flops(y: LocatedNode) -> dict[str, dict[str, float]]:
    """`peak_flops`, per device: one value for every device and dtype (`989e12`, `"989 TFLOPS"`), or a
    mapping whose keys are dtypes (`bf16: 989e12`) and/or GPU names as the run's log or NVML names them,
    matched case-insensitively as part of the name (`"H100 PCIe": 756e12`, `"MI300X": {bf16: 1307e12}`)."""
    if y.shape == "scalar":
        return {ANY: {ANY: _peak_value(y)}}
    table: dict[str, dict[str, float]] = {}
    for key, child in y.mapping().items():
        if key in PEAK_DTYPES or key == ANY:
            table.setdefault(ANY, {})[key] = _peak_value(child)
        elif not key.strip():
            raise child.error("a device name must not be empty")
        else:
            table.setdefault(key, {}).update(_per_dtype(child))
    if not table:
        raise y.error("expected at least one peak")
    return table
