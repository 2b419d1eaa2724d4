"""Producers queue attempts inside their own transaction, on the job type's queue."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.attempts import queue_rows, queue_statuses
from zilean.db.tables import scheduled_jobs
from zilean.execution.enqueue import enqueue_attempts
from zilean.execution.payload import CONTINUATION_PRIORITY, FIRING_PRIORITY, AttemptArgs, Trigger


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


async def test_one_statement_queues_every_pool_member_on_the_job_types_queue(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, "groovy")
    later = datetime.now(UTC) + timedelta(hours=1)
    async with engine.begin() as conn:
        ids = await enqueue_attempts(
            conn, job_id=job_id, job_type="groovy", members=members(job_id, 3), scheduled_at=later
        )
    rows = await queue_rows(engine)
    assert [row["id"] for row in rows] == ids
    assert {row["queue"] for row in rows} == {"scripts-groovy"}
    assert [AttemptArgs.from_payload(row["payload"]).pool_index for row in rows] == [0, 1, 2]
    assert all(row["execute_after"] == later for row in rows)
    assert await queue_statuses(engine) == ["queued"] * 3


async def test_a_rolled_back_transaction_queues_nothing(engine: AsyncEngine) -> None:
    job_id = await a_job(engine)
    async with engine.connect() as conn:
        transaction = await conn.begin()
        await enqueue_attempts(conn, job_id=job_id, job_type="http", members=members(job_id, 2))
        await transaction.rollback()  # the caller's other write failed
    assert await queue_rows(engine) == []


async def test_members_of_another_job_are_refused(engine: AsyncEngine) -> None:
    job_id = await a_job(engine)
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="every member"):
            await enqueue_attempts(
                conn, job_id=job_id, job_type="http", members=members(uuid.uuid4(), 1)
            )


def test_the_payload_carries_the_webhook_context_and_unknown_keys_are_ignored() -> None:
    webhook = {"trigger": Trigger.WEBHOOK, "webhook_hops": 2, "webhook_payload": {"a": [1]}}
    [args] = members(uuid.uuid4(), 1, **webhook)
    assert AttemptArgs.from_payload(args.to_payload()) == args
    newer = args.to_payload().replace(b"{", b'{"from_a_newer_version": 1, ', 1)
    assert AttemptArgs.from_payload(newer) == args


@pytest.mark.parametrize(
    ("attempt", "loop_iteration", "priority"),
    [
        (1, 0, FIRING_PRIORITY),  # a fresh run
        (2, 0, CONTINUATION_PRIORITY),  # a retry
        (1, 3, CONTINUATION_PRIORITY),  # a later loop iteration
    ],
)
def test_a_continuation_goes_before_fresh_runs(
    attempt: int, loop_iteration: int, priority: int
) -> None:
    args = AttemptArgs(
        job_id=str(uuid.uuid4()),
        loop_iteration=loop_iteration,
        pool_index=0,
        max_attempts=5,
        attempt=attempt,
    )
    assert args.priority == priority
