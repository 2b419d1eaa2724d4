"""Rate schedules: `@every <duration>`, a fixed stretch of elapsed time between fires."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from zilean.schedules.errors import ScheduleError

FIELD = "cron_expression"
EVERY_PREFIX = "@every "

NANOSECOND = 1
SECOND = 1_000_000_000  # nanoseconds
_UNITS: dict[str, int] = {  # nanoseconds per unit; both micro signs are Go's
    "ns": NANOSECOND,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": SECOND,
    "m": 60 * SECOND,
    "h": 3600 * SECOND,
}
_LIMIT = 1 << 63  # nanoseconds; Go's time.Duration is a signed 64-bit count
_UNIT_HINT = "use ns, us, ms, s, m or h"
_SHAPE_HINT = "expected a number and a unit, such as 90s, 5m or 1h30m"
_MAX_SHOWN = 80  # characters of the user's input echoed back in a message


def _error(text: str, reason: str) -> ScheduleError:
    shown = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
    return ScheduleError(FIELD, f'invalid @every duration "{shown}": {reason}')


def _digits(s: str, i: int) -> int:
    """Return the index just past the run of ASCII digits starting at `i`."""
    while i < len(s) and "0" <= s[i] <= "9":
        i += 1
    return i


def parse_duration(text: str) -> int:
    """Return `text` in nanoseconds, accepting exactly Go's `time.ParseDuration` syntax.

    A number with an optional fraction followed by a unit, repeated (`1h30m`, `1.5h`,
    `300ms`), or a bare `0`. A leading `+` is allowed; negative durations are rejected
    because an interval that runs backwards has no meaning here (robfig would clamp it
    to one second). Values beyond Go's 64-bit range are rejected as Go rejects them.
    """
    s = text
    if s[:1] == "-":
        raise _error(text, "must not be negative")
    if s[:1] == "+":
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise _error(text, _SHAPE_HINT)
    total = 0
    i = 0
    while i < len(s):
        if not (s[i] == "." or "0" <= s[i] <= "9"):
            raise _error(text, _SHAPE_HINT)
        end = _digits(s, i)
        whole_digits = s[i:end].lstrip("0")
        has_whole = end > i
        # Go stops at 2**63; checking the length first keeps int() away from huge inputs.
        if len(whole_digits) > 19 or int(whole_digits or "0") > _LIMIT:
            raise _error(text, "too long")
        whole = int(whole_digits or "0")
        i = end
        fraction, scale, has_fraction = 0, 1.0, False
        if i < len(s) and s[i] == ".":
            end = _digits(s, i + 1)
            has_fraction = end > i + 1
            for ch in s[i + 1 : end]:
                # Like Go, keep only the digits that fit in 63 bits and ignore the rest.
                candidate = fraction * 10 + ord(ch) - ord("0")
                if candidate > _LIMIT:
                    break
                fraction, scale = candidate, scale * 10
            i = end
        if not (has_whole or has_fraction):
            raise _error(text, _SHAPE_HINT)
        end = i
        while end < len(s) and not (s[end] == "." or "0" <= s[end] <= "9"):
            end += 1
        unit_name = s[i:end]
        if not unit_name:
            raise _error(text, f"missing unit ({_UNIT_HINT})")
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise _error(text, f'unknown unit "{unit_name}" ({_UNIT_HINT})')
        i = end
        if whole > _LIMIT // unit:
            raise _error(text, "too long")
        value = whole * unit
        if fraction:
            # Go scales the fraction in float64; doing the same keeps results identical.
            value += int(float(fraction) * (float(unit) / scale))
        total += value
        if total > _LIMIT - 1:
            raise _error(text, "too long")
    return total


@dataclass(frozen=True, slots=True)
class RateSchedule:
    """Fire every `interval` of elapsed time, whatever the wall clock or DST does.

    The scheduler measures each interval from when the entry was added or last fired,
    so `next_fire(after)` is simply `after` plus the interval.
    """

    interval: timedelta

    def __post_init__(self) -> None:
        if self.interval < timedelta(seconds=1) or self.interval.microseconds:
            raise ValueError("a rate interval is a whole number of seconds, at least 1")

    @classmethod
    def from_nanoseconds(cls, nanoseconds: int) -> RateSchedule:
        """Build the schedule robfig would: at least 1s, sub-second part dropped (not rounded)."""
        return cls(timedelta(seconds=max(nanoseconds, SECOND) // SECOND))

    def next_fire(self, after: datetime) -> datetime | None:
        """Return `after` (sub-second part dropped) plus the interval, in UTC.

        None only when the result would fall beyond the year 9999.
        """
        if after.tzinfo is None:
            raise ValueError("next_fire needs an aware datetime")
        try:
            return after.astimezone(UTC).replace(microsecond=0) + self.interval
        except OverflowError:
            return None


def is_every(expression: str) -> bool:
    """Whether `expression` is an `@every` descriptor (valid or not), not a cron expression.

    A bare `@every` counts, so that it gets the missing-duration message rather than
    "unknown descriptor".
    """
    text = expression.strip()
    return text == EVERY_PREFIX.rstrip() or text.startswith(EVERY_PREFIX)


def parse_every(expression: str) -> RateSchedule:
    """Parse `@every <duration>` (surrounding whitespace ignored) into a RateSchedule."""
    text = expression.strip()
    if text == EVERY_PREFIX.rstrip():
        raise ScheduleError(FIELD, '"@every" needs a duration, such as "@every 5m"')
    if not text.startswith(EVERY_PREFIX):
        shown = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
        raise ScheduleError(
            FIELD,
            f'a rate schedule must be written "@every <duration>", such as "@every 5m"; '
            f'got "{shown}"',
        )
    return RateSchedule.from_nanoseconds(parse_duration(text[len(EVERY_PREFIX) :]))
