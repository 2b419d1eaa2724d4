"""Engine-specific test support: a live consumer, and what a worker that died leaves.

The one place outside `zilean/queue_engine/` that writes the engine's tables, so that a
test can set up what only a crash at the exact wrong moment would leave. Swapping the
engine means rewriting this module with the boundary package.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.urls import libpq_url
from zilean.queue_engine.consumer import Handler, OverrunHandler, QueueConsumer

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


async def refuse_inserts(engine: AsyncEngine, *, for_job: uuid.UUID | None = None) -> None:
    """Make the queue refuse new jobs (of one job only, when `for_job` is given)."""
    condition = "true"
    if for_job is not None:
        condition = f"convert_from(NEW.payload, 'UTF8')::jsonb ->> 'job_id' = '{for_job}'"
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION refuse_queue_insert() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN IF {condition} THEN RAISE EXCEPTION 'queue unavailable'; END IF;"
                " RETURN NEW; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_queue_insert BEFORE INSERT ON pgqueuer"
                " FOR EACH ROW EXECUTE FUNCTION refuse_queue_insert()"
            )
        )


async def accept_inserts(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("DROP TRIGGER refuse_queue_insert ON pgqueuer"))
        await conn.execute(text("DROP FUNCTION refuse_queue_insert()"))


async def age(engine: AsyncEngine, queue_job_ids: list[int], days: float) -> None:
    """Make these queue jobs, and their log, look `days` old."""
    async with engine.begin() as conn:
        params = {"ids": queue_job_ids, "days": days}
        await conn.execute(
            text(
                "UPDATE pgqueuer_log SET created = now() - make_interval(days => :days)"
                " WHERE job_id = ANY(:ids)"
            ),
            params,
        )
        await conn.execute(
            text(
                "UPDATE pgqueuer SET created = now() - make_interval(days => :days),"
                " updated = now() - make_interval(days => :days) WHERE id = ANY(:ids)"
            ),
            params,
        )


@asynccontextmanager
async def consuming(
    database_url: str,
    handler: Handler,
    *,
    queue: str = "default",
    concurrency: int = 4,
    soft_stop: float = 2.0,
    on_overrun: OverrunHandler | None = None,
    started: bool = True,
    **options: Any,
) -> AsyncIterator[QueueConsumer]:
    """Run a real consumer of `queue` for the block; wait until it listens (`started`)."""
    consumer = QueueConsumer(
        libpq_url(database_url),
        queue,
        handler,
        concurrency=concurrency,
        application_name=f"zilean-test-{queue}",
        soft_stop=soft_stop,
        on_overrun=on_overrun,
        **options,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        if started:
            await asyncio.wait_for(consumer.started.wait(), timeout=10)
        yield consumer
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)
