"""Putting attempts on the queue, inside the caller's own transaction.

Every producer (the scheduler, run-now, one-offs, webhooks) inserts through
`enqueue_attempts` or `enqueue_many`, on the caller's connection, so a queue insert
commits or rolls back together with whatever else the caller wrote (a fired guard, a
lock, an audit entry), and the queue's insert trigger wakes a listening worker when it
commits. Loop iterations and retries are queued by the attempt's own recording
statement (`recording.py`), with the same payload and priority rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.engine import driver_connection
from zilean.execution.payload import AttemptArgs
from zilean.jobkinds.definitions import queue_for
from zilean.queue_engine.statements import NewQueueJob, enqueue


async def enqueue_attempts(
    conn: AsyncConnection,
    *,
    job_id: uuid.UUID,
    job_type: str,
    members: Iterable[AttemptArgs],
    scheduled_at: datetime | None = None,
) -> list[int]:
    """Insert one queue job per member on the job type's queue; return their queue ids.

    `scheduled_at` None means as soon as possible. One statement, whatever the number
    of pool members.
    """
    members = list(members)
    if any(member.job_id != str(job_id) for member in members):
        raise ValueError("every member must belong to the job being enqueued")
    return await enqueue_many(conn, [(job_type, member) for member in members], scheduled_at)


async def enqueue_many(
    conn: AsyncConnection,
    attempts: Sequence[tuple[str, AttemptArgs]],
    scheduled_at: datetime | None = None,
) -> list[int]:
    """Insert one queue job per (job type, args), for any number of jobs, in one statement."""
    if not attempts:
        return []
    jobs = [
        NewQueueJob(queue_for(job_type), args.to_payload(), args.priority, scheduled_at)
        for job_type, args in attempts
    ]
    return await enqueue(await driver_connection(conn), jobs)
