"""Invites: create, list pending, resend by the invitee's user id."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.api.routes.roles import RoleRef
from zilean.auth import invites as service
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput, TextUUID

router = APIRouter(prefix="/api/invites", tags=["invites"])

Inviter = Annotated[Principal, Depends(require(Permission.INVITES_CREATE))]


class InviteCreate(StrictInput):
    email: str
    role_ids: list[TextUUID]


class InviteView(ResponseModel):
    id: uuid.UUID = Field(description="The invite's own id (resend takes `user_id` instead).")
    user_id: uuid.UUID = Field(description="The invited user, whose status is `invited`.")
    email: str
    roles: list[RoleRef] = Field(description="The roles the user gets on accepting.")
    created_at: datetime
    expires_at: datetime


class PendingInvite(InviteView):
    expired: bool = Field(description="The link has lapsed; resend to issue a fresh one.")


class InviteIssued(ResponseModel):
    invite: InviteView
    link: str = Field(
        description="The accept link, shown this once (only its token's hash is stored). "
        "Relative when PUBLIC_BASE_URL is unset."
    )


@router.post("", status_code=201, operation_id="create_invite")
async def create_invite(body: InviteCreate, request: Request, principal: Inviter) -> InviteIssued:
    """Invite someone: returns the invite and its accept link (valid for 7 days)."""
    async with request.app.state.engine.begin() as conn:
        invite, link = await service.create_invite(
            conn,
            principal,
            actor_of(request, principal),
            email=body.email,
            role_ids=body.role_ids,
            public_base_url=request.app.state.settings.public_base_url,
        )
    return InviteIssued(invite=InviteView.model_validate(invite), link=link)


@router.get("", operation_id="list_invites")
async def list_invites(request: Request, _: Inviter) -> list[PendingInvite]:
    """List the newest invite of every user who has not accepted yet, newest first."""
    async with request.app.state.engine.connect() as conn:
        return [PendingInvite.model_validate(row) for row in await service.pending_invites(conn)]


@router.post("/{user_id}/resend", status_code=201, operation_id="resend_invite")
async def resend_invite(user_id: uuid.UUID, request: Request, principal: Inviter) -> InviteIssued:
    """Mint a fresh link for an invited user. The id is the invitee's user id."""
    async with request.app.state.engine.begin() as conn:
        invite, link = await service.resend_invite(
            conn,
            principal,
            actor_of(request, principal),
            user_id,
            public_base_url=request.app.state.settings.public_base_url,
        )
    return InviteIssued(invite=InviteView.model_validate(invite), link=link)
