"""gjson paths: read one value from a JSON document, as tidwall/gjson's `Get` does.

The evaluator follows tidwall/gjson's `Get` on well-formed JSON: dot-separated
keys with `\\` escapes, `*`/`?` wildcards (the first matching key in document order whose
value yields a result wins), array indexes, `#` (length), `#.rest` projections, `#(...)`
and the older `#[...]` queries (first match, or every match with a trailing `#`, nested
queries, `==~` truthiness), and `|` pipes. tests/data/conformance/gjson-paths.json pins
it. Not supported: modifiers (`@reverse`), multipaths, literals (`!true`) and JSON Lines;
a path using them reads as plain keys, which are normally absent, so the loop stops.
Results keep the document's own text (`raw`), as gjson does.

gjson-py was considered and not used: it does not accept `#[...]` queries or unquoted
query values (`#(last=Murphy)`), compares mixed types and `==~` with Python's rules,
returns `[]` for `friends.#.nets.#`, reads the key `@key` as an unknown modifier, and
works on decoded Python objects, so it cannot return the document's own text; 14 of the
80 conformance vectors fail with it. It is also GPL-3.0+, and Zilean is MIT.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ResultType(StrEnum):
    """gjson's result types; a path that resolves to nothing has no result at all."""

    NULL = "Null"
    FALSE = "False"
    NUMBER = "Number"
    STRING = "String"
    TRUE = "True"
    JSON = "JSON"  # an object or an array


class InvalidDocument(ValueError):
    """The text is not a single well-formed JSON value."""


@dataclass(frozen=True, slots=True)
class PathResult:
    """A value found at a path: its type and its JSON text.

    `raw` is a slice of the document, except for `#` counts and projections, which build
    compact JSON from the raw text of their parts (`["a","b"]`, `3`).
    """

    type: ResultType
    raw: str

    @property
    def value(self) -> float | str | bool | None:
        """Return the value as gjson's conformance vectors spell it.

        A number as a float, a string unescaped, a boolean, None for null, and the raw
        text of an object or array.
        """
        if self.type is ResultType.NUMBER:
            return float(self.raw)
        if self.type is ResultType.STRING:
            return _string_value(self.raw)
        if self.type is ResultType.JSON:
            return self.raw
        if self.type is ResultType.NULL:
            return None
        return self.type is ResultType.TRUE


def get_path(document: str | bytes, path: str) -> PathResult | None:
    """Return the value at a gjson `path` in `document`, or None when there is none.

    Raise InvalidDocument when the document is not well-formed JSON (bytes must be UTF-8),
    including NaN/Infinity and nesting too deep for Python's JSON decoder. A leading byte
    order mark is ignored. A document that is a bare scalar has no paths.
    """
    if isinstance(document, bytes):
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocument("the document is not UTF-8") from exc
    text = document.removeprefix("\ufeff")
    start = _skip(text, 0)
    try:
        _, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        raise InvalidDocument(f"not JSON: {exc}") from exc
    if _skip(text, end) != len(text):
        raise InvalidDocument(f"unexpected text at offset {_skip(text, end)}")
    node = _walk_segments(_node_at(text, start, end), _compile(path))
    return None if node is None else PathResult(node.type, node.raw)


def _discard(_: str) -> None:
    return None


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


# Validates and measures values at C speed. Numbers are never converted here: Python's
# int() refuses more than 4300 digits, which JSON allows; their text is read when needed.
_DECODER = json.JSONDecoder(parse_float=_discard, parse_int=_discard, parse_constant=_refuse)
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_TYPE_BY_FIRST_CHAR = {
    "{": ResultType.JSON,
    "[": ResultType.JSON,
    '"': ResultType.STRING,
    "t": ResultType.TRUE,
    "f": ResultType.FALSE,
    "n": ResultType.NULL,
}


@dataclass(frozen=True, slots=True)
class _Node:
    """A value inside `text`, which is either the validated document or JSON we built."""

    type: ResultType
    text: str
    start: int
    end: int

    @property
    def raw(self) -> str:
        return self.text[self.start : self.end]


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return pos if match is None else match.end()


def _node_at(text: str, start: int, end: int | None = None) -> _Node:
    if end is None:
        _, end = _DECODER.raw_decode(text, start)
    return _Node(_TYPE_BY_FIRST_CHAR.get(text[start], ResultType.NUMBER), text, start, end)


def _members(node: _Node) -> Iterator[tuple[str, _Node]]:
    """Yield an object's members in document order, duplicate keys included."""
    text = node.text
    pos = _skip(text, node.start + 1)
    while text.startswith('"', pos):
        name, pos = _DECODER.raw_decode(text, pos)
        child = _node_at(text, _skip(text, _skip(text, pos) + 1))  # past the ':'
        yield name, child
        pos = _skip(text, child.end)
        if not text.startswith(",", pos):
            return
        pos = _skip(text, pos + 1)


def _elements(node: _Node) -> Iterator[_Node]:
    text = node.text
    pos = _skip(text, node.start + 1)
    while not text.startswith("]", pos):
        child = _node_at(text, pos)
        yield child
        pos = _skip(text, child.end)
        if not text.startswith(",", pos):
            return
        pos = _skip(text, pos + 1)


def _string_value(raw: str) -> str:
    if "\\" not in raw:
        return raw[1:-1]
    decoded: str = json.loads(raw)
    return decoded


@dataclass(frozen=True, slots=True)
class _Key:
    """A key or array index; `pattern` is set when the key holds unescaped wildcards."""

    text: str
    pattern: re.Pattern[str] | None = None

    def matches(self, name: str) -> bool:
        if self.pattern is None:
            return name == self.text
        return self.pattern.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class _Count:
    """`#`: an array's length, or, with more path after it, a projection over elements."""

    def matches(self, name: str) -> bool:
        return name == "#"  # on an object, gjson reads `#` as an ordinary key


@dataclass(frozen=True, slots=True)
class _Query:
    """`#(path op value)`; `all` when a trailing `#` asks for every match."""

    path: tuple[tuple[_Component, ...], ...] | None  # None compares the element itself
    op: str
    value: str
    all: bool
    valid: bool = True

    def matches(self, name: str) -> bool:
        return False


_Component = _Key | _Count | _Query
_Segment = tuple[_Component, ...]
_ESCAPED = "\x00"  # marks the next character of a key buffer as escaped
# gjson trims everything up to and including the space character around query parts.
_TRIM = "".join(chr(code) for code in range(33))


@functools.lru_cache(maxsize=256)
def _compile(path: str) -> tuple[_Segment, ...]:
    """Split a path into pipe-separated segments of components."""
    segments: list[_Segment] = []
    components: list[_Component] = []
    pos = 0
    while True:
        if path.startswith(("#(", "#["), pos):
            query, pos = _read_query(path, pos)
            components.append(query)
            # gjson ignores anything between a query's end and the next separator.
            while pos < len(path) and path[pos] not in ".|":
                pos += 2 if path[pos] == "\\" else 1
        else:
            buffer: list[str] = []
            while pos < len(path) and path[pos] not in ".|":
                if path[pos] == "\\":
                    pos += 1
                    if pos < len(path):
                        buffer.append(_ESCAPED + path[pos])
                else:
                    buffer.append(path[pos])
                pos += 1
            components.append(_key(buffer))
        if pos >= len(path):
            segments.append(tuple(components))
            return tuple(segments)
        if path[pos] == "|":
            segments.append(tuple(components))
            components = []
        pos += 1


def _key(buffer: list[str]) -> _Key | _Count:
    text = "".join(char[-1] for char in buffer)
    if buffer == ["#"]:
        return _Count()
    if not any(char in ("*", "?") for char in buffer):
        return _Key(text)
    # An escaped `*` or `?` stays literal, even next to an unescaped wildcard.
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char[-1]) for char in buffer
    )
    return _Key(text, re.compile(regex, re.DOTALL))


def _read_query(path: str, start: int) -> tuple[_Query, int]:
    """Read the query at `path[start]` (`#(` or `#[`); return it and the position after."""
    pos, depth, op_at, escaped = start + 2, 1, -1, False
    while pos < len(path):
        char = path[pos]
        if depth == 1 and op_at < 0 and char in "!=<>%":
            op_at = pos
        elif char == "\\":
            pos += 1
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
            if depth == 0:
                break
        elif char == '"':
            pos += 1
            while pos < len(path) and path[pos] != '"':
                if path[pos] == "\\":
                    escaped = True
                    pos += 1
                pos += 1
        pos += 1
    if depth:  # unbalanced: the query matches nothing
        return _Query(None, "", "", all=False, valid=False), len(path)
    if op_at < 0:
        query_path, op, value = path[start + 2 : pos].strip(_TRIM), "", ""
    else:
        query_path = path[start + 2 : op_at].strip(_TRIM)
        op, value = _split_operator(path[op_at:pos].strip(_TRIM))
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
        if escaped:
            value = _unescape(value)
    pos += 1
    every_match = path.startswith("#", pos)
    query = _Query(_compile(query_path) if query_path else None, op, value, all=every_match)
    return query, pos + 1 if every_match else pos


def _split_operator(text: str) -> tuple[str, str]:
    if len(text) == 1:
        return text, ""
    if text[:2] in ("!=", "!%", "<=", ">="):
        return text[:2], text[2:].strip(_TRIM)
    if text[:2] == "==":
        return "=", text[2:].strip(_TRIM)
    if text[0] in "<>=%":
        return text[0], text[1:].strip(_TRIM)
    return "", text  # e.g. `!x`: gjson then only checks that the value exists


def _unescape(text: str) -> str:
    try:
        decoded: str = json.loads(f'"{text}"', strict=False)
    except ValueError:
        return text
    return decoded


def _walk_segments(node: _Node | None, segments: tuple[_Segment, ...]) -> _Node | None:
    # A pipe applies the rest of the path to the whole result so far, so after a
    # projection `|0` picks the first element where `.0` would index every element.
    for segment in segments:
        if node is None:
            return None
        node = _walk(node, segment, 0)
    return node


def _walk(node: _Node, path: _Segment, index: int) -> _Node | None:
    if index == len(path):
        return node
    if node.type is not ResultType.JSON:
        return None  # scalars have no children
    component = path[index]
    last = index + 1 == len(path)
    if node.text[node.start] == "{":
        for name, child in _members(node):
            if not component.matches(name):
                continue
            if last:
                return child
            # gjson keeps looking when the rest of the path is not found under this key.
            if child.type is ResultType.JSON:
                found = _walk(child, path, index + 1)
                if found is not None:
                    return found
        return None
    items = _elements(node)
    if isinstance(component, _Count):
        if last:
            return _computed(ResultType.NUMBER, str(sum(1 for _ in items)))
        return _array(_walk(item, path, index + 1) for item in items)
    if isinstance(component, _Query):
        if not component.valid:
            return None
        matching = (item for item in items if _query_matches(component, item))
        if component.all:
            if _skip(node.text, node.start + 1) == node.end - 1:
                return None  # gjson yields nothing, not `[]`, for an empty array
            return _array(_walk(item, path, index + 1) for item in matching)
        first = next(matching, None)
        return None if first is None else _walk(first, path, index + 1)
    if component.pattern is None and component.text.isascii() and component.text.isdigit():
        item = next(itertools.islice(items, int(component.text), None), None)
        if item is not None:
            return _walk(item, path, index + 1)
    return None


def _computed(kind: ResultType, text: str) -> _Node:
    return _Node(kind, text, 0, len(text))


def _array(nodes: Iterable[_Node | None]) -> _Node:
    """Build a JSON array from the raw text of the nodes found, as gjson does."""
    return _computed(
        ResultType.JSON, "[" + ",".join(node.raw for node in nodes if node is not None) + "]"
    )


_TRUE = _computed(ResultType.TRUE, "true")
_FALSE = _computed(ResultType.FALSE, "false")


def _query_matches(query: _Query, item: _Node) -> bool:
    target: _Node | None = item
    if query.path is not None:
        if item.type is not ResultType.JSON:
            return False  # a scalar element has no members to test, whatever the operator
        target = _walk_segments(item, query.path)
    value = query.value
    if value.startswith("~"):
        # `~true`, `~false`, `~null`, `~*` compare truthiness, null-ness or existence.
        wanted = value[1:]
        if wanted == "*":
            verdict = target is not None
        elif wanted == "null":
            verdict = target is None or target.type is ResultType.NULL
        elif wanted in ("true", "false"):
            verdict = _truthy(target) == (wanted == "true")
        else:
            return False
        target, value = (_TRUE if verdict else _FALSE), "true"
    if target is None:
        return False
    if not query.op:
        return True
    return _compare(target, query.op, value)


def _compare(target: _Node, op: str, value: str) -> bool:
    """Compare by the element's type: numbers numerically, strings as strings."""
    if target.type is ResultType.STRING:
        text = _string_value(target.raw)
        if op in ("%", "!%"):
            return (_wildcard(value).fullmatch(text) is not None) == (op == "%")
        return _ordered(text, op, value)
    if target.type is ResultType.NUMBER:
        return _ordered(float(target.raw), op, _to_float(value))
    if target.type is ResultType.TRUE:
        return {"=": value == "true", "!=": value != "true", ">": value == "false"}.get(
            op, op == ">="
        )
    if target.type is ResultType.FALSE:
        return {"=": value == "false", "!=": value != "false", "<": value == "true"}.get(
            op, op == "<="
        )
    return False


def _ordered(left: Any, op: str, right: Any) -> bool:
    if op == "=":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    if op == ">=":
        return bool(left >= right)
    return False


def _truthy(node: _Node | None) -> bool:
    if node is None:
        return False
    if node.type is ResultType.TRUE:
        return True
    if node.type is ResultType.NUMBER:
        return float(node.raw) != 0
    if node.type is ResultType.STRING:
        return _string_value(node.raw).lower() in ("1", "t", "true")
    return False


_FLOAT = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)"
)


def _to_float(text: str) -> float:
    # Like Go's ParseFloat with the error ignored: anything unreadable compares as 0.
    return float(text) if _FLOAT.fullmatch(text.lower()) else 0.0


@functools.lru_cache(maxsize=256)
def _wildcard(pattern: str) -> re.Pattern[str]:
    """Compile a `%` pattern: `*` any run, `?` one character, `\\` escapes the next."""
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char == "\\":
            parts.append(re.escape(next(chars, "\\")))
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)
