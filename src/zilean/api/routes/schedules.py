"""Schedule preview: the next fire times of a schedule being edited, before it is saved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from zilean.api.access import require
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.errors import InvalidInput
from zilean.input_models import StrictInput, TextDatetime
from zilean.registry.validation import job_zone
from zilean.schedules import parse_schedule, upcoming

router = APIRouter(prefix="/api/schedules", tags=["schedules"])

MAX_PREVIEW = 100


class PreviewRequest(StrictInput):
    schedule_type: str = "cron"
    cron_expression: str = ""
    run_at: TextDatetime | None = None
    timezone: str = Field("", description="Empty means the server's TZ.")
    from_: TextDatetime | None = Field(None, alias="from", description="Default: now.")
    count: int = Field(5, ge=1, description=f"At most {MAX_PREVIEW}; larger values are capped.")


@router.post("/preview", operation_id="preview_schedule")
async def preview(
    body: PreviewRequest,
    request: Request,
    _: Annotated[Principal, Depends(require(Permission.JOBS_READ))],
) -> list[datetime]:
    """Return the next fire times (UTC), or the 400 the job API would give for this schedule."""
    settings: CoreSettings = request.app.state.settings
    zone = job_zone(body.timezone, settings.timezone)
    start = body.from_ or datetime.now(UTC)
    if start.tzinfo is None:
        raise InvalidInput("from: must include a UTC offset")
    schedule = parse_schedule(
        body.schedule_type, body.cron_expression, run_at=body.run_at, timezone=zone
    )
    return upcoming(schedule, start, min(body.count, MAX_PREVIEW))
