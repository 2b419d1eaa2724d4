"""The script volumes catalog: named storage directories that script jobs may declare."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field, StrictStr

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput
from zilean.registry import volumes as service
from zilean.registry.volume_declarations import VolumeMode

router = APIRouter(prefix="/api/script-volumes", tags=["script-volumes"])

Reader = Annotated[Principal, Depends(require(Permission.SCRIPTVOLUMES_READ))]
Writer = Annotated[Principal, Depends(require(Permission.SCRIPTVOLUMES_WRITE))]


class ScriptVolumeCreate(StrictInput):
    name: StrictStr
    max_mode: StrictStr
    description: StrictStr = ""


class ScriptVolumeUpdate(StrictInput):
    """The editable fields; a volume keeps its name (a `name` in the body is ignored)."""

    read_only = frozenset({"name", "created_at", "updated_at", "usage"})

    max_mode: StrictStr
    description: StrictStr = ""


class ScriptVolumeView(ResponseModel):
    name: str
    max_mode: VolumeMode = Field(description="The most access a job may declare.")
    description: str
    usage: int = Field(description="How many jobs and workflows declare the volume.")
    created_at: datetime
    updated_at: datetime


class VolumeUser(ResponseModel):
    """A job or workflow that still declares a volume."""

    id: uuid.UUID
    name: str


class VolumeInUseBody(ResponseModel):
    error: str
    jobs: list[VolumeUser]
    workflows: list[VolumeUser]


IN_USE: dict[int | str, dict[str, Any]] = {
    409: {
        "model": VolumeInUseBody,
        "description": "The volume is still declared: the body lists the jobs and workflows.",
    }
}


@router.get("", operation_id="list_script_volumes")
async def list_script_volumes(request: Request, _: Reader) -> list[ScriptVolumeView]:
    """List every volume by name; `usage` counts the jobs and workflows that declare it."""
    async with request.app.state.engine.connect() as conn:
        volumes = await service.list_volumes(conn)
    return [ScriptVolumeView.model_validate(volume) for volume in volumes]


@router.post("", status_code=201, operation_id="create_script_volume")
async def create_script_volume(
    body: ScriptVolumeCreate, request: Request, principal: Writer
) -> ScriptVolumeView:
    """Add a volume to the catalog. No directory is made until a job first mounts it."""
    async with request.app.state.engine.begin() as conn:
        volume = await service.create_volume(
            conn,
            actor_of(request, principal),
            name=body.name,
            max_mode=body.max_mode,
            description=body.description,
        )
    return ScriptVolumeView.model_validate(volume)


@router.put("/{name}", operation_id="update_script_volume")
async def update_script_volume(
    name: str, body: ScriptVolumeUpdate, request: Request, principal: Writer
) -> ScriptVolumeView:
    """Set a volume's `max_mode` and `description`; volumes cannot be renamed."""
    async with request.app.state.engine.begin() as conn:
        volume = await service.update_volume(
            conn,
            actor_of(request, principal),
            name,
            max_mode=body.max_mode,
            description=body.description,
        )
    return ScriptVolumeView.model_validate(volume)


@router.delete("/{name}", status_code=204, operation_id="delete_script_volume", responses=IN_USE)
async def delete_script_volume(name: str, request: Request, principal: Writer) -> Response:
    """Drop a volume from the catalog; its directory and files stay where they are."""
    try:
        async with request.app.state.engine.begin() as conn:
            await service.delete_volume(conn, actor_of(request, principal), name)
    except service.VolumeInUse as exc:
        # The shared error handler would drop the lists, so this body is built here.
        return JSONResponse(
            VolumeInUseBody.model_validate(exc.body()).model_dump(mode="json"), status_code=409
        )
    return Response(status_code=204)
