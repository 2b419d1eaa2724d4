"""Public facts about this deployment that the admin UI needs before login."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from zilean.api.access import public
from zilean.api.responses import ResponseModel
from zilean.config import CoreSettings

router = APIRouter(tags=["meta"])


class MetaPublic(ResponseModel):
    """What `GET /api/meta` returns: all of it, and nothing secret."""

    timezone: str = Field(
        description="The IANA zone cron schedules without their own zone run in: `TZ`, "
        "or the machine's zone when `TZ` is unset (UTC when that cannot be told).",
        examples=["America/Los_Angeles"],
    )
    demo_mode: bool = Field(description="Whether demo mode (`DEMO_MODE=1`) is on.")


@router.get(
    "/api/meta",
    operation_id="get_meta",
    dependencies=[Depends(public())],
    response_model=MetaPublic,
)
async def get_meta(request: Request) -> MetaPublic:
    """Return the zone schedules default to, as the server resolved it, and the demo flag.

    Check `timezone` when schedules fire at unexpected hours: it shows whether `TZ`
    reached the server.
    """
    settings: CoreSettings = request.app.state.settings
    return MetaPublic(timezone=settings.timezone, demo_mode=settings.demo_mode)
