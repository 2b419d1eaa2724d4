"""Cron expression syntax: robfig/cron v3's standard 5-field form, expanded to value sets.

Accepted: `minute hour day-of-month month day-of-week`, each a comma list of `*` or `?`,
`N`, `N-M`, optionally with `/step`; `N/step` runs from N to the field's maximum. Month
and weekday names (JAN-DEC, SUN-SAT, three letters, any case) can stand anywhere a number
can in those two fields. Descriptors `@yearly`, `@annually`, `@monthly`, `@weekly`,
`@daily`, `@midnight` and `@hourly` are shorthands (case-sensitive, as robfig has them).

Stricter than robfig, on purpose: a `TZ=`/`CRON_TZ=` prefix is refused (the zone is set
separately, and a second source of truth would be ambiguous); `*-N` is refused (robfig
silently reads it as `*`); an empty list item as in `5,,6` is refused (robfig skips it,
and a field of bare commas would never match); numbers are plain ASCII digits (robfig
also takes `+5`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from zilean.schedules.errors import ScheduleError

FIELD = "cron_expression"

MONTH_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
DAY_NAMES: Mapping[str, int] = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}

DESCRIPTORS: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_ZONE_PREFIX = re.compile(r"(cron_)?tz=", re.IGNORECASE)
_MAX_SHOWN = 100  # characters of the user's input echoed back in a message
_MAX_DIGITS = 6  # longer numbers are out of every range; keeps int() cheap on absurd input


@dataclass(frozen=True, slots=True)
class _Bounds:
    name: str
    low: int
    high: int
    names: Mapping[str, int] | None
    allowed: str  # how the error message describes valid values


_MINUTE = _Bounds("minute", 0, 59, None, "0-59")
_HOUR = _Bounds("hour", 0, 23, None, "0-23")
_DAY_OF_MONTH = _Bounds("day-of-month", 1, 31, None, "1-31")
_MONTH = _Bounds("month", 1, 12, MONTH_NAMES, "1-12 or JAN-DEC")
# robfig rejects 7 for Sunday, and so do we: accepting it would change what robfig means.
_DAY_OF_WEEK = _Bounds("day-of-week", 0, 6, DAY_NAMES, "0-6 (0 is Sunday) or SUN-SAT")
_ORDER = (_MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)


@dataclass(frozen=True, slots=True)
class CronFields:
    """One parsed expression: each field as a bitmask (bit N set when value N matches).

    A field is *starred* when one of its items is `*` or `?` with no step above 1 (robfig's
    "star bit"). Only the two day fields use it: if either is starred the other alone
    decides; if both are restricted, a day matches when either matches. `*/2` is not a
    star. A field is a *wildcard* when one of its items starts with `*` or `?` whatever
    its step; minute and hour wildcards choose the DST policy (see `cron.py`).
    """

    minute: int
    hour: int
    day_of_month: int
    month: int
    day_of_week: int
    starred: frozenset[str]
    wildcards: frozenset[str]

    def values(self, field: str) -> frozenset[int]:
        """Return the values a field matches, by its name (`day-of-week`...)."""
        bits = {
            "minute": self.minute,
            "hour": self.hour,
            "day-of-month": self.day_of_month,
            "month": self.month,
            "day-of-week": self.day_of_week,
        }[field]
        return frozenset(value for value in range(bits.bit_length()) if bits >> value & 1)


def _shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _item_error(bounds: _Bounds, item: str, reason: str) -> ScheduleError:
    return ScheduleError(FIELD, f'invalid {bounds.name} "{_shown(item)}": {reason}')


def _number(text: str, bounds: _Bounds, item: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()):
        if what == "step":
            raise _item_error(bounds, item, "the step must be a whole number, at least 1")
        raise _item_error(bounds, item, f"expected a number {bounds.allowed}")
    if len(text.lstrip("0")) > _MAX_DIGITS:
        reason = (
            "the step is too large" if what == "step" else f"{text} is outside {bounds.allowed}"
        )
        raise _item_error(bounds, item, reason)
    return int(text)


def _value(text: str, bounds: _Bounds, item: str) -> int:
    if bounds.names is not None:
        named = bounds.names.get(text.lower())
        if named is not None:
            return named
    return _number(text, bounds, item, "value")


def _parse_item(item: str, bounds: _Bounds) -> tuple[int, bool]:
    """Return one list item's bitmask and whether it carries robfig's star bit."""
    span, slash, step_text = item.partition("/")
    if "/" in step_text:
        raise _item_error(bounds, item, "more than one '/'")
    ends = span.split("-")
    if len(ends) > 2:
        raise _item_error(bounds, item, "more than one '-'")
    star = ends[0] in ("*", "?")
    if star:
        if len(ends) == 2:
            raise _item_error(bounds, item, f"'{ends[0]}' cannot start a range")
        low, high = bounds.low, bounds.high
    else:
        low = _value(ends[0], bounds, item)
        high = _value(ends[1], bounds, item) if len(ends) == 2 else low
    step = 1
    if slash:
        step = _number(step_text, bounds, item, "step")
        if step == 0:
            raise _item_error(bounds, item, "the step must be a whole number, at least 1")
        if len(ends) == 1:
            high = bounds.high  # robfig: "N/step" means N through the maximum
        star = star and step == 1
    for value in (low, high):
        if not bounds.low <= value <= bounds.high:
            raise _item_error(bounds, item, f"{value} is outside {bounds.allowed}")
    if low > high:
        raise _item_error(bounds, item, f"range start {low} is after its end {high}")
    bits = 0
    for value in range(low, high + 1, step):
        bits |= 1 << value
    return bits, star


def _parse_field(text: str, bounds: _Bounds) -> tuple[int, bool, bool]:
    """Return a field's bitmask, whether it is starred, and whether it is a wildcard."""
    bits, starred, wildcard = 0, False, False
    for item in text.split(","):
        item_bits, item_star = _parse_item(item, bounds)
        bits |= item_bits
        starred = starred or item_star
        wildcard = wildcard or item[:1] in ("*", "?")
    return bits, starred, wildcard


def parse_cron(expression: str) -> CronFields:
    """Parse a 5-field expression or descriptor; raise ScheduleError when it is invalid.

    Surrounding whitespace is ignored and any run of whitespace separates fields.
    `@every` is refused here: it is an elapsed-time interval, which `parse_schedule`
    hands to `rate.py` before a cron parse is tried.
    """
    text = expression.strip()
    if not text:
        raise ScheduleError(FIELD, "must not be empty")
    if _ZONE_PREFIX.match(text):
        raise ScheduleError(
            FIELD,
            "time zone prefixes (TZ=..., CRON_TZ=...) are not supported; "
            "the schedule's time zone is configured separately",
        )
    if text.startswith("@"):
        if text == "@every" or text.startswith("@every "):
            raise ScheduleError(
                FIELD, '"@every" is an elapsed-time interval, not a cron expression'
            )
        spec = DESCRIPTORS.get(text)
        if spec is None:
            raise ScheduleError(
                FIELD,
                f'unknown descriptor "{_shown(text)}" '
                f"(supported: {', '.join(DESCRIPTORS)}, @every <duration>)",
            )
        text = spec
    parts = text.split()
    if len(parts) != len(_ORDER):
        raise ScheduleError(
            FIELD, f'expected exactly 5 fields, got {len(parts)} ("{_shown(" ".join(parts))}")'
        )
    parsed = {
        bounds.name: _parse_field(part, bounds) for part, bounds in zip(parts, _ORDER, strict=True)
    }
    return CronFields(
        minute=parsed["minute"][0],
        hour=parsed["hour"][0],
        day_of_month=parsed["day-of-month"][0],
        month=parsed["month"][0],
        day_of_week=parsed["day-of-week"][0],
        starred=frozenset(name for name, (_, star, _) in parsed.items() if star),
        wildcards=frozenset(name for name, (_, _, wildcard) in parsed.items() if wildcard),
    )
