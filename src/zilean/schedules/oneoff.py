"""One-off schedules: fire once, at `run_at`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class OneOffSchedule:
    """Fire once at `run_at`, unless the firing has already been inserted (`fired`).

    An unfired `run_at` in the past is still returned by `next_fire`, whatever `after`
    is: the job is overdue and should be inserted as soon as possible, not dropped.
    """

    run_at: datetime | None
    fired: bool = False

    def __post_init__(self) -> None:
        if self.run_at is not None and self.run_at.tzinfo is None:
            raise ValueError("run_at must be an aware datetime")

    def next_fire(self, after: datetime) -> datetime | None:
        """Return `run_at` in UTC until the job has fired, then None."""
        if self.fired or self.run_at is None:
            return None
        return self.run_at.astimezone(UTC)
