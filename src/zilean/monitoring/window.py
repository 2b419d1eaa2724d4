"""The display window every series route shares: `since`, `buckets` and their geometry.

Rows are stored in one-minute buckets (call stats) or once a minute (samples); a read
folds them into `slot_count` display slots of `bucket_width_seconds`, aligned on the
Unix epoch so that two readers with different clocks draw the same boundaries. The
window ends with the slot that holds the database's current time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Float, cast, func, literal

from zilean.errors import InvalidInput
from zilean.schedules.errors import ScheduleError
from zilean.schedules.rate import SECOND, parse_duration

DEFAULT_SINCE_SECONDS = 24 * 3600
MAX_SINCE_SECONDS = 720 * 3600  # the retention of what the windows read
DEFAULT_BUCKETS = 40
MAX_BUCKETS = 500
MIN_WIDTH_SECONDS = 60  # nothing finer is stored
SINCE_MESSAGE = "since: must be a positive duration, e.g. 24h"
BUCKETS_MESSAGE = "buckets: must be a positive integer"


@dataclass(frozen=True)
class Window:
    """`slot_count` slots of `bucket_width_seconds`, the last one holding now."""

    bucket_width_seconds: int
    slot_count: int

    @classmethod
    def from_query(cls, since: str | None, buckets: str | None) -> Window:
        """Parse the two query parameters; out-of-range values are clamped silently."""
        return cls.covering(_since_seconds(since), _bucket_count(buckets))

    @classmethod
    def covering(cls, since_seconds: float, buckets: int) -> Window:
        """The narrowest whole-minute width that fits `since_seconds` into `buckets` slots."""
        minutes = max(1, math.ceil(since_seconds / buckets / MIN_WIDTH_SECONDS))
        width = minutes * MIN_WIDTH_SECONDS
        return cls(bucket_width_seconds=width, slot_count=max(1, math.ceil(since_seconds / width)))

    def start(self) -> ColumnElement[Any]:
        """SQL: the first slot's start, from the database clock that stamped the rows."""
        width = self.bucket_width_seconds
        now_slot = func.floor(cast(func.extract("epoch", func.now()), Float) / width)
        return func.to_timestamp((now_slot - (self.slot_count - 1)) * width)

    def slot_of(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """SQL: the start of the display slot a stored timestamp falls in."""
        width = literal(self.bucket_width_seconds, Float)
        return func.to_timestamp(
            func.floor(cast(func.extract("epoch", column), Float) / width) * width
        )

    def geometry(self, window_start: Any) -> dict[str, Any]:
        return {
            "window_start": window_start,
            "bucket_width_seconds": self.bucket_width_seconds,
            "slot_count": self.slot_count,
        }


def utc_text(moment: datetime) -> str:
    """A timestamp as the API writes it: `2026-11-29T12:00:00Z`."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _since_seconds(raw: str | None) -> float:
    if raw is None or not raw.strip():
        return DEFAULT_SINCE_SECONDS
    try:
        nanoseconds = parse_duration(raw.strip())
    except ScheduleError:
        raise InvalidInput(SINCE_MESSAGE) from None
    if nanoseconds <= 0:
        raise InvalidInput(SINCE_MESSAGE)
    return min(nanoseconds / SECOND, MAX_SINCE_SECONDS)


def _bucket_count(raw: str | None) -> int:
    if raw is None or not raw.strip():
        return DEFAULT_BUCKETS
    text = raw.strip()
    if not (text.isascii() and text.isdigit()):
        raise InvalidInput(BUCKETS_MESSAGE)
    # Anything longer than the cap's digits is over the cap; int() never sees a huge input.
    if len(text.lstrip("0")) > len(str(MAX_BUCKETS)):
        return MAX_BUCKETS
    count = int(text)
    if count < 1:
        raise InvalidInput(BUCKETS_MESSAGE)
    return min(count, MAX_BUCKETS)
