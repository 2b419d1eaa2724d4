"""Call-volume series: every job's heartbeat bar, and one job's activity chart."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from zilean.api.access import require
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.monitoring.activity import heartbeats, job_activity
from zilean.monitoring.window import Window

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


@router.get("/heartbeats", operation_id="list_job_heartbeats", response_class=JSONResponse)
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
) -> dict[str, Any]:
    """One job's calls and latency per display slot, plus its lifetime counters."""
    window = Window.from_query(since, buckets)
    async with request.app.state.engine.connect() as conn:
        return await job_activity(conn, job_id, window)
