"""Global variables: values jobs reference as `{{name}}`; secret values are write-only."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field, StrictBool, StrictStr

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
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


class GlobalVariableView(ResponseModel):
    """A variable as every reader sees it: a secret's value is never sent back."""

    id: uuid.UUID
    name: str
    value: str = Field(description='The plain value; always "" for a secret.')
    is_secret: bool
    allow_in_scripts: bool = Field(
        description="A secret that script jobs may receive; each job must still name it."
    )
    has_value: bool = Field(description="Whether a value is stored: for a secret, the only sign.")
    created_at: datetime
    updated_at: datetime


def _view(variable: service.Variable) -> GlobalVariableView:
    return GlobalVariableView.model_validate(variable.public())


def _master_key(request: Request) -> bytes:
    settings: CoreSettings = request.app.state.settings
    return settings.settings_encryption_key


@router.get("", operation_id="list_global_variables")
async def list_global_variables(request: Request, _: Reader) -> list[GlobalVariableView]:
    """List every variable by name. A secret shows `value: ""` and whether one is stored."""
    async with request.app.state.engine.connect() as conn:
        return [_view(variable) for variable in await service.list_variables(conn)]


@router.post("", status_code=201, operation_id="create_global_variable")
async def create_global_variable(
    body: GlobalVariableCreate, request: Request, principal: Writer
) -> GlobalVariableView:
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
    return _view(variable)


@router.put("/{variable_id}", operation_id="update_global_variable")
async def update_global_variable(
    variable_id: uuid.UUID, body: GlobalVariableUpdate, request: Request, principal: Writer
) -> GlobalVariableView:
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
    return _view(variable)


@router.delete("/{variable_id}", status_code=204, operation_id="delete_global_variable")
async def delete_global_variable(
    variable_id: uuid.UUID, request: Request, principal: Writer
) -> Response:
    """Delete a variable, secret and script copy included."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_variable(conn, actor_of(request, principal), variable_id)
    return Response(status_code=204)
