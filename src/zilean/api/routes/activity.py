"""Call-volume series: every job's heartbeat bar, and one job's activity chart."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from zilean.api.access import require
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.monitoring.activity import heartbeats, job_activity, job_event_rows
from zilean.monitoring.window import Window
from zilean.registry.jobs import load_row

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
# Read as text so that any bad value gets the spec's own 400 message.
Since = Annotated[
    str | None,
    Query(description="How far back the window reaches: a duration such as 90m or 24h "
          "(default 24h, at most 720h)."),
]  # fmt: skip
Buckets = Annotated[
    str | None,
    Query(description="How many display slots to fold the window into (default 40, at most 500)."),
]


class WindowGeometry(ResponseModel):
    """Where a series' display slots fall; draw the slots a series leaves out as empty."""

    window_start: datetime = Field(description="The first slot's start, epoch-aligned.")
    bucket_width_seconds: int = Field(description="Each slot's width.")
    slot_count: int = Field(description="How many slots the window holds, the last one now.")


class CallBucket(ResponseModel):
    """One display slot's attempts; only slots with calls are listed."""

    bucket_start: datetime
    total: int
    completed: int
    failed: int
    duration_ms_avg: int = Field(description="Filled by a job's activity route only, else 0.")
    duration_ms_max: int = Field(description="Filled by a job's activity route only, else 0.")


class JobHeartbeat(ResponseModel):
    job_id: uuid.UUID
    buckets: list[CallBucket]


class Heartbeats(WindowGeometry):
    jobs: list[JobHeartbeat] = Field(description="Every job, in the jobs list's order.")


class JobEvent(ResponseModel):
    """What used to end silently: a loop stopped at `loop_max_iterations`, or a firing
    skipped because pool members were still running (once per run of skips)."""

    kind: str = Field(description="`loop_capped` or `firing_skipped`.")
    detail: dict[str, Any] = Field(
        description="`iterations` and `cap` for a capped loop; `skipped_members` for a skip."
    )
    occurred_at: datetime


class JobActivity(WindowGeometry):
    job_id: uuid.UUID
    buckets: list[CallBucket]
    events: list[JobEvent] = Field(description="The window's job events, newest first.")
    invocations_total: int = Field(description="Over the job's whole life, not the window.")
    invocations_completed: int = Field(description="Over the job's whole life.")
    invocations_failed: int = Field(description="Over the job's whole life.")


@router.get(
    "/heartbeats",
    operation_id="list_job_heartbeats",
    response_class=JSONResponse,
    response_model=Heartbeats,
)
async def list_heartbeats(
    request: Request, _: Reader, since: Since = None, buckets: Buckets = None
) -> Response:
    """Every job's call counts per display slot, in one response (a job with none: `[]`).

    Slots are epoch-aligned; only slots with calls are listed, so draw the gaps from
    `window_start`, `bucket_width_seconds` and `slot_count`. Latency fields stay 0 here.
    """
    window = Window.from_query(since, buckets)
    async with request.app.state.engine.connect() as conn:
        body = await heartbeats(conn, window, request.app.state.heartbeat_cache)
    return Response(body, media_type="application/json")  # already encoded


@router.get("/{job_id}/activity", operation_id="get_job_activity")
async def get_activity(
    job_id: uuid.UUID, request: Request, _: Reader, since: Since = None, buckets: Buckets = None
) -> JobActivity:
    """One job's calls and latency per display slot, plus its lifetime counters."""
    window = Window.from_query(since, buckets)
    async with request.app.state.engine.connect() as conn:
        activity = await job_activity(conn, job_id, window)
    return JobActivity.model_validate(activity)


@router.get("/{job_id}/events", operation_id="list_job_events")
async def list_job_events(job_id: uuid.UUID, request: Request, _: Reader) -> list[JobEvent]:
    """The job's newest 100 events (capped loops, skipped firings), newest first."""
    async with request.app.state.engine.connect() as conn:
        await load_row(conn, job_id)  # 404 for an unknown job
        rows = await job_event_rows(conn, job_id)
    return [JobEvent.model_validate(row) for row in rows]
