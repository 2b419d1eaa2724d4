"""Engine-specific test support: queue jobs left behind by a worker that died.

The one place outside `zilean/queue_engine/` that writes the engine's tables, so that a
test can set up what only a crash at the exact wrong moment would leave. Swapping the
engine means rewriting this module with the boundary package.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

DEAD_WORKER = uuid.UUID(int=0xDEAD)


async def strand(engine: AsyncEngine, *, heartbeat_age: float = 3600.0) -> list[int]:
    """Make every waiting queue job look claimed by a worker that died `heartbeat_age`
    seconds ago; return their ids."""
    async with engine.begin() as conn:
        rows = await conn.execute(
            text(
                "UPDATE pgqueuer SET status = 'picked', queue_manager_id = :worker,"
                " heartbeat = now() - make_interval(secs => :age)"
                " WHERE status = 'queued' RETURNING id"
            ),
            {"worker": DEAD_WORKER, "age": heartbeat_age},
        )
        return sorted(int(queue_job_id) for queue_job_id in rows.scalars())
