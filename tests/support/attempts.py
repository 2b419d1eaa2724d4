"""A real HTTP worker for attempt tests, driven pass by pass, and readers for what it wrote.

`worker_for` registers the attempt task on a Procrastinate app with its own engine (so a
test can count exactly the worker's statements) and yields a `DrivenWorker`. Each pass is
`run_worker_async(wait=False)`: it runs every attempt that is due, then returns.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import procrastinate
from fastapi import FastAPI
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import client_for
from tests.support.jobs import create
from tests.support.target import HttpTarget, ScriptedResponse
from zilean.crypto.secretbox import SecretBox
from zilean.db.engine import create_engine
from zilean.db.tables import job_attempts, job_call_stats, scheduled_jobs
from zilean.execution.attempt import AttemptRunner, register_attempt_task
from zilean.execution.queues import Queue, create_queue_app
from zilean.jobkinds.http.call import new_client

MAX_PASSES = 200
PASS_INTERVAL = 0.01  # seconds between passes that found nothing more to do


@dataclass
class DrivenWorker:
    app: procrastinate.App
    runner: AttemptRunner
    engine: AsyncEngine  # the worker's own engine

    async def drain(self, until: Callable[[], Awaitable[bool]], *, passes: int = MAX_PASSES) -> int:
        """Run worker passes until `until()` holds; return how many passes it took.

        Each pass runs every attempt that is due and waits for failure callbacks.
        """
        for done in range(1, passes + 1):
            await self.app.run_worker_async(
                queues=[str(Queue.DEFAULT)], wait=False, install_signal_handlers=False
            )
            await self.runner.callbacks.settle()
            if await until():
                return done
            await asyncio.sleep(PASS_INTERVAL)  # a later attempt may not be due yet
        raise AssertionError(f"still waiting after {passes} worker passes")


@asynccontextmanager
async def worker_for(
    database_url: str, *, on_failure_url: str | None = None
) -> AsyncIterator[DrivenWorker]:
    engine = create_engine(database_url)
    app = create_queue_app(database_url)
    try:
        async with new_client() as client:
            runner = AttemptRunner(
                engine,
                client,
                SecretBox(base64.b64decode(KEY)),
                default_failure_url=on_failure_url,
            )
            register_attempt_task(app, runner)
            try:
                async with app.open_async():
                    yield DrivenWorker(app, runner, engine)
            finally:
                await runner.close()
    finally:
        await engine.dispose()


async def http_job(app: FastAPI, session: str, target: HttpTarget, **fields: Any) -> dict[str, Any]:
    """Create an HTTP job (through the API) that calls `target`."""
    return await create(app, session, url=f"{target.base_url}/work", **fields)


async def run_now(app: FastAPI, session: str, job_id: str) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.post(f"/api/jobs/{job_id}/run")


async def calls(app: FastAPI, session: str, job_id: str, **params: Any) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.get(f"/api/jobs/{job_id}/calls", params=params)


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
    """The status of every queue job, oldest first."""
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT status FROM procrastinate_jobs ORDER BY id"))
        return [str(status) for status in rows.scalars()]


async def settled(engine: AsyncEngine) -> bool:
    """True when the queue holds jobs and none is waiting or running."""
    statuses = await queue_statuses(engine)
    return bool(statuses) and not {"todo", "doing"} & set(statuses)
