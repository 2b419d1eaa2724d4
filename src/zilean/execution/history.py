"""Reading the call history (`job_attempts`) as `/api/jobs/{id}/calls` shows it."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import RowMapping, select
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import job_attempts

MAX_CALLS_LIMIT = 100
DEFAULT_CALLS_LIMIT = 20


def call_entry(row: RowMapping) -> dict[str, Any]:
    """Return one attempt as `/api/jobs/{id}/calls` shows it.

    `job_id` is the queue job's id, as the spec names it; the registry id is the path.
    An attempt still running has state `running` and no `finalized_at` yet.
    """
    return {
        "job_id": row["queue_job_id"],
        "state": row["state"],
        "attempt": row["attempt"],
        "max_attempts": row["max_attempts"],
        "trigger": row["trigger"],
        "scheduled_at": row["scheduled_at"],
        "attempted_at": row["attempted_at"],
        "finalized_at": row["finalized_at"],
        "duration_ms": row["duration_ms"],
        "last_error": row["error"],
        "pool_index": row["pool_index"],
        "loop_iteration": row["loop_iteration"],
        "last_call": row["last_call"],
    }


async def recent_calls(
    conn: AsyncConnection, job_id: uuid.UUID, limit: int
) -> list[dict[str, Any]]:
    """Return the job's newest `limit` attempts, newest first."""
    rows = await conn.execute(
        select(job_attempts)
        .where(job_attempts.c.job_id == job_id)
        .order_by(job_attempts.c.id.desc())
        .limit(limit)
    )
    return [call_entry(row) for row in rows.mappings()]
