"""Global variables: values jobs reference as `{{name}}`; secret values are write-only."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import StrictBool, StrictStr

from zilean.api.access import actor_of, require
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.input_models import StrictInput
from zilean.registry import variables as service

router = APIRouter(prefix="/api/global-variables", tags=["global-variables"])

Reader = Annotated[Principal, Depends(require(Permission.GLOBALVARS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.GLOBALVARS_WRITE))]


# What a variable's view carries beside its writable fields.
_VIEW_ONLY = frozenset({"id", "has_value", "created_at", "updated_at"})


class GlobalVariableCreate(StrictInput):
    read_only = _VIEW_ONLY

    name: StrictStr
    value: StrictStr = ""
    is_secret: StrictBool = False
    allow_in_scripts: StrictBool = False


class GlobalVariableUpdate(StrictInput):
    """The full variable: every field is required, so an omitted one never resets anything."""

    read_only = _VIEW_ONLY

    name: StrictStr
    value: StrictStr
    is_secret: StrictBool
    allow_in_scripts: StrictBool


def _master_key(request: Request) -> bytes:
    settings: CoreSettings = request.app.state.settings
    return settings.settings_encryption_key


@router.get("", operation_id="list_global_variables")
async def list_global_variables(request: Request, _: Reader) -> list[dict[str, Any]]:
    """List every variable by name. A secret shows `value: ""` and whether one is stored."""
    async with request.app.state.engine.connect() as conn:
        return [variable.public() for variable in await service.list_variables(conn)]


@router.post("", status_code=201, operation_id="create_global_variable")
async def create_global_variable(
    body: GlobalVariableCreate, request: Request, principal: Writer
) -> dict[str, Any]:
    """Create a variable; a secret's value is encrypted and can never be read back."""
    async with request.app.state.engine.begin() as conn:
        variable = await service.create_variable(
            conn,
            actor_of(request, principal),
            _master_key(request),
            name=body.name,
            value=body.value,
            is_secret=body.is_secret,
            allow_in_scripts=body.allow_in_scripts,
        )
    return variable.public()


@router.put("/{variable_id}", operation_id="update_global_variable")
async def update_global_variable(
    variable_id: uuid.UUID, body: GlobalVariableUpdate, request: Request, principal: Writer
) -> dict[str, Any]:
    """Replace a variable. While it stays secret, an empty `value` leaves the stored secret
    untouched; turning a secret into a plain variable with an empty `value` drops it."""
    async with request.app.state.engine.begin() as conn:
        variable = await service.update_variable(
            conn,
            actor_of(request, principal),
            _master_key(request),
            variable_id,
            name=body.name,
            value=body.value,
            is_secret=body.is_secret,
            allow_in_scripts=body.allow_in_scripts,
        )
    return variable.public()


@router.delete("/{variable_id}", status_code=204, operation_id="delete_global_variable")
async def delete_global_variable(
    variable_id: uuid.UUID, request: Request, principal: Writer
) -> Response:
    """Delete a variable, secret and script copy included."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_variable(conn, actor_of(request, principal), variable_id)
    return Response(status_code=204)
