"""Load through Zilean's real producer path, and reading what the worker recorded.

`fire_run_now` calls the run-now service (`execution/run_now.py`: overlap locks, the
queue insert, the audit entry) for every job in ONE transaction, so all attempts become
visible to the worker at one commit: a clean start edge for "queue insert to recorded
attempt". Attempts are counted in `job_attempts`, the call history itself: a row is
written when an attempt starts (`running`, `attempted_at`) and finished when it is
recorded (`finalized_at`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.queue import clock
from benchmarks.seeding import ADMIN_EMAIL
from zilean.audit.log import Actor
from zilean.db.tables import job_attempts
from zilean.execution.run_now import run_now

BENCH_ACTOR = Actor(user_id=None, email=ADMIN_EMAIL, ip="127.0.0.1")


async def fire_run_now(engine: AsyncEngine, job_ids: Sequence[uuid.UUID]) -> tuple[datetime, int]:
    """Run every job now in one transaction; return (database clock before commit, queued)."""
    queued = 0
    async with engine.begin() as conn:
        for job_id in job_ids:
            firing = await run_now(conn, BENCH_ACTOR, job_id)
            queued += len(firing.queue_job_ids)
        return await clock(conn), queued


async def attempt_watermark(engine: AsyncEngine) -> int:
    """Return the newest call-history id (0 for none): later attempts are above it."""
    async with engine.connect() as conn:
        value = (await conn.execute(select(func.max(job_attempts.c.id)))).scalar()
    return int(value or 0)


async def recorded_since(engine: AsyncEngine, watermark: int) -> tuple[int, int]:
    """Return (attempts finished above `watermark`, how many of them did not succeed).

    An attempt's history row exists from its start (state `running`, the start marker);
    it counts once its recording has finished it.
    """
    finished = job_attempts.c.finalized_at.is_not(None)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(
                    func.count().filter(finished),
                    func.count().filter(finished, job_attempts.c.state != "succeeded"),
                ).where(job_attempts.c.id > watermark)
            )
        ).one()
    return int(row[0]), int(row[1])


async def last_recorded_at(engine: AsyncEngine, watermark: int) -> datetime:
    """Return when the last attempt above `watermark` was recorded (database clock)."""
    async with engine.connect() as conn:
        value: datetime | None = (
            await conn.execute(
                select(func.max(job_attempts.c.finalized_at)).where(job_attempts.c.id > watermark)
            )
        ).scalar()
    if value is None:
        raise ValueError(f"no attempt recorded after {watermark}")
    return value
