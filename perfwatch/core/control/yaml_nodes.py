"""YAML with positions: every value the campaign validator reads keeps its file and line.

PyYAML's `compose` gives nodes that carry `start_mark`; validating on nodes (not on the
constructed dicts) is what lets an error say `demo.yaml:12: jobs[1].args.--batch-size`.
Duplicate keys, which plain `yaml.safe_load` silently collapses, are reported here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class CampaignError(Exception):
    """A campaign that cannot run; `str()` is `file:line: field: message`."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


MAX_DEPTH = 32  # a campaign nests ~5 levels; deeper is a mistake or an attack on the parser


def _deep_line(text: str) -> int:
    """The line where flow brackets first nest deeper than MAX_DEPTH (else the most indented line)."""
    depth, line, quote = 0, 1, ""
    for ch in text:
        if ch == "\n":
            line += 1
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line
        elif ch in "]}":
            depth -= 1
    lines = text.splitlines() or [""]
    widths = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
    return widths.index(max(widths)) + 1


def _check_depth(root: Node, name: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH (iteratively: no recursion on hostile input)."""
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CampaignError(name, node.start_mark.line + 1, "", f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, MappingNode):
            stack.extend((child, depth + 1) for pair in node.value for child in pair)


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(text: str) -> float | None:
    """`10m`, `60s`, `1h30m`, `90` (seconds) -> seconds; None if not a duration."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    m = _DURATION.match(text)
    if not m or not any(m.groups()):
        return None
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def kind(node: Node) -> str:
    """The word a user understands for what they wrote: mapping, list, string, ..."""
    if isinstance(node, MappingNode):
        return "mapping"
    if isinstance(node, SequenceNode):
        return "list"
    if node.tag == "tag:yaml.org,2002:null":
        return "null"
    if node.tag == "tag:yaml.org,2002:bool":
        return "boolean"
    if node.tag == "tag:yaml.org,2002:int":
        return "integer"
    if node.tag == "tag:yaml.org,2002:float":
        return "number"
    return "string"


@dataclass(frozen=True)
class LocatedNode:
    """A node plus where it is: the file and its dotted field path."""

    node: Node
    file: str
    path: str

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def error(self, message: str) -> CampaignError:
        return CampaignError(self.file, self.line, self.path, message)

    def expected(self, what: str) -> CampaignError:
        return self.error(f"expected {what}, got {kind(self.node)}")

    def child(self, key: str | int, node: Node) -> LocatedNode:
        if isinstance(key, int):
            return LocatedNode(node, self.file, f"{self.path}[{key}]")
        return LocatedNode(node, self.file, f"{self.path}.{key}" if self.path else key)

    # -- shapes --------------------------------------------------------------------
    @property
    def shape(self) -> str:
        """'mapping', 'list' or 'scalar'."""
        if isinstance(self.node, MappingNode):
            return "mapping"
        return "list" if isinstance(self.node, SequenceNode) else "scalar"

    def text(self) -> str | None:
        """A scalar's source text (None for mappings/lists): `auto`, `10m`, `32`."""
        return str(self.node.value) if isinstance(self.node, ScalarNode) else None

    def is_null(self) -> bool:
        return isinstance(self.node, ScalarNode) and kind(self.node) == "null"

    def value(self) -> Any:
        """The plain Python value of this node (scalars, lists, mappings)."""
        return SafeConstructor().construct_document(self.node)

    def mapping(self, known: Iterable[str] | None = None) -> dict[str, LocatedNode]:
        """Keys -> children; duplicate keys and (when `known` is given) unknown keys are errors."""
        if not isinstance(self.node, MappingNode):
            raise self.expected("a mapping")
        out: dict[str, LocatedNode] = {}
        allowed = list(known) if known is not None else None
        for knode, vnode in self.node.value:
            kw = LocatedNode(knode, self.file, self.path)
            if not isinstance(knode, ScalarNode) or kind(knode) in ("null",):
                raise kw.error("keys must be plain strings")
            key = str(knode.value)
            if key == "<<":
                raise kw.error("YAML merge keys (<<) are not supported; write the keys out")
            if key in out:
                raise CampaignError(
                    self.file, knode.start_mark.line + 1, self.child(key, knode).path,
                    f"duplicate key (first defined on line {out[key].line})",
                )
            if allowed is not None and key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(allowed)}"
                raise CampaignError(
                    self.file, knode.start_mark.line + 1, self.child(key, knode).path, f"unknown key{hint}"
                )
            out[key] = self.child(key, vnode)
        return out

    def seq(self) -> list[LocatedNode]:
        if not isinstance(self.node, SequenceNode):
            raise self.expected("a list")
        return [self.child(i, n) for i, n in enumerate(self.node.value)]

    def string(self) -> str:
        if not isinstance(self.node, ScalarNode) or kind(self.node) in ("null",):
            raise self.expected("a string")
        return str(self.node.value)

    def integer(self, minimum: int | None = None) -> int:
        if not isinstance(self.node, ScalarNode) or kind(self.node) != "integer":
            raise self.expected("an integer")
        v = int(self.value())
        if minimum is not None and v < minimum:
            raise self.error(f"expected an integer >= {minimum}, got {v}")
        return v

    def number(self) -> float:
        if not isinstance(self.node, ScalarNode) or kind(self.node) not in ("integer", "number"):
            raise self.expected("a number")
        return float(self.value())

    def boolean(self) -> bool:
        if not isinstance(self.node, ScalarNode) or kind(self.node) != "boolean":
            raise self.expected("true or false")
        return bool(self.value())

    def duration(self) -> float | None:
        """Seconds, or None for `null`/`none`/`0` (meaning: no limit)."""
        if self.is_null():
            return None
        if not isinstance(self.node, ScalarNode):
            raise self.expected("a duration like 10m, 60s or 1h30m")
        text = str(self.node.value)
        if text.lower() in ("none", "off"):
            return None
        seconds = parse_duration(text)
        if seconds is None:
            raise self.error(f"expected a duration like 10m, 60s or 1h30m, got {text!r}")
        return seconds or None


class CampaignLoader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as `9.895e11` or `1e12` as numbers.

    YAML 1.1 (PyYAML) wants a dot and a signed exponent, so `9.895e11` would be the string
    "9.895e11" and `flops_per_sample: 9.895e11` would be refused as "expected a number".
    """


CampaignLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load(path: Path) -> LocatedNode:
    """Compose the file into nodes; YAML syntax errors become CampaignErrors with a line."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignError(name, 0, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CampaignError(name, 0, "", f"cannot read: {exc}") from None
    try:
        node = yaml.compose(text, Loader=CampaignLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise CampaignError(name, line, "", f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise CampaignError(name, 0, "", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise CampaignError(name, _deep_line(text), "", f"nested more than {MAX_DEPTH} levels deep") from None
    if node is None:
        raise CampaignError(name, 1, "", "the file is empty; expected a mapping with `jobs`")
    _check_depth(node, name)
    return LocatedNode(node, name, "")
