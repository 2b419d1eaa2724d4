"""Reading and feeding Procrastinate's tables directly, for baselines and for timing.

Times come from the database clock on both sides of a comparison: `clock_timestamp()`
just before a batch commits, and the `at` of Procrastinate's events (`deferred`,
`started`, `succeeded`), which its triggers stamp with the writing transaction's `now()`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

_DEFER = text(
    """
    SELECT unnest(procrastinate_defer_jobs_v1(
        ARRAY(
            SELECT ROW(
                :queue, :task_name, 0, NULL, NULL, args::jsonb, NULL
            )::procrastinate_job_to_defer_v1
            FROM jsonb_array_elements_text(CAST(:jobs AS jsonb)) AS job(args)
        )
    ))
    """
)
_CLOCK = text("SELECT clock_timestamp()")
_FINISHED = ("succeeded", "failed", "cancelled", "aborted")


async def clock(conn: AsyncConnection) -> datetime:
    """Return the database's wall clock now (not the transaction's start)."""
    value: datetime = (await conn.execute(_CLOCK)).scalar_one()
    return value


async def defer_batch(
    engine: AsyncEngine,
    *,
    task_name: str,
    queue: str,
    count: int,
    per_statement: int,
    args: dict[str, Any] | None = None,
) -> datetime:
    """Insert `count` queue jobs in one transaction, `per_statement` per insert.

    Return the database clock just before the commit: no worker can see the jobs
    earlier, so it is where an end-to-end measurement starts.
    """
    payload = json.dumps(args or {})
    async with engine.begin() as conn:
        remaining = count
        while remaining > 0:
            size = min(per_statement, remaining)
            await conn.execute(
                _DEFER,
                {"queue": queue, "task_name": task_name, "jobs": json.dumps([payload] * size)},
            )
            remaining -= size
        return await clock(conn)


async def max_job_id(engine: AsyncEngine) -> int:
    """Return the newest queue job id (0 for none): later batches are above it."""
    async with engine.connect() as conn:
        value = (await conn.execute(text("SELECT max(id) FROM procrastinate_jobs"))).scalar()
    return int(value or 0)


async def finished_count(engine: AsyncEngine, queue: str, after_id: int) -> tuple[int, int]:
    """Return (succeeded, finished otherwise) among `queue`'s jobs above `after_id`."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    """
                    SELECT count(*) FILTER (WHERE status = 'succeeded'),
                           count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted'))
                      FROM procrastinate_jobs
                     WHERE queue_name = :queue AND id > :after
                    """
                ),
                {"queue": queue, "after": after_id},
            )
        ).one()
    return int(row[0]), int(row[1])


async def last_event_at(engine: AsyncEngine, queue: str, after_id: int, kind: str) -> datetime:
    """Return the latest `kind` event among `queue`'s jobs above `after_id`."""
    async with engine.connect() as conn:
        value: datetime | None = (
            await conn.execute(
                text(
                    """
                    SELECT max(event.at)
                      FROM procrastinate_events event
                      JOIN procrastinate_jobs job ON job.id = event.job_id
                     WHERE job.queue_name = :queue AND job.id > :after AND event.type = :kind
                    """
                ),
                {"queue": queue, "after": after_id, "kind": kind},
            )
        ).scalar()
    if value is None:
        raise ValueError(f"no {kind} event in queue {queue} after job {after_id}")
    return value


async def delete_finished(engine: AsyncEngine) -> None:
    """Delete finished queue jobs (their events go with them), so runs start alike."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "DELETE FROM procrastinate_jobs"
                " WHERE status = ANY(CAST(:finished AS procrastinate_job_status[]))"
            ),
            {"finished": list(_FINISHED)},
        )


async def worker_count(engine: AsyncEngine) -> int:
    """Return how many Procrastinate workers are registered (alive ones heartbeat)."""
    async with engine.connect() as conn:
        value = (await conn.execute(text("SELECT count(*) FROM procrastinate_workers"))).scalar()
    return int(value or 0)
