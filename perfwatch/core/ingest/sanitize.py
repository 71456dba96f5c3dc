"""Safe names and numbers from hostile files: one home for the rules every reader and output applies.

Log strings (a `submission_benchmark`, a run id, a line of `output.log`) and file names come from
files anyone can write. Four hazards, four rules:

* control characters (ESC starts a terminal control sequence, a bidi override reorders what the
  reader sees): `printable` turns every C0/C1 control character except newline and tab, and the
  Unicode bidi controls, into a visible escape such as `\\x1b` or `\\u202e`;
* bytes that are not UTF-8 in a file name (Python keeps byte 0xff as the lone surrogate U+DCFF,
  which no UTF-8 output can encode): shown as the byte, `\\xff`, by the same table;
* a newline or a tab inside one table cell or one CSV/markdown field would forge rows:
  `one_line` also escapes them (`\\n`, `\\t`);
* a spreadsheet runs a CSV cell starting with `=`, `+`, `-` or `@` as a formula (OWASP's CSV
  injection rule): `csv_cell` prefixes such text with `'`.

`json_ready` makes data strict-JSON safe: names as `printable` shows their undecodable bytes,
NaN and infinities as null ("unknown"), never the bare `NaN`/`Infinity` strict parsers reject.

Numbers from disk (`Infinity` in telemetry.jsonl, 1e308 watts, an eval of -1.7e308 or 5e-324) pass
`finite(value, low, high)` before any arithmetic: a value outside what the quantity can physically be
is unknown (None), so sums never overflow and plots never get an infinite axis.
"""

from __future__ import annotations

import math
from typing import Any

# C0 except \t and \n, DEL, C1, and the Unicode bidi embedding/override/isolate controls, as tables
# for str.translate.
_UNSAFE = (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SURROGATES = range(0xD800, 0xE000)  # lone surrogates: U+DC80..U+DCFF are undecodable bytes 0x80..0xff


def _visible(c: int) -> str:
    if 0xDC80 <= c <= 0xDCFF:
        return f"\\x{c - 0xDC00:02x}"  # the byte the name really holds
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


_VISIBLE = {c: _visible(c) for c in (*_UNSAFE, *_SURROGATES)}
_BYTES_ONLY = {c: _visible(c) for c in _SURROGATES}
_ONE_LINE = {**_VISIBLE, ord("\n"): "\\n", ord("\t"): "\\t"}
_REPLACED = dict.fromkeys((*_UNSAFE, *_SURROGATES), "\ufffd")
FORMULA_STARTS = ("=", "+", "-", "@")


def printable(text: str) -> str:
    """`text` with every terminal control character and undecodable byte shown as an escape (newline
    and tab kept)."""
    return text.translate(_VISIBLE)


def one_line(text: str) -> str:
    """`printable`, and newline and tab escaped too: the text of one table cell or one field."""
    return text.translate(_ONE_LINE)


def scrub(text: str) -> str:
    """Same-length variant for widgets (styled spans keep their offsets): each control character and
    undecodable byte becomes U+FFFD."""
    return text.translate(_REPLACED)


def csv_cell(value: Any) -> Any:
    """A CSV field: text on one line, and text a spreadsheet would run as a formula prefixed with `'`
    (numbers stay numbers: -1.5 is not a formula)."""
    if not isinstance(value, str):
        return value
    text = one_line(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def json_ready(value: Any) -> Any:
    """`value` with every string's undecodable bytes escaped and every non-finite float as None, through
    dicts, lists and tuples; for `json.dumps(..., allow_nan=False)`."""
    if isinstance(value, str):
        return value.translate(_BYTES_ONLY)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {json_ready(k) if isinstance(k, str) else k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """Strict JSON of `value` (see `json_ready`); objects json cannot encode are written as their str()."""
    import json

    return json.dumps(json_ready(value), indent=indent, allow_nan=False,
                      default=lambda o: json_ready(str(o)))


NUMBER_LIMIT = 1e18  # |x| beyond this is no quantity a training log or a sensor reports (FLOPs/sample ~1e16)
PLOT_LIMIT = 1e15  # a plot axis spans at most +-this; values beyond are drawn at the edge, and it says so


def finite(value: object, low: float = -NUMBER_LIMIT, high: float = NUMBER_LIMIT) -> float | None:
    """`value` as a float if it is a real number within [low, high] (booleans are not numbers), else None.
    The default bounds keep any sum of a few billion such values finite. NaN fails both comparisons; an
    int is compared exactly before it is converted (a 400-digit int never reaches float())."""
    if type(value) is bool or not isinstance(value, (int, float)):
        return None
    return float(value) if low <= value <= high else None


def plot_range(lo: float, hi: float) -> tuple[float, float, bool]:
    """An axis range a plot can divide by: within +-PLOT_LIMIT (the flag says values were clamped), never
    empty or denormal (a constant series, or 0 and 5e-324, gets a span around its value)."""
    clamped = not (lo >= -PLOT_LIMIT and hi <= PLOT_LIMIT)
    lo = min(max(lo, -PLOT_LIMIT), PLOT_LIMIT) if math.isfinite(lo) else -PLOT_LIMIT
    hi = min(max(hi, -PLOT_LIMIT), PLOT_LIMIT) if math.isfinite(hi) else PLOT_LIMIT
    lo, hi = min(lo, hi), max(lo, hi)
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9 or hi - lo < 1e-12:
        mid = (lo + hi) / 2
        half = abs(mid) * 0.05 if abs(mid) >= 1e-12 else 1.0
        lo, hi = mid - half, mid + half
    return lo, hi, clamped
