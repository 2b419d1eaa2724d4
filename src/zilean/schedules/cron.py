"""Cron schedules: when a parsed expression next fires in a given time zone.

Matching follows robfig/cron v3 (see `cron_syntax.py`). Daylight saving time does not:
robfig runs a fixed-time job twice in the repeated fall-back hour and skips it when its
time falls in the spring-forward gap. We follow Debian cron (as the `cronsim` package
does), so a daily job runs once a day whatever the clocks do:

* A *fixed-time* job (neither the minute nor the hour field is a wildcard such as `*`,
  `?` or `*/n`) fires once in the repeated hour, at the first occurrence; when its time
  falls in a gap it fires once, at the first real instant after the gap (02:30 on the
  spring-forward day in America/New_York fires at 03:00 EDT).
* Any other job fires at every real occurrence of a matching wall-clock time: both
  passes of a repeated hour, none in a gap (`0 * * * *` runs at 01:00 EDT, then 01:00 EST).

How it stays fast: fields are bitmasks, whole months and days are skipped with masks, and
within a day the next matching minute is a table lookup. The zone is consulted per day:
four `utcoffset` calls tell whether the day's offset changes; only on such a day (two a
year) is the exact change instant found, by bisection. Every tzdata zone since 1900 has
nearly four days or more between offset changes, so one change per day is all we handle.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from zilean.schedules.cron_syntax import CronFields, parse_cron
from zilean.schedules.errors import ScheduleError

DAY = 86_400  # seconds
MINUTES_PER_DAY = 1_440
# The longest wait between fires of an expression that can fire is 8 years: 29 February
# across 2100, which is not a leap year. Searching ten keeps a margin; past it, None.
SEARCH_DAYS = 3_660  # days
COMPILE_CACHE_SIZE = 1_024  # distinct (expression, zone) pairs kept parsed
_DAY_CACHE_SIZE = 64  # days whose UTC offsets one schedule remembers

_EPOCH = date(1970, 1, 1).toordinal()
# Stay a few days inside datetime's range so offsets and bisection never overflow it.
_FIRST_DAY = date(1, 1, 4).toordinal()
_LAST_DAY = date(9999, 12, 28).toordinal()
_FIRST_INSTANT = (_FIRST_DAY - _EPOCH) * DAY
_LAST_INSTANT = (_LAST_DAY - _EPOCH) * DAY
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _seconds(offset: timedelta | None) -> int:
    return 0 if offset is None else offset.days * DAY + offset.seconds


def _month_length(year: int, month: int) -> int:
    if month == 2 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return 28
    return _LONGEST_MONTH[month - 1]


def _next_set_bit(bits: int, start: int, stop: int) -> list[int]:
    """Table: entry i is the lowest set bit of `bits` at or above i (-1 if none)."""
    table = [-1] * (stop + 1)
    following = -1
    for value in range(stop - 1, start - 1, -1):
        if bits >> value & 1:
            following = value
        table[value] = following
    return table


class _DayOffsets:
    """The UTC offsets (seconds) in force on one local date, and the instant they change."""

    __slots__ = ("after", "before", "change")

    def __init__(self, before: int, after: int, change: int | None) -> None:
        self.before = before
        self.after = after
        self.change = change  # UTC seconds of the first instant on the new offset


class CronSchedule:
    """A cron expression evaluated in one time zone.

    Construction parses the expression (raising ScheduleError) and precomputes lookup
    tables, so build it once per (expression, zone): `compile_cron` caches it. Instances
    are safe to share between threads: the only mutable state is a cache of per-day
    offsets whose entries are deterministic, so a race costs a recomputation at most.
    """

    __slots__ = (
        "_and_days",
        "_can_fire",
        "_day_masks",
        "_days",
        "_dom",
        "_first_minute",
        "_fixed_offset",
        "_hours",
        "_months",
        "_next_hour",
        "_next_minute",
        "_wall_clock",
        "expression",
        "fields",
        "zone",
    )

    def __init__(self, expression: str, zone: ZoneInfo | timezone) -> None:
        self.expression = expression
        self.zone = zone
        self.fields: CronFields = parse_cron(expression)
        fields = self.fields
        # robfig's day rule: a starred day field defers to the other one (AND of the two,
        # where the starred one matches everything); two restricted fields are ORed.
        self._and_days = bool({"day-of-month", "day-of-week"} & fields.starred)
        self._wall_clock = not ({"minute", "hour"} & fields.wildcards)
        self._months = fields.month
        self._hours = fields.hour
        self._dom = fields.day_of_month
        self._next_minute = _next_set_bit(fields.minute, 0, 60)
        self._next_hour = _next_set_bit(fields.hour, 0, 24)
        self._first_minute = self._next_minute[0]
        # Entry w: the days 1..31 (as bits) whose weekday matches when day 1 has weekday w.
        dow = fields.day_of_week
        self._day_masks = tuple(
            sum(1 << day for day in range(1, 32) if dow >> ((first + day - 1) % 7) & 1)
            for first in range(7)
        )
        # A leap year has every day any month can have, and every month has every weekday.
        self._can_fire = any(
            self._month_mask(2000, month, date(2000, month, 1).toordinal())
            for month in range(1, 13)
        )
        self._fixed_offset = _seconds(zone.utcoffset(None)) if isinstance(zone, timezone) else None
        self._days: dict[int, _DayOffsets] = {}

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, {self.zone!s})"

    @property
    def can_fire(self) -> bool:
        """Whether any date matches (false for `0 0 30 2 *`, which robfig also accepts)."""
        return self._can_fire

    def next_fire(self, after: datetime) -> datetime | None:
        """Return the first fire time strictly after `after` (aware), as an aware UTC datetime.

        None when the schedule never fires, or not within the next 10 years.
        """
        if after.tzinfo is None:
            raise ValueError("next_fire needs an aware datetime")
        if not self._can_fire:
            return None
        # Fire times are whole minutes of wall time, so "strictly after" at one-second
        # precision is "strictly after the whole second" (robfig rounds up the same way).
        start = math.floor(after.timestamp())
        if not _FIRST_INSTANT < start < _LAST_INSTANT:
            return None
        day = (start + self._offset_at(start)) // DAY + _EPOCH
        if self._offsets(day).change is not None:
            # A fall-back across midnight can bring back wall times of the previous date.
            day -= 1
        limit = min(day + SEARCH_DAYS, _LAST_DAY)
        best: int | None = None
        best_day = day
        while (found_day := self._next_day(day, limit)) is not None:
            day = found_day
            if best is not None and day > best_day + 1:
                break
            offsets = self._offsets(day)
            fire = self._first_in_day(day, offsets, start)
            if fire is not None and (best is None or fire < best):
                best, best_day = fire, day
            # Only around an offset change can the next date hold an earlier instant.
            if best is not None and offsets.change is None:
                break
            day += 1
        return None if best is None else datetime.fromtimestamp(best, UTC)

    # Days

    def _month_mask(self, year: int, month: int, month_start: int) -> int:
        """Return a month's matching days as bits 1..31, given the ordinal of its first day."""
        if not self._months >> month & 1:
            return 0
        valid = (2 << _month_length(year, month)) - 2
        dom = self._dom & valid
        dow = self._day_masks[month_start % 7] & valid  # ordinal % 7 is the weekday, 0 Sunday
        return dom & dow if self._and_days else dom | dow

    def _next_day(self, ordinal: int, limit: int) -> int | None:
        """Return the first matching date (as an ordinal) at or after `ordinal`, up to `limit`."""
        if ordinal > limit:
            return None
        current = date.fromordinal(ordinal)
        year, month = current.year, current.month
        month_start = ordinal - current.day + 1
        skip_below = current.day
        while month_start <= limit:
            mask = self._month_mask(year, month, month_start) >> skip_below << skip_below
            if mask:
                found = month_start + (mask & -mask).bit_length() - 2
                return found if found <= limit else None
            month_start += _month_length(year, month)
            month, skip_below = month + 1, 0
            if month == 13:
                year, month = year + 1, 1
        return None

    def _first_minute_from(self, minute: int) -> int | None:
        """Return the first matching minute of the day at or after `minute` (0-1439)."""
        if minute >= MINUTES_PER_DAY:
            return None
        hour, within = divmod(minute, 60)
        if self._hours >> hour & 1 and self._next_minute[within] >= 0:
            return hour * 60 + self._next_minute[within]
        next_hour = self._next_hour[hour + 1]
        return None if next_hour < 0 else next_hour * 60 + self._first_minute

    def _first_wall(self, day_start: int, low: int, high: int) -> int | None:
        """Return the first matching wall time in [low, high) on the day, in wall seconds."""
        low = max(low, day_start)
        high = min(high, day_start + DAY)
        if low >= high:
            return None
        minute = self._first_minute_from(-((day_start - low) // 60))
        if minute is None:
            return None
        wall = day_start + minute * 60
        return wall if wall < high else None

    def _first_in_day(self, ordinal: int, offsets: _DayOffsets, after: int) -> int | None:
        """Return the earliest fire instant (UTC seconds) after `after` from this date's walls."""
        day_start = (ordinal - _EPOCH) * DAY
        before = offsets.before
        change = offsets.change
        if change is None:
            wall = self._first_wall(day_start, after + before + 1, day_start + DAY)
            return None if wall is None else wall - before
        # Wall times before the change, on the old offset.
        wall = self._first_wall(day_start, after + before + 1, change + before)
        if wall is not None:
            return wall - before
        new = offsets.after
        if self._wall_clock:
            # Walls from the old offset's clock at the change onwards. Those still to come
            # in a repeated stretch already fired on the first pass; those in a gap fire
            # at the change itself, the first instant after it.
            low = change + before if change > after else max(change + before, after + new + 1)
            wall = self._first_wall(day_start, low, day_start + DAY)
            return None if wall is None else max(change, wall - new)
        # Every real instant: walls from the new clock at the change (repeats included).
        wall = self._first_wall(day_start, max(change + new, after + new + 1), day_start + DAY)
        return None if wall is None else wall - new

    # Time zone

    def _offset_at(self, instant: int) -> int:
        if self._fixed_offset is not None:
            return self._fixed_offset
        return _seconds(datetime.fromtimestamp(instant, self.zone).utcoffset())

    def _offsets(self, ordinal: int) -> _DayOffsets:
        cached = self._days.get(ordinal)
        if cached is not None:
            return cached
        if self._fixed_offset is not None:
            offsets = _DayOffsets(self._fixed_offset, self._fixed_offset, None)
        else:
            offsets = self._find_offsets(ordinal)
        if len(self._days) >= _DAY_CACHE_SIZE:
            self._days.clear()
        self._days[ordinal] = offsets
        return offsets

    def _find_offsets(self, ordinal: int) -> _DayOffsets:
        day = date.fromordinal(ordinal)
        year, month, dom = day.year, day.month, day.day
        utcoffset = self.zone.utcoffset
        # fold=0 gives the earlier offset at an ambiguous or skipped wall time, fold=1 the
        # later one, so these four agree only when the whole day is on one offset.
        first = _seconds(utcoffset(datetime(year, month, dom, fold=0)))
        last = _seconds(utcoffset(datetime(year, month, dom, 23, 59, fold=1)))
        if (
            first
            == last
            == _seconds(utcoffset(datetime(year, month, dom, fold=1)))
            == _seconds(utcoffset(datetime(year, month, dom, 23, 59, fold=0)))
        ):
            return _DayOffsets(first, first, None)
        # The change instant lies where this date's walls meet it; a minute of margin.
        day_start = (ordinal - _EPOCH) * DAY
        low = day_start - max(first, last) - 60  # still on the old offset
        high = day_start + DAY - min(first, last) + 60  # already on the new one
        while high - low > 1:
            middle = (low + high) // 2
            if self._offset_at(middle) == first:
                low = middle
            else:
                high = middle
        return _DayOffsets(first, self._offset_at(high), high)


def load_zone(key: str) -> ZoneInfo:
    """Return the IANA zone `key`, or raise ScheduleError naming the `timezone` field."""
    try:
        return ZoneInfo(key)
    except (KeyError, ValueError, OSError) as exc:
        raise ScheduleError("timezone", f'unknown time zone "{key[:100]}"') from exc


@lru_cache(maxsize=COMPILE_CACHE_SIZE)
def compile_cron(expression: str, zone_key: str) -> CronSchedule:
    """Return the schedule for `expression` in zone `zone_key`, parsed once per pair.

    Failures are not cached, so an invalid expression is re-checked on each call.
    """
    return CronSchedule(expression, load_zone(zone_key))
