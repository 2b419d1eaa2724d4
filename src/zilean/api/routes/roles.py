"""Roles and the live list of permission keys."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.auth import roles as service
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput

router = APIRouter(prefix="/api/roles", tags=["roles"])

Reader = Annotated[Principal, Depends(require(Permission.ROLES_READ))]
Writer = Annotated[Principal, Depends(require(Permission.ROLES_WRITE))]


class RoleCreate(StrictInput):
    name: str
    description: str = ""
    permissions: list[str] = Field(default_factory=list)


class RoleUpdate(StrictInput):
    name: str | None = None
    description: str | None = None
    permissions: list[str] | None = None


@router.get("", operation_id="list_roles")
async def list_roles(request: Request, _: Reader) -> list[dict[str, Any]]:
    """List every role with its permissions."""
    async with request.app.state.engine.connect() as conn:
        return [role.public() for role in await service.load_roles(conn)]


@router.get("/permissions", operation_id="list_permissions")
async def list_permissions(_: Reader) -> list[str]:
    """List every permission key this version of Zilean knows."""
    return [str(permission) for permission in Permission]


@router.post("", status_code=201, operation_id="create_role")
async def create_role(body: RoleCreate, request: Request, principal: Writer) -> dict[str, Any]:
    """Create a custom role; you can only add permissions you hold."""
    async with request.app.state.engine.begin() as conn:
        role = await service.create_role(
            conn,
            principal,
            actor_of(request, principal),
            name=body.name,
            description=body.description,
            permissions=body.permissions,
        )
    return role.public()


@router.patch("/{role_id}", operation_id="update_role")
async def update_role(
    role_id: uuid.UUID, body: RoleUpdate, request: Request, principal: Writer
) -> dict[str, Any]:
    """Rename a custom role or replace a role's permissions (system roles keep their names)."""
    async with request.app.state.engine.begin() as conn:
        role = await service.update_role(
            conn,
            principal,
            actor_of(request, principal),
            role_id,
            name=body.name,
            description=body.description,
            permissions=body.permissions,
        )
    return role.public()


@router.delete("/{role_id}", status_code=204, operation_id="delete_role")
async def delete_role(role_id: uuid.UUID, request: Request, principal: Writer) -> Response:
    """Delete a custom role that nobody holds and no live token uses."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_role(conn, actor_of(request, principal), role_id)
    return Response(status_code=204)
