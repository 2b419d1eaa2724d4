"""Schedules: when a job fires next, for each `schedule_type`.

Parsing here is the single source of truth shared by API validation, the preview
endpoint and the scheduler: every invalid definition raises ScheduleError (a 400 with
a message naming the field), and every schedule answers `next_fire(after)`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo

from zilean.schedules.cron import CronSchedule, compile_cron, load_zone
from zilean.schedules.errors import ScheduleError
from zilean.schedules.oneoff import OneOffSchedule
from zilean.schedules.rate import RateSchedule, is_every, parse_every
from zilean.schedules.webhook import WebhookSchedule

__all__ = [
    "CronSchedule",
    "OneOffSchedule",
    "RateSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduleType",
    "WebhookSchedule",
    "compile_cron",
    "is_every",
    "load_zone",
    "parse_schedule",
    "upcoming",
]


class ScheduleType(StrEnum):
    """What decides when a job fires."""

    CRON = "cron"  # a 5-field expression or any descriptor, @every included
    RATE = "rate"  # only "@every <duration>" in cron_expression
    ONE_OFF = "one_off"  # once, at run_at; cron_expression is ignored
    WEBHOOK = "webhook"  # only an inbound POST; no schedule fields


class Schedule(Protocol):
    def next_fire(self, after: datetime) -> datetime | None:
        """Return the first fire time strictly after `after`, or None if it never fires."""
        ...


def parse_schedule(
    schedule_type: ScheduleType | str,
    cron_expression: str | None,
    *,
    run_at: datetime | None = None,
    run_at_fired: bool = False,
    timezone: ZoneInfo,
) -> Schedule:
    """Build the schedule a job row describes, or raise ScheduleError naming the bad field.

    `cron` takes a 5-field expression or any descriptor; its `@every <duration>` is the
    same RateSchedule a `rate` job gets, as in robfig, whose one parser takes both.
    `rate` takes only `@every <duration>`; `one_off` needs an aware `run_at` and ignores
    `cron_expression`; `webhook` ignores both. Whether `run_at` lies in the future is
    the caller's check: only it knows what "now" is.
    """
    try:
        kind = ScheduleType(schedule_type)
    except ValueError:
        choices = ", ".join(ScheduleType)
        raise ScheduleError(
            "schedule_type", f'must be one of {choices}; got "{str(schedule_type)[:50]}"'
        ) from None
    if kind is ScheduleType.ONE_OFF:
        if run_at is None:
            raise ScheduleError("run_at", "is required for a one_off schedule")
        if run_at.tzinfo is None:
            raise ScheduleError("run_at", "must include a UTC offset")
        return OneOffSchedule(run_at, run_at_fired)
    if kind is ScheduleType.WEBHOOK:
        return WebhookSchedule()
    if cron_expression is None or not cron_expression.strip():
        example = '"0 9 * * 1-5"' if kind is ScheduleType.CRON else '"@every 5m"'
        raise ScheduleError("cron_expression", f"is required for a {kind} schedule, e.g. {example}")
    if kind is ScheduleType.RATE or is_every(cron_expression):
        return parse_every(cron_expression)
    if timezone.key is None:  # a zone loaded from a file has no key to cache by
        return CronSchedule(cron_expression, timezone)
    return compile_cron(cron_expression, timezone.key)


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """Return the next `count` fire times after `after`, fewer if the schedule runs out.

    A schedule that returns a time not later than the previous one (an overdue one-off
    returns its `run_at` for any `after`) contributes that time once.
    """
    times: list[datetime] = []
    cursor = after
    while len(times) < count:
        fire = schedule.next_fire(cursor)
        if fire is None or (times and fire.timestamp() <= times[-1].timestamp()):
            break
        times.append(fire)
        cursor = fire
    return times
