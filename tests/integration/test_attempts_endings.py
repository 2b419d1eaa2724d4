"""The ends of a run that no endpoint decides: a worker lost, an attempt past the safety
net or the soft stop, a job that cannot be read. Each is recorded (or says why not),
releases the member's lock, completes a one-off and sends the failure callback."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast
from tests.support.attempts import (
    attempts,
    calls,
    http_job,
    job_row,
    leave_history_row,
    locks,
    logged,
    queue_statuses,
    run_now,
    settled,
    soon,
    worker_for,
)
from tests.support.jobs import create
from tests.support.queue_engine import strand
from tests.support.target import HttpTarget, hanging_target, http_target
from zilean.execution.attempt import (
    ABANDONED_ERROR,
    GIVEN_UP_ERROR,
    INTERRUPTED_ERROR,
    LOST_ERROR,
)

HEARTBEAT_TIMEOUT = 1.0  # seconds: shorter than production, so the test waits less


def reports(callbacks: HttpTarget) -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in callbacks.requests]


async def test_a_lost_attempt_that_spends_the_budget_fails_the_run_and_calls_back(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """A worker died mid-call on the run's last attempt: the engine hands the queue job to
    another worker once its heartbeat is stale, which records it lost and ends the run."""
    with http_target() as target, http_target() as callbacks:
        job = await http_job(
            core_app, cast.alice.session, target, name="reaped", retry_max_attempts=1,
            on_failure_url=f"{callbacks.base_url}/failed",
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        [queue_job_id] = await strand(engine)
        await leave_history_row(engine, job["id"], queue_job_id, "running", max_attempts=1)
        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            await worker.drain(lambda: settled(engine))
        [entry] = (await calls(core_app, cast.alice.session, job["id"])).json()
    assert target.requests == []  # its call may have gone out: never made again blindly
    assert (entry["state"], entry["last_error"]) == ("failed", LOST_ERROR)
    assert entry["last_call"]["job_name"] == "reaped"
    assert entry["last_call"]["duration_ms"] is None  # unknown
    assert await locks(engine, job["id"]) == {}
    assert reports(callbacks) == [
        {
            "id": job["id"],
            "name": "reaped",
            "status": "failed",
            "attempts": 1,
            "last_error": LOST_ERROR,
            "status_code": None,
        }
    ]


async def test_an_attempt_abandoned_by_the_safety_net_is_recorded_and_completes_its_one_off(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with hanging_target() as (url, received), http_target() as callbacks:
        job = await create(
            core_app, cast.alice.session, name="stuck", url=url, schedule_type="one_off",
            run_at=soon(), exec_timeout_ms=600_000, retry_max_attempts=1,
            on_failure_url=f"{callbacks.base_url}/failed",
        )  # fmt: skip
        async with worker_for(database_url, safety_net=0.5) as worker:
            await worker.drain(lambda: settled(engine))
    assert received == ["/hang"]
    [attempt] = await attempts(engine, job["id"])
    assert (attempt["state"], attempt["error"]) == ("failed", ABANDONED_ERROR)
    row = await job_row(engine, job["id"])
    assert row is not None
    assert not row["enabled"]  # `keep`: the one-off is done
    assert row["running_since_by_pool"] == {}
    assert [report["last_error"] for report in reports(callbacks)] == [ABANDONED_ERROR]
    assert await queue_statuses(engine) == ["finished"]


async def test_an_attempt_outliving_the_soft_stop_is_recorded_and_not_made_again(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with hanging_target() as (url, received), http_target() as callbacks:
        job = await create(
            core_app, cast.alice.session, name="slow", url=url, exec_timeout_ms=600_000,
            retry_enabled=False, on_failure_url=f"{callbacks.base_url}/failed",
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url, soft_stop=0.3) as worker:
            await worker.drain(lambda: _has_received(received))
        # That worker stopped without finishing the queue job; the next one only does so.
        [attempt] = await attempts(engine, job["id"])
        assert (attempt["state"], attempt["error"]) == ("cancelled", INTERRUPTED_ERROR)
        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            await worker.drain(lambda: settled(engine))
    assert received == ["/hang"]
    assert [row["state"] for row in await attempts(engine, job["id"])] == ["cancelled"]
    assert await locks(engine, job["id"]) == {}
    assert [report["last_error"] for report in reports(callbacks)] == [INTERRUPTED_ERROR]


@asynccontextmanager
async def variables_unreadable(engine: AsyncEngine) -> AsyncIterator[None]:
    """Make every attempt's read fail while the job rows stay writable: the global
    variables are locked away, and new sessions give up on a lock after 50 ms."""
    async with engine.connect() as conn:
        database = await conn.scalar(text("SELECT current_database()"))
        await conn.execute(text(f'ALTER DATABASE "{database}" SET lock_timeout = 50'))
        await conn.commit()
    try:
        async with engine.connect() as holder, holder.begin():
            await holder.execute(text("LOCK TABLE global_variables IN ACCESS EXCLUSIVE MODE"))
            yield
    finally:
        async with engine.connect() as conn:
            await conn.execute(text(f'ALTER DATABASE "{database}" RESET lock_timeout'))
            await conn.commit()


async def test_a_run_whose_job_cannot_be_read_is_given_up_after_its_retries(
    core_app: FastAPI,
    engine: AsyncEngine,
    database_url: str,
    cast: Cast,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with http_target() as target, http_target() as callbacks:
        job = await http_job(
            core_app, cast.alice.session, target, name="unreadable", schedule_type="one_off",
            run_at=soon(), on_failure_url=f"{callbacks.base_url}/failed",
        )  # fmt: skip
        assert set(await locks(engine, job["id"])) == {"0"}  # taken when it was queued
        with caplog.at_level(logging.WARNING):
            async with (
                variables_unreadable(engine),
                worker_for(database_url, database_retries=2) as worker,
            ):
                await worker.drain(lambda: settled(engine))
    assert target.requests == []  # nothing was ever sent
    assert await attempts(engine, job["id"]) == []  # and nothing started
    row = await job_row(engine, job["id"])
    assert row is not None
    assert row["running_since_by_pool"] == {}  # the member's lock is back
    assert not row["enabled"]  # and the one-off is done
    assert reports(callbacks) == [
        {
            "id": job["id"],
            "name": "unreadable",
            "status": "failed",
            "attempts": 1,
            "last_error": GIVEN_UP_ERROR,
            "status_code": None,
        }
    ]
    given_up = logged(caplog, "attempt.given_up")
    assert [(entry["job_id"], entry["pool_index"]) for entry in given_up] == [(job["id"], 0)]


async def _has_received(received: list[str]) -> bool:
    return bool(received)
