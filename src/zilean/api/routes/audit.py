"""The audit log and its retention setting."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field, StrictInt

from zilean.api.access import require
from zilean.api.responses import ResponseModel
from zilean.audit.queries import AuditFilter, list_entries, parse_time
from zilean.audit.retention import get_retention_days, set_retention_days
from zilean.auth.permissions import Permission
from zilean.auth.principal import Principal
from zilean.errors import InvalidInput
from zilean.input_models import StrictInput

router = APIRouter(tags=["audit"])

Reader = Annotated[Principal, Depends(require(Permission.AUDIT_READ))]
Writer = Annotated[Principal, Depends(require(Permission.AUDIT_WRITE))]


class AuditSettings(StrictInput):
    audit_retention_days: StrictInt


class AuditSettingsView(ResponseModel):
    audit_retention_days: int = Field(description="Entries older than this many days are swept.")


class AuditEntry(ResponseModel):
    id: int
    occurred_at: datetime
    actor_user_id: uuid.UUID | None = Field(
        description="The user who acted, kept after they are deleted; null when none did."
    )
    actor_email: str | None
    action: str = Field(description="What happened, such as `user.create` or `job.update`.")
    resource_type: str
    resource_id: str | None
    before: dict[str, Any] | None = Field(
        description="The resource before the change, secrets masked as `***`."
    )
    after: dict[str, Any] | None = Field(
        description="The resource after the change, secrets masked as `***`."
    )
    ip: str | None = Field(description="The client address the request came from.")


class AuditPage(ResponseModel):
    entries: list[AuditEntry] = Field(description="Newest first, at most 50.")
    next_cursor: str | None = Field(
        description="Pass back as `cursor` for the next page; null on the last one."
    )


def _uuid(name: str, value: str | None) -> uuid.UUID | None:
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(f"{name}: must be a UUID") from None


@router.get("/api/audit-log", operation_id="list_audit_log")
async def audit_log(
    request: Request,
    _: Reader,
    actor_user_id: str | None = None,
    action: str | None = None,
    resource_type: str | None = None,
    since: str | None = None,
    until: str | None = None,
    cursor: str | None = None,
) -> AuditPage:
    """Read entries newest first, 50 a page; pass `next_cursor` back as `cursor` for more."""
    where = AuditFilter(
        actor_user_id=_uuid("actor_user_id", actor_user_id),
        action=action or None,
        resource_type=resource_type or None,
        since=parse_time("since", since),
        until=parse_time("until", until),
        cursor=cursor or None,
    )
    async with request.app.state.engine.connect() as conn:
        page = await list_entries(conn, where)
    return AuditPage.model_validate(page)


@router.get("/api/settings/audit", operation_id="get_audit_settings")
async def get_audit_settings(request: Request, _: Reader) -> AuditSettingsView:
    """Read how many days audit entries are kept."""
    async with request.app.state.engine.connect() as conn:
        return AuditSettingsView(audit_retention_days=await get_retention_days(conn))


@router.put("/api/settings/audit", operation_id="update_audit_settings")
async def put_audit_settings(body: AuditSettings, request: Request, _: Writer) -> AuditSettingsView:
    """Set the retention window (1 to 3650 days); the daily sweep applies it. Not audited."""
    async with request.app.state.engine.begin() as conn:
        days = await set_retention_days(conn, body.audit_retention_days)
    return AuditSettingsView(audit_retention_days=days)
