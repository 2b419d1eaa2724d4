"""Execution history retention: attempt rows, per-minute call stats, job events and firing
guards."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import job_attempts, job_call_stats, job_events, job_firings

ATTEMPT_RETENTION = timedelta(days=30)
CALL_STATS_RETENTION = timedelta(days=30)
# A firing guard only has to outlive the window in which a second scheduler could try
# the same instant (a few seconds, or the scheduler's catch-up on start): a day is ample.
FIRING_GUARD_RETENTION = timedelta(days=1)


@dataclass(frozen=True)
class HistorySwept:
    attempts: int
    call_stats: int
    firings: int
    events: int = 0  # capped loops and skipped firings, kept as long as the attempts


async def sweep_history(engine: AsyncEngine, *, now: datetime | None = None) -> HistorySwept:
    """Delete attempt rows and stats buckets older than 30 days and guards older than a day.

    `now` defaults to the database clock.
    """
    clock: Any = func.now() if now is None else now
    async with engine.begin() as conn:
        attempts = await conn.execute(
            delete(job_attempts).where(job_attempts.c.attempted_at < clock - ATTEMPT_RETENTION)
        )
        stats = await conn.execute(
            delete(job_call_stats).where(
                job_call_stats.c.bucket_start < clock - CALL_STATS_RETENTION
            )
        )
        events = await conn.execute(
            delete(job_events).where(job_events.c.occurred_at < clock - ATTEMPT_RETENTION)
        )
        firings = await conn.execute(
            delete(job_firings).where(job_firings.c.scheduled_for < clock - FIRING_GUARD_RETENTION)
        )
    return HistorySwept(
        attempts=attempts.rowcount,
        call_stats=stats.rowcount,
        firings=firings.rowcount,
        events=events.rowcount,
    )
