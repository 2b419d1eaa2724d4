"""Run now: a manual firing of a job, as `POST /api/jobs/{id}/run` and MCP ask for it."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.errors import Conflict
from zilean.execution.firing import Firing, fire
from zilean.execution.payload import Trigger
from zilean.registry.jobs import load_row
from zilean.schedules import ScheduleType

RUN_IN_PROGRESS = "run in progress: every pool member of this job is already running"


async def run_now(conn: AsyncConnection, actor: Actor, job_id: uuid.UUID) -> Firing:
    """Fire the job at once, for every free pool member, and audit it as `job.run`.

    Scheduler deduplication plays no part: a manual run is its own firing. Raise
    `NotFound` for an unknown job and `Conflict` (nothing queued, nothing audited) when
    the job or its group is disabled, when it is a one-off (a manual run would run it
    early) or webhook job (it would run with an empty payload), or when every member is
    still running under overlap `skip`.
    """
    row = await load_row(conn, job_id, lock=True)
    if not row["enabled"]:
        raise Conflict("the job is disabled")
    if row["group_gated"]:
        raise Conflict("the job's group is disabled")
    if row["schedule_type"] == ScheduleType.ONE_OFF:
        raise Conflict("a one_off job cannot be run manually: it would run before its run_at")
    if row["schedule_type"] == ScheduleType.WEBHOOK:
        raise Conflict("a webhook job cannot be run manually: it would run without a payload")
    firing = await fire(conn, job_id, trigger=Trigger.RUN_NOW)
    if not firing.fired:
        raise Conflict(RUN_IN_PROGRESS)
    await record(
        conn, actor, "job.run", "job", job_id,
        after={"queued": len(firing.queue_job_ids), "busy_members": firing.busy_members},
    )  # fmt: skip
    return firing
