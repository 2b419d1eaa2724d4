"""Invites: create, list pending, resend by the invitee's user id."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Request
from pydantic import Field

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.api.routes.notify import box_of
from zilean.api.routes.roles import RoleRef
from zilean.auth import invites as service
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.crypto.secretbox import SecretUnreadable
from zilean.input_models import StrictInput, TextUUID
from zilean.notify.delivery import DeliveryFailed, send_email
from zilean.notify.settings import load_smtp

log = structlog.get_logger(__name__)

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
    email_sent: bool = Field(
        False,
        description="Whether the link was emailed (SMTP configured and the send worked). "
        "Best effort: when false, hand the link over yourself. Resend never emails.",
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
    sent = await email_invite(request, body.email, link)
    return InviteIssued(invite=InviteView.model_validate(invite), link=link, email_sent=sent)


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
    return InviteIssued(invite=InviteView.model_validate(invite), link=link, email_sent=False)


async def email_invite(request: Request, email: str, link: str) -> bool:
    """Email the link through the SMTP settings, if configured; whether it was sent.

    Best effort: the invite exists either way, and the response carries the link.
    """
    try:
        async with request.app.state.engine.connect() as conn:
            smtp = await load_smtp(conn, box_of(request))
    except SecretUnreadable:
        return False
    if not smtp.configured:
        return False
    body = (
        "You have been invited to Zilean. Set your password with this link "
        f"(valid for 7 days):\n\n{link}\n"
    )
    try:
        await send_email(smtp, email, "You are invited to Zilean", body)
    except DeliveryFailed as exc:
        log.warning("invite email not sent", action="invite.email_failed", error=str(exc))
        return False
    return True
