"""Running a job by hand, and the history of its attempts."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import InvalidInput
from zilean.execution.history import DEFAULT_CALLS_LIMIT, MAX_CALLS_LIMIT, recent_calls
from zilean.execution.recording import AttemptState
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


class LastCall(ResponseModel):
    """What every attempt records, whatever its job's kind; secrets read `REDACTED`."""

    job_name: str = Field(description="The job's name when the attempt ran.")
    timeout_ms: int = Field(description="The timeout the attempt ran under.")
    duration_ms: int | None = Field(description="Null when unknown (a lost attempt).")
    error: str | None = Field(description="Why the attempt failed; null after a success.")


class HttpLastCall(LastCall):
    """An HTTP attempt: what was sent and what came back. The HTTP fields are null when
    no request was built (a configuration error, or an attempt whose worker was lost)."""

    method: str | None = Field(description="The request's method.")
    url: str | None = Field(description="The URL requested, query included.")
    status_code: int | None = Field(description="Null when no response came.")
    response_snippet: str | None = Field(
        description="The first 500 characters of the response body."
    )


class ScriptLastCall(LastCall):
    """A script attempt: how it ran and what it printed. Null when no process was
    started (a configuration error, or an attempt whose worker was lost)."""

    interpreter: str | None = Field(description="The program that ran the script.")
    script_args: list[str] | None = Field(description="The arguments, as written.")
    exit_code: int | None = Field(description="Null unless the process ran to completion.")
    stdout_snippet: str | None = Field(description="The first 2,000 characters of stdout.")
    stderr_snippet: str | None = Field(description="The first 2,000 characters of stderr.")
    stdout_length: int | None = Field(description="All the bytes it wrote to stdout.")
    stderr_length: int | None = Field(description="All the bytes it wrote to stderr.")


class CallEntry(BaseModel):
    """One attempt in a job's call history.

    `state` is `running` while the call is in flight, then `succeeded`; a failure is
    `retrying` when the run's next attempt is queued, `failed` when the run ends failed
    (the attempt budget is spent), and `cancelled` when it ends because the job can
    never succeed as configured or retries are off (docs/state_machine.md).
    """

    job_id: int | None = Field(description="The queue job's id, not the registry id.")
    state: AttemptState
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
    last_call: HttpLastCall | ScriptLastCall | None = Field(
        description="Null only while the attempt runs."
    )


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
