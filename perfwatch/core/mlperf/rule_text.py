"""The few fixed shapes of text perfwatch reads out of mlperf_logging's files, matched without regexes.

A version in a results path (`v4.0`), a quality threshold (`v['value'] >= 0.720`), the rule file a
key's value selects (`enqueue_config('...{}...'.format(v['value']))`), the init budget of a division,
the runs a submission holds (the RCP checker's source). Each was a regex compiled at start-up:
0.1–0.3 ms apiece, together ~1.5 ms of every `perfwatch report`. Each function here gives what
`re.search` with the regex in its docstring gives (`tests/test_rule_text.py` compares them).
"""

from __future__ import annotations

_ASCII_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_DIGITS = frozenset("0123456789")
VALUE = "v['value']"


class _Cursor:
    """A position in `text` that the matchers below move forward; every step says whether it matched."""

    __slots__ = ("text", "at")

    def __init__(self, text: str, at: int) -> None:
        self.text = text
        self.at = at

    def spaces(self, least: int = 0) -> bool:
        """`\\s*` (least=0) or `\\s+` (least=1)."""
        text, start = self.text, self.at
        end = start
        while end < len(text) and text[end].isspace():
            end += 1
        self.at = end
        return end - start >= least

    def literal(self, word: str) -> bool:
        if self.text.startswith(word, self.at):
            self.at += len(word)
            return True
        return False

    def decimals(self) -> str | None:
        """`\\d+` (any Unicode decimal digit, as `\\d` in a str pattern)."""
        text, start = self.text, self.at
        end = start
        while end < len(text) and text[end].isdecimal():
            end += 1
        self.at = end
        return text[start:end] if end > start else None


def _starts(text: str, word: str) -> list[int]:
    """Where `word` occurs in `text`, in order (a regex search tries each in turn)."""
    out, i = [], text.find(word)
    while i >= 0:
        out.append(i)
        i = text.find(word, i + 1)
    return out


def version_in_name(name: str) -> tuple[str, str, str | None] | None:
    """The first `vMAJOR.MINOR[.PATCH]` in a path component, as
    `(?:^|[^0-9a-zA-Z])[vV](\\d+)\\.(\\d+)(?:\\.(\\d+))?(?![0-9])`: `v` not inside a word."""
    for i, ch in enumerate(name):
        if ch not in "vV" or (i > 0 and name[i - 1] in _ASCII_ALNUM):
            continue
        c = _Cursor(name, i + 1)
        major = c.decimals()
        if major is None or not c.literal("."):
            continue
        minor = c.decimals()
        if minor is None:
            continue
        patch = None
        if c.literal("."):
            patch = c.decimals()
        # greedy `\d+` leaves no [0-9] after it: the look-ahead cannot fail
        return major, minor, patch
    return None


def _number_end(text: str, at: int) -> int:
    """End of `[0-9]*\\.?[0-9]+(?:[eE][-+]?\\d+)?` at `at`, or -1."""
    n, end = len(text), at
    while end < n and text[end] in _ASCII_DIGITS:
        end += 1
    if end + 1 < n and text[end] == "." and text[end + 1] in _ASCII_DIGITS:
        end += 2
        while end < n and text[end] in _ASCII_DIGITS:
            end += 1
    elif end == at:
        return -1
    if end < n and text[end] in "eE":
        c = _Cursor(text, end + 1)
        if not c.literal("-"):
            c.literal("+")
        if c.decimals() is not None:
            end = c.at
    return end


def threshold(check: str) -> tuple[str, str] | None:
    """`(">=" or "<=", number)` of the first `v['value'] >= 0.72` in a check, as
    `v\\['value'\\]\\s*(>=|<=)\\s*([0-9]*\\.?[0-9]+(?:[eE][-+]?\\d+)?)`."""
    for i in _starts(check, VALUE):
        c = _Cursor(check, i + len(VALUE))
        c.spaces()
        op = check[c.at : c.at + 2]
        if op not in (">=", "<="):
            continue
        c.at += 2
        c.spaces()
        end = _number_end(check, c.at)
        if end != -1:
            return op, check[c.at : end]
    return None


def enqueued_config(post: str) -> str | None:
    """The rule file pattern of the first `enqueue_config('x_{}.yaml'.format(v['value']))`, as
    `enqueue_config\\(\\s*'([^']+)'\\s*\\.format\\(\\s*v\\['value'\\]\\s*\\)\\s*\\)`."""
    for i in _starts(post, "enqueue_config("):
        c = _Cursor(post, i + len("enqueue_config("))
        c.spaces()
        if not c.literal("'"):
            continue
        close = post.find("'", c.at)
        if close <= c.at:  # no closing quote, or nothing between the quotes
            continue
        pattern = post[c.at : close]
        c.at = close + 1
        c.spaces()
        if not c.literal(".format("):
            continue
        c.spaces()
        if not c.literal(VALUE):
            continue
        c.spaces()
        if not c.literal(")"):
            continue
        c.spaces()
        if c.literal(")"):
            return pattern
    return None


def division_budget(post: str) -> tuple[int, int] | None:
    """(open, closed) init minutes of the first `...compile_time_mins'] = 30 if v['value'] == 'open' else 20`,
    as `compile_time_mins'\\]\\s*=\\s*(\\d+)\\s+if\\s+v\\['value'\\]\\s*==\\s*'open'\\s+else\\s+(\\d+)`."""
    anchor = "compile_time_mins']"
    for i in _starts(post, anchor):
        c = _Cursor(post, i + len(anchor))
        c.spaces()
        if not c.literal("="):
            continue
        c.spaces()
        open_minutes = c.decimals()
        if (open_minutes is None or not c.spaces(1) or not c.literal("if") or not c.spaces(1)
                or not c.literal(VALUE)):
            continue
        c.spaces()
        if not c.literal("=="):
            continue
        c.spaces()
        if not c.literal("'open'") or not c.spaces(1) or not c.literal("else") or not c.spaces(1):
            continue
        closed_minutes = c.decimals()
        if closed_minutes is not None:
            return int(open_minutes), int(closed_minutes)
    return None


def quoted_counts(text: str) -> dict[str, int]:
    """`{'name': N, ...}` entries of a dict literal's source, as `re.finditer(r"'(\\w+)'\\s*:\\s*(\\d+)")`."""
    out: dict[str, int] = {}
    i = text.find("'")
    while i >= 0:
        close = text.find("'", i + 1)
        if close < 0:
            break
        name = text[i + 1 : close]
        c = _Cursor(text, close + 1)
        c.spaces()
        if name.replace("_", "a").isalnum() and c.literal(":"):
            c.spaces()
            number = c.decimals()
            if number is not None:
                out[name] = int(number)
                i = text.find("'", c.at)
                continue
        i = close  # the closing quote may open the next match, as a regex scan would try it
    return out
