"""Running a job by hand, and the history of its attempts."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from zilean.api.access import actor_of, require
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import InvalidInput
from zilean.execution.history import DEFAULT_CALLS_LIMIT, MAX_CALLS_LIMIT, recent_calls
from zilean.execution.run_now import run_now
from zilean.registry.jobs import load_row

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.JOBS_WRITE))]
# Read as text so that any bad value gets the same 400 message.
Limit = Annotated[
    str | None,
    Query(description="A positive integer: default 20; values above 100 are capped at 100."),
]


class RunQueued(BaseModel):
    queued: int
    busy_members: list[int]


class LastCall(BaseModel):
    method: str
    url: str
    status_code: int | None
    duration_ms: int
    response_snippet: str


class CallEntry(BaseModel):
    job_id: int | None
    state: str
    attempt: int
    max_attempts: int
    trigger: str
    scheduled_at: datetime | None
    attempted_at: datetime
    finalized_at: datetime | None
    duration_ms: int | None
    last_error: str | None
    pool_index: int
    loop_iteration: int
    last_call: LastCall | None


@router.post("/{job_id}/run", operation_id="run_job")
async def run_job(job_id: uuid.UUID, request: Request, principal: Writer) -> RunQueued:
    """Queue the job now, one attempt per free pool member, whatever its schedule.

    `busy_members` lists the pool indexes skipped because they are still running.
    409 when every member is running, the job or its group is disabled, or the job is a
    `one_off` or `webhook` job; nothing is queued then.
    """
    async with request.app.state.engine.begin() as conn:
        firing = await run_now(conn, actor_of(request, principal), job_id)
    return RunQueued(queued=len(firing.queue_job_ids), busy_members=firing.busy_members)


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_CALLS_LIMIT
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidInput("limit: must be a positive integer")
    return min(int(text), MAX_CALLS_LIMIT)


@router.get("/{job_id}/calls", operation_id="list_job_calls")
async def list_calls(
    job_id: uuid.UUID, request: Request, _: Reader, limit: Limit = None
) -> list[CallEntry]:
    """The job's attempts, newest first: `limit` (default 20) up to 100.

    `job_id` in each entry is the queue job's id, not the registry id. Secret values
    read `REDACTED` in `last_error`, `last_call.url` and `last_call.response_snippet`.
    """
    count = _limit(limit)
    async with request.app.state.engine.connect() as conn:
        await load_row(conn, job_id)  # 404 for an unknown job
        calls: list[dict[str, Any]] = await recent_calls(conn, job_id, count)
    return [CallEntry.model_validate(call) for call in calls]
