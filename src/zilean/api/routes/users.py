"""User management: create with a temporary password, change roles or status, reset, delete."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.api.routes.roles import RoleRef
from zilean.auth import users as service
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput, TextUUID

router = APIRouter(prefix="/api/users", tags=["users"])

Reader = Annotated[Principal, Depends(require(Permission.USERS_READ))]
Writer = Annotated[Principal, Depends(require(Permission.USERS_WRITE))]


class UserCreate(StrictInput):
    email: str
    role_ids: list[TextUUID]


class UserUpdate(StrictInput):
    role_ids: list[TextUUID] | None = None
    status: str | None = None


class UserView(ResponseModel):
    id: uuid.UUID
    email: str
    status: Literal["invited", "active", "disabled"] = Field(
        description="`invited` until the invite is accepted."
    )
    is_super_admin: bool
    protected: bool = Field(
        description="The bootstrap Super Admin: its roles, status and password cannot be "
        "changed, and it cannot be deleted."
    )
    must_change_password: bool
    roles: list[RoleRef] = Field(description="Sorted by name.")
    created_at: datetime
    last_login_at: datetime | None


class UserCreated(ResponseModel):
    user: UserView
    temp_password: str = Field(description="Shown this once: only its hash is stored.")


class TemporaryPassword(ResponseModel):
    temp_password: str = Field(description="Shown this once: only its hash is stored.")


@router.get("", operation_id="list_users")
async def list_users(request: Request, _: Reader) -> list[UserView]:
    """List every user with their roles."""
    async with request.app.state.engine.connect() as conn:
        return [UserView.model_validate(user) for user in await service.list_users(conn)]


@router.post("", status_code=201, operation_id="create_user")
async def create_user(body: UserCreate, request: Request, principal: Writer) -> UserCreated:
    """Create an active user; the temporary password is returned once and must be changed."""
    async with request.app.state.engine.begin() as conn:
        user, password = await service.create_user(
            conn, principal, actor_of(request, principal), email=body.email, role_ids=body.role_ids
        )
    return UserCreated(user=UserView.model_validate(user), temp_password=password)


@router.patch("/{user_id}", operation_id="update_user")
async def update_user(
    user_id: uuid.UUID, body: UserUpdate, request: Request, principal: Writer
) -> UserView:
    """Replace a user's roles (never empty) and/or set status to `active` or `disabled`."""
    async with request.app.state.engine.begin() as conn:
        user = await service.update_user(
            conn,
            principal,
            actor_of(request, principal),
            user_id,
            role_ids=body.role_ids,
            status=body.status,
        )
    return UserView.model_validate(user)


@router.post("/{user_id}/reset-password", operation_id="reset_user_password")
async def reset_password(
    user_id: uuid.UUID, request: Request, principal: Writer
) -> TemporaryPassword:
    """Issue a new temporary password (returned once) and end the user's sessions."""
    async with request.app.state.engine.begin() as conn:
        password = await service.reset_password(
            conn, principal, actor_of(request, principal), user_id
        )
    return TemporaryPassword(temp_password=password)


@router.delete("/{user_id}", status_code=204, operation_id="delete_user")
async def delete_user(user_id: uuid.UUID, request: Request, principal: Writer) -> Response:
    """Delete a user with their sessions, invites and tokens; audit entries remain."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_user(conn, principal, actor_of(request, principal), user_id)
    return Response(status_code=204)
