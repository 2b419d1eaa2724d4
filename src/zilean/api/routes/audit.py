"""The audit log and its retention setting."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import StrictInt

from zilean.api.access import require
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
) -> dict[str, Any]:
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
        return await list_entries(conn, where)


@router.get("/api/settings/audit", operation_id="get_audit_settings")
async def get_audit_settings(request: Request, _: Reader) -> AuditSettings:
    """Read how many days audit entries are kept."""
    async with request.app.state.engine.connect() as conn:
        return AuditSettings(audit_retention_days=await get_retention_days(conn))


@router.put("/api/settings/audit", operation_id="update_audit_settings")
async def put_audit_settings(body: AuditSettings, request: Request, _: Writer) -> AuditSettings:
    """Set the retention window (1 to 3650 days); the daily sweep applies it. Not audited."""
    async with request.app.state.engine.begin() as conn:
        days = await set_retention_days(conn, body.audit_retention_days)
    return AuditSettings(audit_retention_days=days)
