"""One firing of a job: take the overlap locks, then queue one attempt per pool member.

Every producer (scheduler, run-now, one-off, webhook) fires through `fire`, inside its
own transaction, so the locks, the queue jobs and anything else the producer writes
commit together. Locks live in `running_since_by_pool` (pool index -> when the member
last started an attempt); a lock older than `LOCK_STALE` is taken over.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import scheduled_jobs
from zilean.execution.enqueue import enqueue_many
from zilean.execution.payload import AttemptArgs, Trigger
from zilean.execution.retry import coalesced_budget

log = structlog.get_logger(__name__)

LOCK_STALE = timedelta(hours=1)


@dataclass(frozen=True)
class Firing:
    """What one firing did: the queue jobs it inserted and the pool members it skipped."""

    queue_job_ids: list[int] = field(default_factory=list)
    busy_members: list[int] = field(default_factory=list)

    @property
    def fired(self) -> bool:
        return bool(self.queue_job_ids)


def free_members(
    locks: Mapping[str, Any], pool_count: int, now: datetime
) -> tuple[list[int], list[int]]:
    """Split pool members into (free, busy) given the stored locks."""
    free: list[int] = []
    busy: list[int] = []
    for index in range(pool_count):
        started = locks.get(str(index))
        held = isinstance(started, str) and now - datetime.fromisoformat(started) < LOCK_STALE
        (busy if held else free).append(index)
    return free, busy


# The row columns a firing reads (locked FOR NO KEY UPDATE by whoever reads them).
FIRING_COLUMNS = (
    scheduled_jobs.c.id,
    scheduled_jobs.c.job_type,
    scheduled_jobs.c.pool_count,
    scheduled_jobs.c.overlap_policy,
    scheduled_jobs.c.running_since_by_pool,
    scheduled_jobs.c.retry_enabled,
    scheduled_jobs.c.retry_max_attempts,
)


@dataclass(frozen=True)
class FiringPlan:
    """What firing one job will write: the locks it takes and the attempts it queues."""

    job_id: uuid.UUID
    job_type: str
    taken: dict[str, str]  # pool index -> lock time, for overlap `skip`
    members: list[AttemptArgs]
    busy: list[int]


def plan_firing(
    row: Mapping[str, Any],
    now: datetime,
    *,
    trigger: Trigger,
    webhook_hops: int | None = None,
    webhook_payload: Any = None,
    webhook_metadata: dict[str, Any] | None = None,
) -> FiringPlan:
    """Decide, from a locked row (`FIRING_COLUMNS`), which members fire and lock."""
    job_id = row["id"]
    pool_count = max(1, int(row["pool_count"]))
    free: list[int] = list(range(pool_count))
    busy: list[int] = []
    taken: dict[str, str] = {}
    if row["overlap_policy"] != "allow":
        free, busy = free_members(row["running_since_by_pool"] or {}, pool_count, now)
        taken = {str(index): now.isoformat() for index in free}
    budget = coalesced_budget(row["retry_max_attempts"], row["retry_enabled"])
    members = [
        AttemptArgs(
            job_id=str(job_id),
            loop_iteration=0,
            pool_index=index,
            max_attempts=budget,
            trigger=trigger,
            webhook_hops=webhook_hops,
            webhook_payload=webhook_payload,
            webhook_metadata=webhook_metadata,
            fired_at=now.isoformat(),
            fired_members=len(free),
        )
        for index in free
    ]
    return FiringPlan(job_id, str(row["job_type"]), taken, members, busy)


_TAKE_LOCKS = text(
    """
    UPDATE scheduled_jobs AS job
    SET running_since_by_pool = job.running_since_by_pool || taken.locks
    FROM jsonb_to_recordset(CAST(:taken AS jsonb)) AS taken(id uuid, locks jsonb)
    WHERE job.id = taken.id
    """
)


# A skip streak opens once (`job_notify_state.skipping`; core's notifier closes it when
# the job's members are free again): only its first skip becomes an event.
_SKIP_EVENTS = text(
    """
    WITH skipped AS (
        SELECT * FROM jsonb_to_recordset(CAST(:skipped AS jsonb))
                   AS s(job_id uuid, skipped_members jsonb)
    ),
    opened AS (
        INSERT INTO job_notify_state AS state (job_id, skipping)
        SELECT job_id, true FROM skipped
        ON CONFLICT (job_id) DO UPDATE SET skipping = true WHERE NOT state.skipping
        RETURNING job_id
    ),
    kept AS (
        INSERT INTO job_events (job_id, kind, detail)
        SELECT skipped.job_id, 'firing_skipped',
               jsonb_build_object('skipped_members', skipped.skipped_members)
          FROM skipped JOIN opened USING (job_id)
    )
    INSERT INTO notify_events (job_id, kind, detail)
    SELECT skipped.job_id, 'firing_skipped',
           jsonb_build_object('skipped_members', skipped.skipped_members)
      FROM skipped JOIN opened USING (job_id)
    """
)


async def apply_firings(
    conn: AsyncConnection, plans: Sequence[FiringPlan], *, scheduled_at: datetime | None = None
) -> list[int]:
    """Write the plans' locks (one statement) and queue their attempts (one statement).

    Each plan that skips busy members logs them (at info, once per firing) and, once
    per run of consecutive skips, leaves a `firing_skipped` event on the job.
    """
    skipped = []
    for plan in plans:
        if plan.busy:
            log.info(
                "pool members still running; skipped for this firing",
                action="firing.members_skipped",
                job_id=str(plan.job_id),
                skipped=plan.busy,
                fired=[member.pool_index for member in plan.members],
            )
            skipped.append({"job_id": str(plan.job_id), "skipped_members": plan.busy})
    if skipped:
        await conn.execute(_SKIP_EVENTS, {"skipped": json.dumps(skipped)})
    taken = [{"id": str(plan.job_id), "locks": plan.taken} for plan in plans if plan.taken]
    if taken:
        await conn.execute(_TAKE_LOCKS, {"taken": json.dumps(taken)})
    attempts = [(plan.job_type, member) for plan in plans for member in plan.members]
    return await enqueue_many(conn, attempts, scheduled_at)


async def fire(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    trigger: Trigger,
    scheduled_at: datetime | None = None,
    webhook_hops: int | None = None,
    webhook_payload: Any = None,
    webhook_metadata: dict[str, Any] | None = None,
) -> Firing:
    """Fire `job_id` once: lock the free members (overlap `skip`) and queue them.

    The row is locked (`FOR NO KEY UPDATE`) for the rest of the caller's transaction, so
    two concurrent firings of one job see each other's locks; the history rows an attempt
    of the job inserts meanwhile (their foreign keys only share the key) do not wait for
    it. A missing job fires nothing.
    """
    row = (
        (
            await conn.execute(
                select(*FIRING_COLUMNS, func.now().label("now"))
                .where(scheduled_jobs.c.id == job_id)
                .with_for_update(key_share=True)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return Firing()
    plan = plan_firing(
        dict(row),
        row["now"],
        trigger=trigger,
        webhook_hops=webhook_hops,
        webhook_payload=webhook_payload,
        webhook_metadata=webhook_metadata,
    )
    ids = await apply_firings(conn, [plan], scheduled_at=scheduled_at)
    return Firing(queue_job_ids=ids, busy_members=plan.busy)
