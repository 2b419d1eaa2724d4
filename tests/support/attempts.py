"""A real HTTP worker for attempt tests, running live, and readers for what it wrote.

`worker_for` starts the HTTP worker's consumer and attempt runner in the background (a
real PgQueuer worker on the test's database) and yields a `LiveWorker`; `drain` waits,
with a timeout, until a condition on the database holds. Time parameters in these tests
are small, so waiting on the real worker is fast.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import client_for
from tests.support.jobs import create
from tests.support.target import HttpTarget, ScriptedResponse
from zilean.crypto.secretbox import SecretBox
from zilean.db.engine import driver_connection
from zilean.db.tables import job_attempts, job_call_stats, scheduled_jobs
from zilean.db.urls import libpq_url
from zilean.execution.attempt import (
    ATTEMPT_SAFETY_NET,
    DATABASE_RETRIES,
    RECORD_PATIENCE,
    AttemptRunner,
    attempt_handler,
    interrupt_overrun,
)
from zilean.execution.payload import AttemptArgs
from zilean.execution.queues import Queue
from zilean.jobkinds.http.call import new_client
from zilean.jobkinds.http.caller import http_callers
from zilean.queue_engine.consumer import HEARTBEAT_TIMEOUT, QueueConsumer
from zilean.queue_engine.statements import queue_job_states, queue_jobs

DRAIN_TIMEOUT = 20.0  # seconds a condition may take to hold
# How far ahead a test one-off is due: enough for its create request to land before then
# on a loaded machine (300 ms was not, in CI), little enough to keep the test quick.
ONE_OFF_LEAD = timedelta(seconds=1)
POLL_INTERVAL = 0.01  # seconds between checks of the condition


@dataclass
class LiveWorker:
    runner: AttemptRunner
    consumer: QueueConsumer

    async def drain(
        self, until: Callable[[], Awaitable[bool]], *, within: float = DRAIN_TIMEOUT
    ) -> float:
        """Wait until `until()` holds, then for failure callbacks; return seconds waited."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while not await until():
            if loop.time() - started > within:
                raise AssertionError(f"still waiting after {within} s")
            await asyncio.sleep(POLL_INTERVAL)
        await self.runner.callbacks.settle()
        await self.runner.outbox.settle()
        return loop.time() - started


@asynccontextmanager
async def worker_for(
    database_url: str,
    *,
    on_failure_url: str | None = None,
    concurrency: int = 10,
    soft_stop: float = 5.0,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    record_patience: float = RECORD_PATIENCE,
    safety_net: float = ATTEMPT_SAFETY_NET,
    database_retries: int = DATABASE_RETRIES,
) -> AsyncIterator[LiveWorker]:
    """Run the HTTP worker on `database_url` for the block; stop it (draining) after."""
    client = new_client()
    runner = AttemptRunner(
        database_url,
        http_callers(client, SecretBox(base64.b64decode(KEY))),
        client,
        default_failure_url=on_failure_url,
        record_patience=record_patience,
    )
    consumer = QueueConsumer(
        libpq_url(database_url),
        str(Queue.DEFAULT),
        attempt_handler(runner, safety_net=safety_net, database_retries=database_retries),
        concurrency=concurrency,
        application_name="zilean-test-worker",
        soft_stop=soft_stop,
        on_overrun=lambda deliveries: interrupt_overrun(runner, deliveries),
        heartbeat_timeout=heartbeat_timeout,
    )
    runner.run_continuations_on(consumer)
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.wait_for(consumer.started.wait(), timeout=10)
        yield LiveWorker(runner, consumer)
    finally:
        stop.set()
        await running
        await runner.callbacks.settle()
        await runner.outbox.settle()
        await runner.close()
        await client.close()


def soon() -> str:
    """A `run_at` just ahead of now."""
    return (datetime.now(UTC) + ONE_OFF_LEAD).isoformat()


async def http_job(app: FastAPI, session: str, target: HttpTarget, **fields: Any) -> dict[str, Any]:
    """Create an HTTP job (through the API) that calls `target`."""
    return await create(app, session, url=f"{target.base_url}/work", **fields)


async def run_now(app: FastAPI, session: str, job_id: str) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.post(f"/api/jobs/{job_id}/run")


async def calls(app: FastAPI, session: str, job_id: str, **params: Any) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.get(f"/api/jobs/{job_id}/calls", params=params)


async def add_variable(
    app: FastAPI, session: str, name: str, value: str, *, secret: bool = False
) -> dict[str, Any]:
    """Create a global variable through the API; return it as the API shows it."""
    async with client_for(app, session) as client:
        response = await client.post(
            "/api/global-variables",
            json={"name": name, "value": value, "is_secret": secret, "allow_in_scripts": False},
        )
    assert response.status_code == 201, response.text
    variable: dict[str, Any] = response.json()
    return variable


async def leave_history_row(
    engine: AsyncEngine, job_id: str, queue_job_id: int, state: str, *, max_attempts: int = 5
) -> None:
    """Write the history row a worker that died left for this run-now queue job: its
    start marker (`running`), or its recorded first attempt."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts,"
                " trigger, pool_index, loop_iteration, attempted_at, finalized_at)"
                " VALUES (:job, :queue_job, :state, 1, :max_attempts, 'run_now', 0, 0, now(),"
                " CASE WHEN :state = 'running' THEN NULL ELSE now() END)"
            ),
            {
                "job": job_id,
                "queue_job": queue_job_id,
                "state": state,
                "max_attempts": max_attempts,
            },
        )


def logged(caplog: pytest.LogCaptureFixture, action: str) -> list[dict[str, Any]]:
    """The structured log entries with this `action` that `caplog` captured."""
    return [
        record.msg
        for record in caplog.records
        if isinstance(record.msg, dict) and record.msg.get("action") == action
    ]


def remaining(count: int) -> ScriptedResponse:
    """A countdown endpoint's answer."""
    return ScriptedResponse(body=json.dumps({"result": {"remaining": count}}).encode())


async def attempts(engine: AsyncEngine, job_id: str) -> list[dict[str, Any]]:
    """The job's attempt rows, oldest first."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_attempts)
            .where(job_attempts.c.job_id == uuid.UUID(job_id))
            .order_by(job_attempts.c.id)
        )
        return [dict(row) for row in rows.mappings()]


async def job_row(engine: AsyncEngine, job_id: str) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        row = await conn.execute(select(scheduled_jobs).where(scheduled_jobs.c.id == job_id))
        found = row.mappings().first()
        return None if found is None else dict(found)


async def locks(engine: AsyncEngine, job_id: str) -> dict[str, Any]:
    row = await job_row(engine, job_id)
    assert row is not None
    return dict(row["running_since_by_pool"])


async def stats(engine: AsyncEngine, job_id: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_call_stats).where(job_call_stats.c.job_id == uuid.UUID(job_id))
        )
        return [dict(row) for row in rows.mappings()]


async def queue_statuses(engine: AsyncEngine) -> list[str]:
    """Where every queue job is now (`QueueJobState`), oldest first."""
    async with engine.connect() as conn:
        return [str(state) for _, state in await queue_job_states(await driver_connection(conn))]


async def settled(engine: AsyncEngine) -> bool:
    """True when the queue has held jobs and none is waiting or running any more."""
    async with engine.connect() as conn:
        states = await queue_job_states(await driver_connection(conn))
    return bool(states) and not any(state.unfinished for _, state in states)


async def queue_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    """The queue jobs still in the engine's table, with how often they were handed back."""
    async with engine.connect() as conn:
        return await queue_jobs(await driver_connection(conn))


async def queued_args(engine: AsyncEngine) -> list[AttemptArgs]:
    """The payload of every queue job still in the engine's table, oldest first."""
    return [AttemptArgs.from_payload(row["payload"]) for row in await queue_rows(engine)]
