"""Job groups: a disabled group (or ancestor group) gates its jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput
from zilean.registry import groups as service

router = APIRouter(prefix="/api/groups", tags=["groups"])

Reader = Annotated[Principal, Depends(require(Permission.JOBS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.JOBS_WRITE))]


class GroupName(StrictInput):
    group_name: str


class GroupState(ResponseModel):
    group_name: str = Field(description="The name as stored, segments trimmed.")
    disabled: bool


@router.get("/disabled", operation_id="list_disabled_groups")
async def disabled_groups(request: Request, _: Reader) -> list[str]:
    """List the disabled groups (their descendants are gated too)."""
    async with request.app.state.engine.connect() as conn:
        return await service.disabled_group_names(conn)


@router.post("/disable", operation_id="disable_group")
async def disable_group(body: GroupName, request: Request, principal: Writer) -> GroupState:
    async with request.app.state.engine.begin() as conn:
        name = await service.disable_group(conn, actor_of(request, principal), body.group_name)
    return GroupState(group_name=name, disabled=True)


@router.post("/enable", operation_id="enable_group")
async def enable_group(body: GroupName, request: Request, principal: Writer) -> GroupState:
    async with request.app.state.engine.begin() as conn:
        name = await service.enable_group(conn, actor_of(request, principal), body.group_name)
    return GroupState(group_name=name, disabled=False)
