"""Personal API tokens for automation: `Authorization: Bearer zat_...`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from zilean.api.access import actor_of, signed_in
from zilean.api.responses import ResponseModel
from zilean.auth import api_tokens as service
from zilean.auth.principal import Principal
from zilean.input_models import StrictInput, TextUUID

router = APIRouter(prefix="/api/tokens", tags=["tokens"])

Caller = Annotated[Principal, Depends(signed_in())]


class TokenCreate(StrictInput):
    name: str
    role_id: TextUUID
    expires_in: str = "90d"


class TokenView(ResponseModel):
    id: uuid.UUID
    name: str
    user_id: uuid.UUID = Field(description="The owner, whose permissions also cap the token's.")
    user_email: str
    role_id: uuid.UUID = Field(description="The role whose permissions the token acts with.")
    role_name: str
    token_hint: str = Field(description="The secret's last characters, to tell tokens apart.")
    created_at: datetime
    expires_at: datetime | None = Field(description="Null for a token that never expires.")
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(ResponseModel):
    token: TokenView
    secret: str = Field(
        description="The bearer value (`zat_...`), shown this once: only its digest is stored."
    )


@router.post("", status_code=201, operation_id="create_token")
async def create_token(body: TokenCreate, request: Request, principal: Caller) -> TokenCreated:
    """Create a token bound to one role you could grant; the secret is returned once."""
    async with request.app.state.engine.begin() as conn:
        token, secret = await service.create_token(
            conn,
            principal,
            actor_of(request, principal),
            name=body.name,
            role_id=body.role_id,
            expires_in=body.expires_in,
        )
    return TokenCreated(token=TokenView.model_validate(token), secret=secret)


@router.get("", operation_id="list_tokens")
async def list_tokens(request: Request, principal: Caller, all: bool = False) -> list[TokenView]:
    """List your tokens, newest first; `?all=true` lists everyone's (needs users:write)."""
    async with request.app.state.engine.connect() as conn:
        tokens = await service.list_tokens(conn, principal, everyone=all)
    return [TokenView.model_validate(token) for token in tokens]


@router.delete("/{token_id}", status_code=204, operation_id="revoke_token")
async def revoke_token(token_id: uuid.UUID, request: Request, principal: Caller) -> Response:
    """Revoke a token of yours (or anyone's, with users:write)."""
    async with request.app.state.engine.begin() as conn:
        await service.revoke_token(conn, principal, actor_of(request, principal), token_id)
    return Response(status_code=204)
