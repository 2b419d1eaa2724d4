"""Putting attempts on the queue, inside the caller's own transaction.

Every producer (the scheduler, run-now, one-offs, loop continuations, webhooks) inserts
through `enqueue_attempts`, which calls Procrastinate's own defer function on the
caller's connection. So a queue insert commits or rolls back together with whatever
else the caller wrote (a fired guard, a lock, an audit entry), and Procrastinate's
insert trigger still wakes a listening worker at once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.execution.queues import queue_for

ATTEMPT_TASK = "zilean.attempt"


class Trigger(StrEnum):
    """Why a run started; carried forward through its loop iterations and retries."""

    SCHEDULE = "schedule"  # a cron or rate firing
    ONE_OFF = "one_off"  # a one-off reaching run_at
    RUN_NOW = "run_now"  # POST /api/jobs/{id}/run
    WEBHOOK = "webhook"  # POST /api/webhooks/{id}/{token}


@dataclass(frozen=True)
class AttemptArgs:
    """The queue job's payload: which job and member, never the job's settings.

    The worker re-reads the row on every attempt, so edits reach the next attempt. Only
    what must survive edits is copied here: the attempt budget fixed at insert, and the
    trigger with a webhook run's payload, metadata and hop count. A retry is a fresh
    queue job carrying `attempt + 1`; Procrastinate never retries an attempt itself.
    """

    job_id: str
    loop_iteration: int
    pool_index: int
    max_attempts: int
    attempt: int = 1  # 1-based; our own retries re-insert with the next number
    trigger: str = Trigger.SCHEDULE
    webhook_hops: int | None = None
    webhook_payload: Any = None
    webhook_metadata: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> AttemptArgs:
        known = {name: args[name] for name in cls.__dataclass_fields__ if name in args}
        return cls(**known)


_DEFER = text(
    """
    SELECT unnest(procrastinate_defer_jobs_v1(
        ARRAY(
            SELECT ROW(
                queue_name, :task_name, 0, NULL, NULL, args::jsonb, scheduled_at
            )::procrastinate_job_to_defer_v1
            FROM jsonb_to_recordset(CAST(:jobs AS jsonb))
                AS job(queue_name text, args text, scheduled_at timestamptz)
        )
    ))
    """
)


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
    due = None if scheduled_at is None else scheduled_at.isoformat()
    jobs = [
        {"queue_name": queue_for(job_type), "args": args.to_json(), "scheduled_at": due}
        for job_type, args in attempts
    ]
    result = await conn.execute(_DEFER, {"task_name": ATTEMPT_TASK, "jobs": json.dumps(jobs)})
    return [int(queue_job_id) for queue_job_id in result.scalars()]
