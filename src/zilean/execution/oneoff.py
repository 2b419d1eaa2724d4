"""One-off jobs: queued once, when saved enabled, for their `run_at`.

The registry calls `queue_one_off` in the transaction that saves the row. The run is a
queue job scheduled at `run_at`, so no scheduler tick is involved; `run_at_fired_at`
marks it queued. The worker completes the one-off when that run ends (`keep` disables
the row, `delete` removes it; see `recording.one_off_completion`).
"""

from __future__ import annotations

import uuid

from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import scheduled_jobs
from zilean.execution.firing import Firing, fire
from zilean.execution.payload import Trigger
from zilean.schedules import ScheduleType


async def queue_one_off(conn: AsyncConnection, job_id: uuid.UUID) -> Firing | None:
    """Queue the job's run when it is an enabled one-off that has not been queued yet.

    Return the firing, or None when there was nothing to queue. Race-safe: the guard is a
    conditional UPDATE of `run_at_fired_at` from NULL, so of two concurrent saves only the
    one that flips it queues a run; the other finds it set and queues nothing.
    """
    jobs = scheduled_jobs
    claimed = await conn.execute(
        update(jobs)
        .where(
            jobs.c.id == job_id,
            jobs.c.enabled,
            jobs.c.schedule_type == str(ScheduleType.ONE_OFF),
            jobs.c.run_at.is_not(None),
            jobs.c.run_at_fired_at.is_(None),
        )
        .values(run_at_fired_at=func.now())
        .returning(jobs.c.run_at)
    )
    run_at = claimed.scalar_one_or_none()
    if run_at is None:
        return None
    return await fire(conn, job_id, trigger=Trigger.ONE_OFF, scheduled_at=run_at)
