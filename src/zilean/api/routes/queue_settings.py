"""How long finished queue jobs are kept.

`settings:queue_jobs` and `/api/settings/queue-jobs` are our names for the spec's
`settings:river_jobs` and `/api/settings/river-jobs` (the queue engine is PgQueuer).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field, StrictInt

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput
from zilean.maintenance.queue_jobs import (
    get_queue_job_retention_days,
    set_queue_job_retention_days,
)

router = APIRouter(tags=["settings"])

Manager = Annotated[Principal, Depends(require(Permission.SETTINGS_QUEUE_JOBS))]


class QueueJobSettings(StrictInput):
    queue_job_retention_days: StrictInt


class QueueJobSettingsView(ResponseModel):
    queue_job_retention_days: int = Field(
        description="Finished queue jobs older than this many days are swept."
    )


@router.get("/api/settings/queue-jobs", operation_id="get_queue_job_settings")
async def get_queue_job_settings(request: Request, _: Manager) -> QueueJobSettingsView:
    """Read how many days finished queue jobs are kept before the daily sweep deletes them."""
    async with request.app.state.engine.begin() as conn:
        days = await get_queue_job_retention_days(conn)
    return QueueJobSettingsView(queue_job_retention_days=days)


@router.put("/api/settings/queue-jobs", operation_id="update_queue_job_settings")
async def put_queue_job_settings(
    body: QueueJobSettings, request: Request, principal: Manager
) -> QueueJobSettingsView:
    """Set the retention for finished queue jobs (1 to 3650 days, default 7).

    Jobs still queued or running are never deleted. The change is audited as
    `settings.queue_jobs`; the next daily sweep applies it.
    """
    async with request.app.state.engine.begin() as conn:
        before, after = await set_queue_job_retention_days(conn, body.queue_job_retention_days)
        if before != after:
            await record(
                conn,
                actor_of(request, principal),
                "settings.queue_jobs",
                "settings",
                "queue_jobs",
                before={"queue_job_retention_days": before},
                after={"queue_job_retention_days": after},
            )
    return QueueJobSettingsView(queue_job_retention_days=after)
