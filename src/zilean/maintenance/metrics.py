"""Process sample retention: 30 days, like the call-volume buckets they are charted with."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import worker_metrics

SAMPLE_RETENTION = timedelta(days=30)


async def sweep_samples(engine: AsyncEngine, *, now: datetime | None = None) -> int:
    """Delete samples older than 30 days; `now` defaults to the database clock."""
    clock: Any = func.now() if now is None else now
    async with engine.begin() as conn:
        result = await conn.execute(
            delete(worker_metrics).where(worker_metrics.c.sampled_at < clock - SAMPLE_RETENTION)
        )
    return result.rowcount
