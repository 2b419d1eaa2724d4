"""The registry's redacted read for the webhook service: whether a job may be fired by its
webhook, and the digest its token must match. No other column is ever read, so the
public-facing service never holds a job's credentials, not even as ciphertext."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import scheduled_jobs
from zilean.registry.groups import gated_clause
from zilean.schedules import ScheduleType


@dataclass(frozen=True)
class WebhookTarget:
    id: uuid.UUID
    token_digest: bytes | None  # None unless the job is webhook-scheduled
    fireable: bool  # enabled, its group not disabled, and webhook-scheduled


async def find_webhook_target(
    conn: AsyncConnection, job_id: uuid.UUID, *, lock: bool = False
) -> WebhookTarget | None:
    """Read the job `job_id` for its webhook; None when there is no such job.

    `lock` takes the row `FOR UPDATE`, so that a firing sees the job as it stays until
    the transaction ends (a concurrent disable waits for it).
    """
    query = select(
        scheduled_jobs.c.id,
        scheduled_jobs.c.enabled,
        scheduled_jobs.c.schedule_type,
        scheduled_jobs.c.webhook_token_hash,
        gated_clause(scheduled_jobs.c.group_name).label("group_gated"),
    ).where(scheduled_jobs.c.id == job_id)
    if lock:
        query = query.with_for_update(of=scheduled_jobs)
    row = (await conn.execute(query)).mappings().first()
    if row is None:
        return None
    digest = row["webhook_token_hash"]
    webhook = row["schedule_type"] == ScheduleType.WEBHOOK
    return WebhookTarget(
        id=row["id"],
        token_digest=bytes(digest) if digest is not None and webhook else None,
        fireable=webhook and bool(row["enabled"]) and not row["group_gated"],
    )
