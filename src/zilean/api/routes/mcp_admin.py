"""Administration of the MCP endpoint: its on/off switch and the tokens agents use.

`settings:mcp` gates this surface only; what a token may do at `/mcp` is its own role's
business.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field, StrictBool

from zilean.api.access import actor_of, require
from zilean.api.responses import ResponseModel
from zilean.audit.log import record
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.config import CoreSettings
from zilean.input_models import StrictInput, TextUUID
from zilean.mcp import tokens as service
from zilean.mcp.settings import mcp_enabled, probe, set_mcp_enabled

router = APIRouter(tags=["mcp"])

Manager = Annotated[Principal, Depends(require(Permission.SETTINGS_MCP))]


class McpSettingsWrite(StrictInput):
    read_only = frozenset({"live", "checked_at"})

    enabled: StrictBool


class McpSettingsView(ResponseModel):
    enabled: bool = Field(description="Whether the MCP endpoint accepts requests (503 if not).")
    live: bool = Field(
        description="Whether the mcp service answered its health check just now (2 s timeout)."
    )
    checked_at: datetime = Field(description="When that health check ran.")


class McpTokenCreate(StrictInput):
    name: str = Field(description="A label for the agent or client using the token.")
    role_id: TextUUID = Field(
        description="The role the token acts as: within your own permissions, never Super Admin."
    )
    expires_in: Literal["30d", "90d", "365d", "never"] = "90d"


class McpTokenView(ResponseModel):
    id: uuid.UUID
    name: str
    role_id: uuid.UUID = Field(description="The role the token's service account holds.")
    role_name: str
    account_id: uuid.UUID = Field(
        description="The hidden service account: the audit log's actor for the token's calls."
    )
    account_email: str = Field(description="The service account's address, as audited.")
    token_hint: str = Field(description="The token's last characters, to tell tokens apart.")
    created_at: datetime
    expires_at: datetime | None = Field(description="Null for a token that never expires.")
    last_used_at: datetime | None = Field(description="Updated at most once a minute.")


class McpTokenCreated(McpTokenView):
    token: str = Field(
        description="The bearer value (`zmcp_...`), shown this once: only its digest is stored."
    )


async def _view(request: Request, enabled: bool) -> McpSettingsView:
    settings: CoreSettings = request.app.state.settings
    result = await probe(settings.mcp_health_url)
    return McpSettingsView(enabled=enabled, live=result.live, checked_at=result.checked_at)


@router.get("/api/settings/mcp", operation_id="get_mcp_settings")
async def get_mcp_settings(request: Request, _: Manager) -> McpSettingsView:
    """Whether the MCP endpoint is on, and whether the mcp service is reachable right now."""
    async with request.app.state.engine.connect() as conn:
        enabled = await mcp_enabled(conn)
    return await _view(request, enabled)


@router.put("/api/settings/mcp", operation_id="update_mcp_settings")
async def put_mcp_settings(
    body: McpSettingsWrite, request: Request, principal: Manager
) -> McpSettingsView:
    """Turn the MCP endpoint on or off, effective at the next request; audited as
    `settings.mcp`. Succeeds whether or not the mcp service is running (see `live`)."""
    async with request.app.state.engine.begin() as conn:
        before = await mcp_enabled(conn)
        await set_mcp_enabled(conn, body.enabled)
        if before != body.enabled:
            await record(
                conn,
                actor_of(request, principal),
                "settings.mcp",
                "settings",
                "mcp",
                before={"enabled": before},
                after={"enabled": body.enabled},
            )
    return await _view(request, body.enabled)


@router.get("/api/mcp-tokens", operation_id="list_mcp_tokens")
async def list_mcp_tokens(request: Request, _: Manager) -> list[McpTokenView]:
    """Every MCP token, newest first, with its role and when it was last used."""
    async with request.app.state.engine.connect() as conn:
        tokens = await service.list_tokens(conn)
    return [McpTokenView.model_validate(token) for token in tokens]


@router.post("/api/mcp-tokens", status_code=201, operation_id="create_mcp_token")
async def create_mcp_token(
    body: McpTokenCreate, request: Request, principal: Manager
) -> McpTokenCreated:
    """Issue a token bound to one role; `token` is returned this once. Audited."""
    async with request.app.state.engine.begin() as conn:
        token, secret = await service.create_token(
            conn,
            principal,
            actor_of(request, principal),
            name=body.name,
            role_id=body.role_id,
            expires_in=body.expires_in,
        )
    return McpTokenCreated.model_validate({**token, "token": secret})


@router.delete("/api/mcp-tokens/{mcp_token_id}", status_code=204, operation_id="delete_mcp_token")
async def delete_mcp_token(
    mcp_token_id: uuid.UUID, request: Request, principal: Manager
) -> Response:
    """Revoke a token at once, deleting its service account with it. Audited."""
    async with request.app.state.engine.begin() as conn:
        await service.delete_token(conn, actor_of(request, principal), mcp_token_id)
    return Response(status_code=204)
