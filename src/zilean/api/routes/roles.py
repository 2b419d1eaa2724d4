"""Roles and the live list of permission keys."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.auth import roles as service
from zilean.auth.permissions import Permission, SystemRole
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


class RoleRef(ResponseModel):
    """A role named inside another resource (a user's or an invite's roles)."""

    id: uuid.UUID
    name: str


class RoleView(ResponseModel):
    id: uuid.UUID
    name: str
    description: str
    is_system: bool = Field(description="A seeded role: it cannot be renamed or deleted.")
    system_key: SystemRole | None = Field(description="Which seeded role; null for a custom one.")
    permissions: list[Permission] = Field(
        description="Sorted. Empty for Super Admin, whose access comes from the user's flag."
    )


@router.get("", operation_id="list_roles")
async def list_roles(request: Request, _: Reader) -> list[RoleView]:
    """List every role with its permissions."""
    async with request.app.state.engine.connect() as conn:
        return [RoleView.model_validate(role.public()) for role in await service.load_roles(conn)]


@router.get("/permissions", operation_id="list_permissions")
async def list_permissions(_: Reader) -> list[Permission]:
    """List every permission key this version of Zilean knows."""
    return list(Permission)


@router.post("", status_code=201, operation_id="create_role")
async def create_role(body: RoleCreate, request: Request, principal: Writer) -> RoleView:
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
    return RoleView.model_validate(role.public())


@router.patch("/{role_id}", operation_id="update_role")
async def update_role(
    role_id: uuid.UUID, body: RoleUpdate, request: Request, principal: Writer
) -> RoleView:
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
    return RoleView.model_validate(role.public())


@router.delete("/{role_id}", status_code=204, operation_id="delete_role")
async def delete_role(role_id: uuid.UUID, request: Request, principal: Writer) -> Response:
    """Delete a custom role that nobody holds and no live token uses."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_role(conn, actor_of(request, principal), role_id)
    return Response(status_code=204)
