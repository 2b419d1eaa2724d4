"""A job's invocation alarms: read with `jobs:read`, changed with `notify:write`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field, StrictBool
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.db.tables import job_alarms, scheduled_jobs
from zilean.errors import NotFound
from zilean.input_models import StrictInput

router = APIRouter(prefix="/api/jobs/{job_id}/alarms", tags=["alarms"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.NOTIFY_WRITE))]
AlarmId = Annotated[int, Path(ge=1, le=2_147_483_647)]
MAX_THRESHOLD = 2_147_483_647
MAX_WINDOW_MINUTES = 1440


class JobNotFound(NotFound):
    """job not found"""


class AlarmNotFound(NotFound):
    """alarm not found"""


class AlarmWrite(StrictInput):
    read_only = frozenset({"id", "job_id", "last_state", "last_changed_at", "created_at"})

    enabled: StrictBool = True
    metric: Literal["total", "failed"] = Field(
        description="`total`: every attempt (loop iterations and retries included); "
        "`failed`: failed attempts only."
    )
    threshold: int = Field(ge=1, le=MAX_THRESHOLD, description="Fires at or above this count.")
    window_minutes: int = Field(
        ge=1, le=MAX_WINDOW_MINUTES, description="One-minute buckets, the current one included."
    )


class AlarmView(ResponseModel):
    id: int
    job_id: uuid.UUID
    enabled: bool
    metric: str
    threshold: int
    window_minutes: int
    last_state: str = Field(description="`ok` or `breached`.")
    last_changed_at: datetime | None = Field(description="Null until the state first changes.")
    created_at: datetime


_COLUMNS = [job_alarms.c[name] for name in AlarmView.model_fields]


async def _job_exists(conn: AsyncConnection, job_id: uuid.UUID) -> None:
    found = await conn.execute(select(scheduled_jobs.c.id).where(scheduled_jobs.c.id == job_id))
    if found.first() is None:
        raise JobNotFound()


async def _alarm(conn: AsyncConnection, job_id: uuid.UUID, alarm_id: int) -> dict[str, Any]:
    row = (
        (
            await conn.execute(
                select(*_COLUMNS).where(job_alarms.c.id == alarm_id, job_alarms.c.job_id == job_id)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise AlarmNotFound()
    return dict(row)


@router.get("", operation_id="list_job_alarms")
async def list_job_alarms(job_id: uuid.UUID, request: Request, _: Reader) -> list[AlarmView]:
    """The job's alarms, oldest first (an empty array when it has none)."""
    async with request.app.state.engine.connect() as conn:
        await _job_exists(conn, job_id)
        rows = await conn.execute(
            select(*_COLUMNS).where(job_alarms.c.job_id == job_id).order_by(job_alarms.c.id)
        )
        return [AlarmView.model_validate(dict(row)) for row in rows.mappings()]


@router.post("", status_code=201, operation_id="create_job_alarm")
async def create_job_alarm(
    job_id: uuid.UUID, body: AlarmWrite, request: Request, principal: Writer
) -> AlarmView:
    """Add an alarm, starting `ok`; audited as `job_alarm.create`."""
    async with request.app.state.engine.begin() as conn:
        await _job_exists(conn, job_id)
        alarm_id = (
            await conn.execute(
                insert(job_alarms)
                .values(job_id=job_id, **body.model_dump())
                .returning(job_alarms.c.id)
            )
        ).scalar_one()
        created = await _alarm(conn, job_id, alarm_id)
        await record(
            conn, actor_of(request, principal), "job_alarm.create", "job_alarm", alarm_id,
            after=created,
        )  # fmt: skip
    return AlarmView.model_validate(created)


@router.put("/{alarm_id}", operation_id="update_job_alarm")
async def update_job_alarm(
    job_id: uuid.UUID, alarm_id: AlarmId, body: AlarmWrite, request: Request, principal: Writer
) -> AlarmView:
    """Replace an alarm's settings; its state is kept until the next evaluation."""
    async with request.app.state.engine.begin() as conn:
        await _job_exists(conn, job_id)
        before = await _alarm(conn, job_id, alarm_id)
        await conn.execute(
            update(job_alarms).where(job_alarms.c.id == alarm_id).values(**body.model_dump())
        )
        after = await _alarm(conn, job_id, alarm_id)
        await record(
            conn, actor_of(request, principal), "job_alarm.update", "job_alarm", alarm_id,
            before=before, after=after,
        )  # fmt: skip
    return AlarmView.model_validate(after)


@router.delete("/{alarm_id}", status_code=204, operation_id="delete_job_alarm")
async def delete_job_alarm(
    job_id: uuid.UUID, alarm_id: AlarmId, request: Request, principal: Writer
) -> Response:
    """Delete an alarm; audited as `job_alarm.delete`."""
    async with request.app.state.engine.begin() as conn:
        await _job_exists(conn, job_id)
        before = await _alarm(conn, job_id, alarm_id)
        await conn.execute(delete(job_alarms).where(job_alarms.c.id == alarm_id))
        await record(
            conn, actor_of(request, principal), "job_alarm.delete", "job_alarm", alarm_id,
            before=before,
        )  # fmt: skip
    return Response(status_code=204)
