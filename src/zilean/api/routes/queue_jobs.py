"""The queue inspector's routes: queue jobs by queue and state, one job, and the three
actions on it. All need jobs:write, since the inspector can change what runs; each action
is audited. Semantics are in `execution/queue_inspector.py` and docs/queue.md."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import InvalidInput
from zilean.execution import queue_inspector as service
from zilean.jobkinds.definitions import JOB_KINDS
from zilean.queue_engine.statements import QueueJobState

router = APIRouter(prefix="/api/queue", tags=["queue"])
Writer = Annotated[Principal, Depends(require(Permission.JOBS_WRITE))]

PAGE_SIZE = 50
MAX_ID = 2**63 - 1  # a bigint
QueueJobId = Annotated[int, Path(ge=1, le=MAX_ID)]
MAX_PAGE = 200


class QueueAttempt(ResponseModel):
    """The attempt this queue job started, as the call history holds it."""

    state: str = Field(description="running, succeeded, retrying, failed or cancelled.")
    attempt: int
    pool_index: int
    loop_iteration: int
    attempted_at: datetime
    finalized_at: datetime | None
    duration_ms: int | None
    error: str | None = Field(description="Redacted, as the call history shows it.")


class QueueJobSummary(ResponseModel):
    id: int
    queue: str
    state: QueueJobState = Field(description="Where the engine has it.")
    engine_status: str = Field(description="PgQueuer's own word for it.")
    priority: int
    created_at: datetime
    updated_at: datetime
    due_at: datetime | None = Field(description="When it may run; null once it has ended.")
    deliveries: int | None = Field(description="Times the engine handed it back; null once ended.")
    job_id: uuid.UUID | None = Field(description="The registry job it belongs to.")
    job_name: str | None = Field(description="Null when that job is deleted or unreadable.")
    attempt: QueueAttempt | None = Field(description="Null until the attempt has started.")


class QueueCount(ResponseModel):
    queue: str
    state: QueueJobState
    count: int


class QueueJobPage(ResponseModel):
    queue_jobs: list[QueueJobSummary] = Field(description="Newest first.")
    next_before: int | None = Field(
        description="Pass back as `before` for the next page; null on the last one."
    )
    counts: list[QueueCount] = Field(description="Every queue job per queue and state.")
    queues: list[str] = Field(description="The queues this version routes jobs to.")


class QueueTransition(ResponseModel):
    at: datetime
    state: QueueJobState
    error: str | None = Field(description="The handler's exception type and first line.")


class QueueJobDetail(QueueJobSummary):
    payload: dict[str, Any] | None = Field(
        description="The attempt's arguments (never credentials); null once the engine has "
        "deleted the row. `webhook_payload` only for callers with jobs:read."
    )
    transitions: list[QueueTransition] = Field(description="Oldest first.")


class QueueRetried(ResponseModel):
    queue_job_id: int = Field(description="The new queue job the retry queued.")


def _state(value: str | None) -> QueueJobState | None:
    if not value:
        return None
    try:
        return QueueJobState(value)
    except ValueError:
        choices = ", ".join(str(state) for state in QueueJobState)
        raise InvalidInput(f"state: must be one of {choices}") from None


def _summary(item: service.Inspected) -> dict[str, Any]:
    job = item.queue_job
    return {
        "id": job.id,
        "queue": job.queue,
        "state": job.state,
        "engine_status": job.engine_status,
        "priority": job.priority,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "due_at": job.due_at if job.state.unfinished else None,
        "deliveries": job.deliveries,
        "job_id": item.job_id if item.job_id and service._is_uuid(item.job_id) else None,
        "job_name": item.job_name,
        "attempt": None
        if item.attempt is None
        else {key: item.attempt[key] for key in QueueAttempt.model_fields},
    }


@router.get("/jobs", operation_id="list_queue_jobs")
async def list_queue_jobs(
    request: Request,
    _: Writer,
    queue: str | None = None,
    state: str | None = None,
    before: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE_SIZE,
) -> QueueJobPage:
    """List queue jobs newest first, by `queue` and `state` (queued, running, finished,
    failed, cancelled), with the counts of every queue and state; page with `before`."""
    async with request.app.state.engine.connect() as conn:
        found, counts = await service.list_queue_jobs(
            conn, queue=queue or None, state=_state(state), before=before, limit=limit
        )
    return QueueJobPage.model_validate(
        {
            "queue_jobs": [_summary(item) for item in found],
            "next_before": found[-1].queue_job.id if len(found) == limit else None,
            "counts": [
                {"queue": q, "state": s, "count": n} for (q, s), n in sorted(counts.items())
            ],
            "queues": sorted({kind.queue for kind in JOB_KINDS.values()}),
        }
    )


@router.get("/jobs/{queue_job_id}", operation_id="get_queue_job")
async def get_queue_job(
    queue_job_id: QueueJobId, request: Request, principal: Writer
) -> QueueJobDetail:
    """Read one queue job: its payload (no secrets), its attempt, its transitions."""
    async with request.app.state.engine.connect() as conn:
        item = await service.get_queue_job(conn, queue_job_id)
        log = await service.transitions(conn, queue_job_id)
    may_read = principal.can(Permission.JOBS_READ)
    return QueueJobDetail.model_validate(
        {
            **_summary(item),
            "payload": service.shown_payload(item, may_read_jobs=may_read),
            "transitions": log,
        }
    )


@router.post("/jobs/{queue_job_id}/retry", status_code=201, operation_id="retry_queue_job")
async def retry_queue_job(
    queue_job_id: QueueJobId, request: Request, principal: Writer
) -> QueueRetried:
    """Run an ended queue job's job again for the same pool member, as a new firing (its
    overlap lock taken, the job's current retry budget); 409 while it still waits or runs,
    when its attempt succeeded, or when the job is gone, disabled or that member busy.
    Audited as `queue_job.retry`."""
    async with request.app.state.engine.begin() as conn:
        new_id = await service.retry(conn, actor_of(request, principal), queue_job_id)
    return QueueRetried(queue_job_id=new_id)


@router.post(
    "/jobs/{queue_job_id}/cancel", status_code=204, operation_id="cancel_queue_job",
    response_class=Response,
)  # fmt: skip
async def cancel_queue_job(
    queue_job_id: QueueJobId, request: Request, principal: Writer
) -> Response:
    """Cancel a waiting queue job: it is removed, its pool member's lock released, and the
    call history gets a `cancelled` attempt. 409 once a worker has claimed it (a running
    attempt ends by itself) or when it has ended. Audited as `queue_job.cancel`."""
    async with request.app.state.engine.begin() as conn:
        await service.cancel(conn, actor_of(request, principal), queue_job_id)
    return Response(status_code=204)


@router.delete(
    "/jobs/{queue_job_id}", status_code=204, operation_id="delete_queue_job",
    response_class=Response,
)  # fmt: skip
async def delete_queue_job(
    queue_job_id: QueueJobId, request: Request, principal: Writer
) -> Response:
    """Forget an ended queue job in the engine (a held failure, its log); the call history
    keeps its attempt. 409 while it waits or runs. Audited as `queue_job.delete`."""
    async with request.app.state.engine.begin() as conn:
        await service.delete(conn, actor_of(request, principal), queue_job_id)
    return Response(status_code=204)
