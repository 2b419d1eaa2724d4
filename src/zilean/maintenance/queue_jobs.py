"""Finished queue jobs: how long they are kept (a runtime setting) and the sweep that applies it.

The queue engine deletes a job when it finishes but keeps its log (and holds a job whose
handler raised as failed); the queue inspector reads them, so they stay for
`queue_job_retention_days` (default 7) and are then deleted. Jobs still queued or
running are never touched, whatever their age.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.db.engine import driver_connection
from zilean.db.tables import app_settings
from zilean.errors import InvalidInput
from zilean.queue_engine.statements import sweep_finished_batch

QUEUE_JOB_RETENTION_SETTING = "queue_job_retention_days"
DEFAULT_QUEUE_JOB_RETENTION_DAYS = 7
MIN_QUEUE_JOB_RETENTION_DAYS = 1
MAX_QUEUE_JOB_RETENTION_DAYS = 3650


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
            f"queue_job_retention_days: must be between {MIN_QUEUE_JOB_RETENTION_DAYS} "
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
    """Delete what finished queue jobs left older than the retention; return the rows deleted.

    Each batch commits on its own, so a large backlog never holds one long transaction,
    and a sweep interrupted half-way has still removed what it reached.
    """
    async with engine.begin() as conn:
        days = await get_queue_job_retention_days(conn)
        clock: datetime = now or (await conn.execute(select(func.now()))).scalar_one()
    cutoff = clock - timedelta(days=days)
    removed = 0
    while True:
        async with engine.begin() as conn:
            count = await sweep_finished_batch(await driver_connection(conn), cutoff)
        removed += count
        if count == 0:
            return removed
