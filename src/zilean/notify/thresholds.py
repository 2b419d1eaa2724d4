"""Metrics alarms: one row per service, read by the API and the notifier."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import metric_thresholds


async def list_all(conn: AsyncConnection) -> list[dict[str, Any]]:
    rows = await conn.execute(select(metric_thresholds).order_by(metric_thresholds.c.service))
    return [dict(row) for row in rows.mappings()]


async def _one(conn: AsyncConnection, service: str) -> dict[str, Any] | None:
    row = (
        (
            await conn.execute(
                select(metric_thresholds).where(metric_thresholds.c.service == service)
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else dict(row)


async def save(
    conn: AsyncConnection,
    service: str,
    *,
    enabled: bool,
    cpu_percent: float | None,
    memory_mb: float | None,
    target_ids: list[int],
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Create or replace a service's alarm; return (before, after). Its state is kept."""
    before = await _one(conn, service)
    values = {
        "enabled": enabled,
        "cpu_percent": cpu_percent,
        "memory_mb": memory_mb,
        "target_ids": target_ids,
    }
    statement = insert(metric_thresholds).values(service=service, **values)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[metric_thresholds.c.service], set_={**values, "updated_at": func.now()}
        )
    )
    after = await _one(conn, service)
    assert after is not None
    return before, after
