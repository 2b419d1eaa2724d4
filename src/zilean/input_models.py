"""The base of every model a client writes: unknown fields refused, JSON types kept.

A client that sends `loop_enable` or `"loop_enabled": "yes"` has made a mistake we can
name; coercing or ignoring it would store something they did not mean. Only identifiers
and timestamps, which JSON can carry only as strings, are parsed from text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Strict, model_validator

_JSON = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def raw_member(document: bytes | str, key: str) -> str | None:
    """The text of `key`'s value in a JSON object, exactly as the client wrote it.

    Parsing gives the value, not its spelling: a job's `body` is sent as written
    (`"Zürich"`, `1.50`, the client's spacing), so the route keeps the text too. None when
    `document` is not an object or lacks `key`; the last of duplicate keys wins, as it
    does for `json.loads`.
    """
    try:
        text = document.decode() if isinstance(document, bytes) else document
        at = _skip_space(text, 1 if text.startswith("\ufeff") else 0)
        if text[at : at + 1] != "{":
            return None
        at = _skip_space(text, at + 1)
        found = None
        while text[at : at + 1] == '"':
            name, at = _JSON.raw_decode(text, at)
            at = _skip_space(text, at)
            if text[at : at + 1] != ":":
                return None
            start = _skip_space(text, at + 1)
            _, end = _JSON.raw_decode(text, start)
            if name == key:
                found = text[start:end]
            at = _skip_space(text, end)
            if text[at : at + 1] != ",":
                break
            at = _skip_space(text, at + 1)
        return found
    except (UnicodeDecodeError, ValueError):
        return None


# JSON has no UUID or timestamp type: these two are read from their string forms.
TextUUID = Annotated[uuid.UUID, Strict(False)]
TextDatetime = Annotated[datetime, Strict(False)]


class StrictInput(BaseModel):
    """A request body: `extra="forbid"` and strict types (a CSV import validates laxly).

    `read_only` names the fields a response carries beside the writable ones. A client may
    send back what it read (`GET`, change, `PUT`), so those are dropped, not refused.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    read_only: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _drop_read_only(cls, data: Any) -> Any:
        if cls.read_only and isinstance(data, dict):
            return {key: value for key, value in data.items() if key not in cls.read_only}
        return data


# Pydantic's wording, by error type, in the API's: `<field>: <what is wrong>`.
_TYPE_PROBLEMS = {
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "list_type": "must be an array",
    "uuid_type": "must be a UUID",
    "uuid_parsing": "must be a UUID",
    "datetime_type": "must be an RFC 3339 timestamp",
    "datetime_parsing": "must be an RFC 3339 timestamp",
    "datetime_from_date_parsing": "must be an RFC 3339 timestamp",
    "int_parsing": "must be an integer",
    "string_unicode": "must be valid Unicode text",
}


def _problem(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind in _TYPE_PROBLEMS:
        return _TYPE_PROBLEMS[kind]
    if kind in ("string_too_short", "too_short"):
        return f"must not be shorter than {ctx.get('min_length')}"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"must be at most {ctx.get('max_length')} {unit}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}"
    message = str(error.get("msg", "is invalid"))
    return message[:1].lower() + message[1:]


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """The first error, worded `<field>: <what is wrong>` (`name is required` when missing)."""
    first = errors[0] if errors else {}
    kind = first.get("type")
    parts = [str(part) for part in first.get("loc", ())]
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return (
            f"the request body is not valid JSON ({detail})"
            if detail
            else ("the request body is not valid JSON")
        )
    where = parts[0] if parts and parts[0] in ("body", "query", "path", "header") else None
    field = ".".join(parts[1:] if where else parts)
    if kind == "extra_forbidden":
        return f'unknown field "{field}"' if where != "query" else f'unknown parameter "{field}"'
    if kind == "missing":
        return f"{field} is required" if field else "a JSON object body is required"
    problem = _problem(first)
    if not field:
        return f"the request body {problem}"
    return f"{field}: {problem}"
