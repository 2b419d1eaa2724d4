"""The caller's own account: identity, permissions, password and sessions."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, signed_in
from zilean.api.responses import ResponseModel
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.auth.sessions import SESSION_COOKIE, revoke_user_sessions
from zilean.auth.users import change_own_password
from zilean.input_models import StrictInput

router = APIRouter(prefix="/api/account", tags=["account"])

Caller = Annotated[Principal, Depends(signed_in(allow_password_change=True))]


class AccountView(ResponseModel):
    id: uuid.UUID
    email: str
    is_super_admin: bool
    must_change_password: bool = Field(
        description="While true, signed-in routes outside /api/account answer 403."
    )
    permissions: list[Permission] = Field(
        description="Sorted; every permission there is for a Super Admin."
    )


class PasswordChange(StrictInput):
    current_password: str
    new_password: str


@router.get("/me", operation_id="get_account")
async def me(principal: Caller) -> AccountView:
    """Return who you are and every permission you hold (all of them for a Super Admin)."""
    return AccountView(
        id=principal.user_id,
        email=principal.email,
        is_super_admin=principal.is_super_admin,
        must_change_password=principal.must_change_password,
        permissions=sorted(principal.permissions),
    )


@router.post("/change-password", status_code=204, operation_id="change_password")
async def change_password(body: PasswordChange, request: Request, principal: Caller) -> Response:
    """Change your password (8 characters to 72 bytes). Your other sessions end."""
    async with request.app.state.engine.begin() as conn:
        await change_own_password(
            conn,
            principal,
            actor_of(request, principal),
            current_password=body.current_password,
            new_password=body.new_password,
            keep_session=request.cookies.get(SESSION_COOKIE),
        )
    return Response(status_code=204)


class SessionsEnded(ResponseModel):
    ended: int = Field(description="How many of your other sessions were signed out.")


@router.post("/sign-out-others", operation_id="sign_out_other_sessions")
async def sign_out_others(request: Request, principal: Caller) -> SessionsEnded:
    """Sign out every other session of yours (other browsers and devices); the one making
    this request stays signed in. API tokens are not sessions: revoke those apart.
    Audited as `account.sign_out_others`."""
    async with request.app.state.engine.begin() as conn:
        ended = await revoke_user_sessions(
            conn, principal.user_id, keep=request.cookies.get(SESSION_COOKIE)
        )
        await record(
            conn,
            actor_of(request, principal),
            "account.sign_out_others",
            "user",
            principal.user_id,
            after={"sessions_ended": ended},
        )
    return SessionsEnded(ended=ended)
