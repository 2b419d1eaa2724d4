"""The audit retention setting and the sweep that applies it (run daily by
`maintenance/sweeps.py`).

The sweep also removes sessions that expired more than a day ago (expired sessions are
already refused at lookup; the rows are kept a day for troubleshooting).
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.auth.bootstrap import AUDIT_RETENTION_SETTING
from zilean.config import DEFAULT_AUDIT_RETENTION_DAYS
from zilean.db.tables import app_settings, audit_log, sessions
from zilean.errors import InvalidInput

log = structlog.get_logger(__name__)

MIN_RETENTION_DAYS = 1
MAX_RETENTION_DAYS = 3650
EXPIRED_SESSION_GRACE = timedelta(hours=24)


async def get_retention_days(conn: AsyncConnection) -> int:
    value = (
        await conn.execute(
            select(app_settings.c.value).where(app_settings.c.key == AUDIT_RETENTION_SETTING)
        )
    ).scalar_one_or_none()
    return value if isinstance(value, int) and value >= 1 else DEFAULT_AUDIT_RETENTION_DAYS


async def set_retention_days(conn: AsyncConnection, days: int) -> int:
    if not MIN_RETENTION_DAYS <= days <= MAX_RETENTION_DAYS:
        raise InvalidInput(
            f"audit_retention_days: must be between {MIN_RETENTION_DAYS} and {MAX_RETENTION_DAYS}"
        )
    statement = insert(app_settings).values(key=AUDIT_RETENTION_SETTING, value=days)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[app_settings.c.key],
            set_={"value": statement.excluded.value, "updated_at": func.now()},
        )
    )
    return days


async def sweep_once(engine: AsyncEngine) -> tuple[int, int]:
    """Apply retention now; return (audit entries removed, sessions removed)."""
    async with engine.begin() as conn:
        days = await get_retention_days(conn)
        audit = await conn.execute(
            delete(audit_log).where(audit_log.c.occurred_at < func.now() - timedelta(days=days))
        )
        stale = await conn.execute(
            delete(sessions).where(sessions.c.expires_at < func.now() - EXPIRED_SESSION_GRACE)
        )
    log.info(
        "retention sweep",
        action="audit.sweep",
        audit_removed=audit.rowcount,
        sessions_removed=stale.rowcount,
        retention_days=days,
    )
    return audit.rowcount, stale.rowcount
