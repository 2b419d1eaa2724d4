"""A firing locks the free pool members (overlap skip) and queues one attempt for each."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.attempts import queued_args
from zilean.db.tables import scheduled_jobs
from zilean.execution.firing import fire
from zilean.execution.payload import Trigger


async def a_job(engine: AsyncEngine, **columns: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(insert(scheduled_jobs).values(id=job_id, name="j", **columns))
    return job_id


async def locks(engine: AsyncEngine, job_id: uuid.UUID) -> dict[str, str]:
    async with engine.connect() as conn:
        value = await conn.execute(
            select(scheduled_jobs.c.running_since_by_pool).where(scheduled_jobs.c.id == job_id)
        )
        return dict(value.scalar_one())


async def queued_members(engine: AsyncEngine) -> list[tuple[int, int]]:
    return [(args.pool_index, args.max_attempts) for args in await queued_args(engine)]


async def test_a_skip_job_locks_and_queues_every_free_member(engine: AsyncEngine) -> None:
    job_id = await a_job(engine, pool_count=3, retry_max_attempts=4)
    async with engine.begin() as conn:
        firing = await fire(conn, job_id, trigger=Trigger.RUN_NOW)
    assert len(firing.queue_job_ids) == 3
    assert firing.busy_members == []
    assert set(await locks(engine, job_id)) == {"0", "1", "2"}
    assert await queued_members(engine) == [(0, 4), (1, 4), (2, 4)]


async def test_busy_members_are_skipped_and_a_stale_lock_is_taken_over(
    engine: AsyncEngine,
) -> None:
    now = datetime.now(UTC)
    held = {"0": now.isoformat(), "2": (now - timedelta(hours=2)).isoformat()}
    job_id = await a_job(engine, pool_count=3, running_since_by_pool=held)
    async with engine.begin() as conn:
        firing = await fire(conn, job_id, trigger=Trigger.SCHEDULE)
    assert firing.busy_members == [0]
    assert [member for member, _ in await queued_members(engine)] == [1, 2]
    assert (await locks(engine, job_id))["0"] == held["0"]  # the live lock is untouched


async def test_every_member_busy_fires_nothing(engine: AsyncEngine) -> None:
    now = datetime.now(UTC).isoformat()
    job_id = await a_job(engine, pool_count=2, running_since_by_pool={"0": now, "1": now})
    async with engine.begin() as conn:
        firing = await fire(conn, job_id, trigger=Trigger.RUN_NOW)
    assert not firing.fired
    assert firing.busy_members == [0, 1]
    assert await queued_members(engine) == []


async def test_allow_never_locks_and_disabled_retries_budget_one_attempt(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, pool_count=2, overlap_policy="allow", retry_enabled=False)
    for _ in range(2):
        async with engine.begin() as conn:
            await fire(conn, job_id, trigger=Trigger.SCHEDULE)
    assert await locks(engine, job_id) == {}
    assert await queued_members(engine) == [(0, 1), (1, 1), (0, 1), (1, 1)]
