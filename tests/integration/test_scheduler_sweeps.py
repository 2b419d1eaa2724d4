"""Retention sweeps for execution history and finished queue jobs, and the queue-jobs
retention setting behind `GET/PUT /api/settings/queue-jobs`."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, audit_rows
from tests.support.queue_engine import age, consuming
from zilean.db.engine import driver_connection
from zilean.db.tables import app_settings, job_attempts, job_call_stats, job_firings, scheduled_jobs
from zilean.maintenance.history import sweep_history
from zilean.maintenance.queue_jobs import (
    set_queue_job_retention_days,
    sweep_finished_queue_jobs,
)
from zilean.maintenance.sweeps import sweep_all
from zilean.queue_engine.consumer import Delivery
from zilean.queue_engine.statements import NewQueueJob, QueueJobState, enqueue, queue_job_states

PATH = "/api/settings/queue-jobs"

RETENTION_RANGE = "queue_job_retention_days: must be between 1 and 3650"


async def a_job(engine: AsyncEngine, **columns: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(insert(scheduled_jobs).values(id=job_id, name="j", **columns))
    return job_id


async def test_the_history_sweep_removes_old_rows_and_keeps_recent_ones(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine)
    now = datetime.now(UTC)

    def days(age: float) -> datetime:
        return now - timedelta(days=age)

    async with engine.begin() as conn:
        await conn.execute(
            insert(job_attempts),
            [
                {
                    "job_id": job_id,
                    "state": "completed",
                    "attempt": 1,
                    "max_attempts": 1,
                    "trigger": "schedule",
                    "pool_index": 0,
                    "loop_iteration": 0,
                    "attempted_at": days(age),
                }
                for age in (31, 29)
            ],
        )
        await conn.execute(
            insert(job_call_stats),
            [{"job_id": job_id, "bucket_start": days(age)} for age in (31, 29)],
        )
        await conn.execute(
            insert(job_firings),
            [{"job_id": job_id, "scheduled_for": days(age)} for age in (2, 0.5)],
        )
    swept = await sweep_history(engine)
    assert (swept.attempts, swept.call_stats, swept.firings) == (1, 1, 1)
    again = await sweep_history(engine)
    assert (again.attempts, again.call_stats, again.firings) == (0, 0, 0)
    async with engine.connect() as conn:
        for table, column, at_least in (
            (job_attempts, job_attempts.c.attempted_at, 29),
            (job_call_stats, job_call_stats.c.bucket_start, 29),
            (job_firings, job_firings.c.scheduled_for, 0.5),
        ):
            oldest = (await conn.execute(select(func.min(column)))).scalar_one()
            remaining = (await conn.execute(select(func.count()).select_from(table))).scalar()
            assert remaining == 1
            assert oldest == days(at_least)


async def finished_queue_jobs(engine: AsyncEngine, database_url: str) -> list[int]:
    """Run queue jobs through a real consumer: three finish, one fails and is held, and
    one, due in a year, still waits. Return their ids in that order."""

    async def handle(delivery: Delivery) -> None:
        if delivery.payload == b"fail":
            raise RuntimeError("held for inspection")

    in_a_year = datetime.now(UTC) + timedelta(days=365)
    async with engine.begin() as conn:
        ids = await enqueue(
            await driver_connection(conn),
            [
                *(NewQueueJob("default", b"ok") for _ in range(3)),
                NewQueueJob("default", b"fail"),
                NewQueueJob("default", b"later", due_at=in_a_year),
            ],
        )
    expected = [*[QueueJobState.FINISHED] * 3, QueueJobState.FAILED, QueueJobState.QUEUED]
    async with consuming(database_url, handle, concurrency=2):
        async with asyncio.timeout(10):
            while await states(engine) != expected:  # noqa: ASYNC110 (polling the database)
                await asyncio.sleep(0.02)
    return ids


async def states(engine: AsyncEngine) -> list[QueueJobState]:
    async with engine.connect() as conn:
        return [state for _, state in await queue_job_states(await driver_connection(conn))]


async def remaining_queue_jobs(engine: AsyncEngine) -> set[int]:
    async with engine.connect() as conn:
        return {job_id for job_id, _ in await queue_job_states(await driver_connection(conn))}


async def test_finished_queue_jobs_older_than_the_retention_are_deleted(
    engine: AsyncEngine, database_url: str
) -> None:
    old_success, old_success_too, recent, old_failure, waiting = await finished_queue_jobs(
        engine, database_url
    )
    await age(engine, [old_success, old_success_too, old_failure], days=8)
    await age(engine, [recent], days=6)
    await age(engine, [waiting], days=90)  # still queued, however old: never deleted

    assert await sweep_finished_queue_jobs(engine) > 0  # the default keeps 7 days
    assert await remaining_queue_jobs(engine) == {recent, waiting}
    assert await sweep_finished_queue_jobs(engine) == 0

    async with engine.begin() as conn:
        assert await set_queue_job_retention_days(conn, 5) == (7, 5)
    assert await sweep_finished_queue_jobs(engine) > 0
    assert await remaining_queue_jobs(engine) == {waiting}
    assert await states(engine) == [QueueJobState.QUEUED]


async def test_the_daily_pass_runs_every_sweep(engine: AsyncEngine, database_url: str) -> None:
    *finished, waiting = await finished_queue_jobs(engine, database_url)
    await age(engine, finished, days=30)
    job_id = await a_job(engine)
    async with engine.begin() as conn:
        await conn.execute(
            insert(job_firings).values(job_id=job_id, scheduled_for=func.now() - timedelta(days=3))
        )
    await sweep_all(engine)
    assert await remaining_queue_jobs(engine) == {waiting}
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(job_firings))).scalar() == 0


async def test_the_retention_setting_defaults_to_seven_days_stored_on_first_read(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:  # an Admin
        response = await bob.get(PATH)
    assert (response.status_code, response.json()) == (200, {"queue_job_retention_days": 7})
    async with engine.connect() as conn:
        stored = await conn.execute(
            select(app_settings.c.value).where(app_settings.c.key == "queue_job_retention_days")
        )
        assert stored.scalar_one() == 7


async def test_changing_the_retention_is_audited_with_before_and_after(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        written = await bob.put(PATH, json={"queue_job_retention_days": 30})
        unchanged = await bob.put(PATH, json={"queue_job_retention_days": 30})
        reread = await bob.get(PATH)
    assert (written.status_code, written.json()) == (200, {"queue_job_retention_days": 30})
    assert unchanged.status_code == 200
    assert reread.json() == {"queue_job_retention_days": 30}
    entries = [row for row in await audit_rows(engine) if row["action"] == "settings.queue_jobs"]
    assert len(entries) == 1  # re-sending the same value changes nothing
    entry = entries[0]
    assert (entry["actor_email"], entry["resource_type"], entry["resource_id"]) == (
        "bob@example.com",
        "settings",
        "queue_jobs",
    )
    assert entry["before"] == {"queue_job_retention_days": 7}
    assert entry["after"] == {"queue_job_retention_days": 30}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # below the minimum
        ({"queue_job_retention_days": 0}, RETENTION_RANGE),
        # above the maximum
        (
            {"queue_job_retention_days": 3651},
            "queue_job_retention_days: must be between 1 and 3650",
        ),
        # a numeric string is not a number
        (
            {"queue_job_retention_days": "7"},
            "queue_job_retention_days: must be an integer",
        ),
        # nor is a boolean
        (
            {"queue_job_retention_days": True},
            "queue_job_retention_days: must be an integer",
        ),
        # nor a fraction
        (
            {"queue_job_retention_days": 7.5},
            "queue_job_retention_days: must be an integer",
        ),
        # the field is required
        ({}, "queue_job_retention_days is required"),
    ],
)
async def test_an_invalid_retention_is_refused_and_changes_nothing(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put(PATH, json=body)
        after = await alice.get(PATH)
    assert (response.status_code, response.json()) == (400, {"error": message})
    assert after.json() == {"queue_job_retention_days": 7}


@pytest.mark.parametrize("method", ["GET", "PUT"])
async def test_both_routes_need_settings_queue_jobs(
    core_app: FastAPI, cast: Cast, method: str
) -> None:
    # dave manages users and roles but holds no settings permission.
    async with client_for(core_app, cast.dave.session) as dave:
        response = await dave.request(method, PATH, json={"queue_job_retention_days": 9})
    assert (response.status_code, response.json()) == (403, FORBIDDEN)
