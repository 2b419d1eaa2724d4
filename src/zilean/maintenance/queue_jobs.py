"""Finished queue jobs: how long they are kept (a runtime setting) and the sweep that applies it.

Procrastinate keeps every job row after it finishes; our queue inspector reads them, so
they stay for `queue_job_retention_days` (default 7) and are then deleted, with their
events (Procrastinate's foreign key cascades). Jobs still queued or running are never
touched, whatever their age.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.db.tables import app_settings
from zilean.errors import InvalidInput

QUEUE_JOB_RETENTION_SETTING = "queue_job_retention_days"
DEFAULT_QUEUE_JOB_RETENTION_DAYS = 7
MIN_QUEUE_JOB_RETENTION_DAYS = 1
MAX_QUEUE_JOB_RETENTION_DAYS = 3650
SWEEP_BATCH = 5_000  # finished jobs examined per statement, so no delete runs long

# One batch: take the next finished jobs by id after :after_id, delete those whose last
# event (or, with none, their scheduled time) is older than the cutoff, and report the
# last id examined so the caller continues from there. Procrastinate's own triggers
# cascade the events and unlink periodic-task references.
_SWEEP_FINISHED = text(
    """
    WITH span AS (
        SELECT job.id, job.scheduled_at
        FROM procrastinate_jobs AS job
        WHERE job.id > :after_id
          AND job.status IN ('succeeded', 'failed', 'cancelled', 'aborted')
        ORDER BY job.id
        LIMIT :batch
    ),
    expired AS (
        SELECT span.id
        FROM span
        WHERE coalesce(
                (SELECT max(event.at) FROM procrastinate_events AS event
                 WHERE event.job_id = span.id),
                span.scheduled_at
              ) < coalesce(CAST(:now AS timestamptz), now()) - make_interval(days => :days)
    ),
    removed AS (
        DELETE FROM procrastinate_jobs AS job USING expired
        WHERE job.id = expired.id
        RETURNING job.id
    )
    SELECT (SELECT max(id) FROM span), (SELECT count(*) FROM removed)
    """
)


def _stored_days(value: object) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if MIN_QUEUE_JOB_RETENTION_DAYS <= value <= MAX_QUEUE_JOB_RETENTION_DAYS else None


async def get_queue_job_retention_days(conn: AsyncConnection) -> int:
    """Return the retention in days, storing the default first if none is stored yet.

    A stored value outside the allowed range (written by hand) reads as the default.
    """
    stored = (
        await conn.execute(
            select(app_settings.c.value).where(app_settings.c.key == QUEUE_JOB_RETENTION_SETTING)
        )
    ).first()
    if stored is None:
        await conn.execute(
            insert(app_settings)
            .values(key=QUEUE_JOB_RETENTION_SETTING, value=DEFAULT_QUEUE_JOB_RETENTION_DAYS)
            .on_conflict_do_nothing()
        )
        return DEFAULT_QUEUE_JOB_RETENTION_DAYS
    return _stored_days(stored[0]) or DEFAULT_QUEUE_JOB_RETENTION_DAYS


async def set_queue_job_retention_days(conn: AsyncConnection, days: int) -> tuple[int, int]:
    """Store a new retention; return (before, after). Raise InvalidInput when out of range."""
    if not MIN_QUEUE_JOB_RETENTION_DAYS <= days <= MAX_QUEUE_JOB_RETENTION_DAYS:
        raise InvalidInput(
            f"queue_job_retention_days must be between {MIN_QUEUE_JOB_RETENTION_DAYS} "
            f"and {MAX_QUEUE_JOB_RETENTION_DAYS}"
        )
    before = await get_queue_job_retention_days(conn)
    statement = insert(app_settings).values(key=QUEUE_JOB_RETENTION_SETTING, value=days)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[app_settings.c.key],
            set_={"value": statement.excluded.value, "updated_at": func.now()},
        )
    )
    return before, days


async def sweep_finished_queue_jobs(engine: AsyncEngine, *, now: datetime | None = None) -> int:
    """Delete finished queue jobs older than the retention; return how many were deleted.

    Each batch commits on its own, so a large backlog never holds one long transaction,
    and a sweep interrupted half-way has still removed what it reached.
    """
    async with engine.begin() as conn:
        days = await get_queue_job_retention_days(conn)
    removed = 0
    after_id = 0
    while True:
        async with engine.begin() as conn:
            last_id, count = (
                await conn.execute(
                    _SWEEP_FINISHED,
                    {"after_id": after_id, "batch": SWEEP_BATCH, "now": now, "days": days},
                )
            ).one()
        removed += int(count)
        if last_id is None:
            return removed
        after_id = int(last_id)
