"""Public facts about this deployment that the admin UI needs before login."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from zilean.api.access import public

router = APIRouter(tags=["meta"])


class MetaPublic(BaseModel):
    timezone: str
    demo_mode: bool


@router.get("/api/meta", operation_id="get_meta", dependencies=[Depends(public())])
async def get_meta(request: Request) -> MetaPublic:
    """Return the IANA zone schedules default to (from `TZ`) and whether demo mode is on."""
    settings = request.app.state.settings
    return MetaPublic(timezone=settings.timezone, demo_mode=settings.demo_mode)
