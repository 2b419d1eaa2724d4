"""Reading the audit log: filters, newest first, keyset pagination with a fixed page size."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import audit_log
from zilean.errors import InvalidInput

PAGE_SIZE = 50
MAX_BIGINT = 2**63 - 1


@dataclass(frozen=True)
class AuditFilter:
    actor_user_id: uuid.UUID | None = None
    action: str | None = None
    resource_type: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = None


def encode_cursor(occurred_at: datetime, entry_id: int) -> str:
    raw = f"{occurred_at.isoformat()}|{entry_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, entry_id = raw.partition("|")
        occurred_at, number = datetime.fromisoformat(stamp), int(entry_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidInput("cursor is malformed") from None
    if not 0 < number <= MAX_BIGINT or occurred_at.tzinfo is None:
        raise InvalidInput("cursor is malformed")
    return occurred_at, number


def parse_time(name: str, value: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp with an explicit offset (400 otherwise)."""
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{name}: must be an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise InvalidInput(f"{name}: must be an RFC 3339 timestamp with a time zone")
    return parsed


async def list_entries(conn: AsyncConnection, where: AuditFilter) -> dict[str, Any]:
    conditions = []
    if where.actor_user_id is not None:
        conditions.append(audit_log.c.actor_user_id == where.actor_user_id)
    if where.action:
        conditions.append(audit_log.c.action == where.action)
    if where.resource_type:
        conditions.append(audit_log.c.resource_type == where.resource_type)
    if where.since is not None:
        conditions.append(audit_log.c.occurred_at >= where.since)
    if where.until is not None:
        conditions.append(audit_log.c.occurred_at < where.until)
    if where.cursor:
        occurred_at, entry_id = decode_cursor(where.cursor)
        conditions.append(
            or_(
                audit_log.c.occurred_at < occurred_at,
                and_(audit_log.c.occurred_at == occurred_at, audit_log.c.id < entry_id),
            )
        )
    query = (
        select(audit_log)
        .where(*conditions)
        .order_by(tuple_(audit_log.c.occurred_at, audit_log.c.id).desc())
        .limit(PAGE_SIZE + 1)
    )
    rows = [dict(row) for row in (await conn.execute(query)).mappings().all()]
    next_cursor = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        next_cursor = encode_cursor(rows[-1]["occurred_at"], rows[-1]["id"])
    return {"entries": rows, "next_cursor": next_cursor}
