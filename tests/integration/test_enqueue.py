"""Attempts are queued inside the caller's transaction and reach a real Procrastinate worker."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import scheduled_jobs
from zilean.execution.enqueue import ATTEMPT_TASK, AttemptArgs, Trigger, enqueue_attempts
from zilean.execution.queues import create_queue_app


async def a_job(engine: AsyncEngine, job_type: str = "http") -> uuid.UUID:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(insert(scheduled_jobs).values(id=job_id, name="j", job_type=job_type))
    return job_id


def members(job_id: uuid.UUID, count: int, **extra: Any) -> list[AttemptArgs]:
    return [
        AttemptArgs(job_id=str(job_id), loop_iteration=0, pool_index=i, max_attempts=5, **extra)
        for i in range(count)
    ]


QUEUED = text(
    "SELECT queue_name, task_name, args, scheduled_at, status FROM procrastinate_jobs ORDER BY id"
)


async def test_one_statement_queues_every_pool_member_on_the_job_types_queue(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, "groovy")
    later = datetime.now(UTC) + timedelta(hours=1)
    async with engine.begin() as conn:
        ids = await enqueue_attempts(
            conn, job_id=job_id, job_type="groovy", members=members(job_id, 3), scheduled_at=later
        )
        rows = (await conn.execute(QUEUED)).mappings().all()
    assert len(ids) == 3
    assert {row["queue_name"] for row in rows} == {"scripts-groovy"}
    assert {row["task_name"] for row in rows} == {ATTEMPT_TASK}
    assert [row["args"]["pool_index"] for row in rows] == [0, 1, 2]
    assert all(row["scheduled_at"] == later for row in rows)
    assert {row["status"] for row in rows} == {"todo"}


async def test_a_rolled_back_transaction_queues_nothing(engine: AsyncEngine) -> None:
    job_id = await a_job(engine)
    async with engine.connect() as conn:
        transaction = await conn.begin()
        await enqueue_attempts(conn, job_id=job_id, job_type="http", members=members(job_id, 2))
        await transaction.rollback()  # the caller's other write failed
    async with engine.connect() as conn:
        assert (await conn.execute(QUEUED)).all() == []


async def test_members_of_another_job_are_refused(engine: AsyncEngine) -> None:
    job_id = await a_job(engine)
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="every member"):
            await enqueue_attempts(
                conn, job_id=job_id, job_type="http", members=members(uuid.uuid4(), 1)
            )


async def test_a_procrastinate_worker_receives_the_payload(
    engine: AsyncEngine, database_url: str
) -> None:
    job_id = await a_job(engine)
    webhook = {"trigger": Trigger.WEBHOOK, "webhook_hops": 2, "webhook_payload": {"a": [1]}}
    async with engine.begin() as conn:
        await enqueue_attempts(
            conn, job_id=job_id, job_type="http", members=members(job_id, 1, **webhook)
        )
    received: list[AttemptArgs] = []
    app = create_queue_app(database_url)

    @app.task(name=ATTEMPT_TASK, pass_context=False)
    async def attempt(**args: Any) -> None:
        received.append(AttemptArgs.from_args(args))

    async with app.open_async():
        await app.run_worker_async(queues=["default"], wait=False, install_signal_handlers=False)
    assert received == members(job_id, 1, **webhook)
    async with engine.connect() as conn:
        statuses = (await conn.execute(text("SELECT status FROM procrastinate_jobs"))).scalars()
        assert list(statuses) == ["succeeded"]
