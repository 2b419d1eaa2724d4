"""The stalled-attempt reaper settles the attempts of a worker killed mid-call."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.integration.conftest import KEY
from tests.support.actors import Cast
from tests.support.attempts import attempts, job_row, locks, queue_statuses, run_now, stats
from tests.support.cli import base_environment, spawn_cli
from tests.support.jobs import create
from tests.support.servers import live_server
from zilean.execution.reaper import LOST_ERROR, StalledAttemptReaper

pytestmark = pytest.mark.acceptance

STALLED_AFTER = 3.0  # seconds: shorter than production, so the test waits less


@contextmanager
def hanging_target() -> Iterator[tuple[str, list[str]]]:
    """Serve a route that never answers; yield its URL and the paths it received."""
    received: list[str] = []
    never = asyncio.Event()

    async def hang(request: Request) -> Response:
        received.append(request.url.path)
        await never.wait()
        return Response("never")

    with live_server(Starlette(routes=[Route("/hang", hang)])) as base_url:
        yield f"{base_url}/hang", received


async def killed_mid_attempt(database_url: str, received: list[str]) -> None:
    """Run a real worker until the target holds a request, then SIGKILL it."""
    env = base_environment(DATABASE_URL=database_url, SETTINGS_ENCRYPTION_KEY=KEY)
    with spawn_cli(["worker"], env) as worker:
        worker.wait_for("Starting worker on queues default")
        for _ in range(300):
            if received:
                break
            await asyncio.sleep(0.05)
        assert received, worker.output
        worker.stop(signal.SIGKILL)


async def reap_until_settled(reaper: StalledAttemptReaper, within: float = 15.0) -> None:
    for _ in range(int(within / 0.25)):
        if await reaper.run_once():
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"nothing reaped within {within}s")


async def test_a_killed_workers_attempt_is_recorded_lost_and_retried(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with hanging_target() as (url, received):
        job = await create(
            core_app,
            cast.alice.session,
            name="hangs",
            url=url,
            exec_timeout_ms=600_000,
            retry_max_attempts=3,
            retry_base_delay_ms=60_000,  # the retry stays queued while the test looks
        )
        await run_now(core_app, cast.alice.session, job["id"])
        await killed_mid_attempt(database_url, received)
        assert await queue_statuses(engine) == ["doing"]

        reaper = StalledAttemptReaper(engine, stalled_after=STALLED_AFTER)
        await reap_until_settled(reaper)

    [lost] = await attempts(engine, job["id"])
    assert (lost["state"], lost["error"], lost["attempt"]) == ("failed", LOST_ERROR, 1)
    assert lost["queue_job_id"] is not None
    assert await queue_statuses(engine) == ["failed", "todo"]
    async with engine.connect() as conn:
        retry_args = await conn.scalar(
            text("SELECT args FROM procrastinate_jobs WHERE status = 'todo'")
        )
    assert (retry_args["attempt"], retry_args["max_attempts"]) == (2, 3)
    assert set(await locks(engine, job["id"])) == {"0"}  # the retry keeps the member's lock
    row = await job_row(engine, job["id"])
    assert row is not None
    assert (row["invocations_total"], row["invocations_failed"]) == (1, 1)
    [bucket] = await stats(engine, job["id"])
    assert (bucket["total"], bucket["failed"]) == (1, 1)

    # A second pass finds nothing and changes nothing.
    assert await reaper.run_once() is False
    assert len(await attempts(engine, job["id"])) == 1
    assert await queue_statuses(engine) == ["failed", "todo"]


async def test_a_killed_workers_last_attempt_releases_the_lock(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with hanging_target() as (url, received):
        job = await create(
            core_app,
            cast.alice.session,
            name="hangs-once",
            url=url,
            exec_timeout_ms=600_000,
            retry_enabled=False,
        )
        await run_now(core_app, cast.alice.session, job["id"])
        await killed_mid_attempt(database_url, received)
        reaper = StalledAttemptReaper(engine, stalled_after=STALLED_AFTER)
        await reap_until_settled(reaper)

    [lost] = await attempts(engine, job["id"])
    assert (lost["state"], lost["error"]) == ("failed", LOST_ERROR)
    assert await queue_statuses(engine) == ["failed"]
    assert await locks(engine, job["id"]) == {}
    assert await reaper.run_once() is False
    assert len(await attempts(engine, job["id"])) == 1


async def test_a_recorded_attempt_is_only_marked_finished(
    engine: AsyncEngine, core_app: FastAPI, cast: Cast
) -> None:
    """A worker that died between recording and Procrastinate's own finish write."""
    job = await create(core_app, cast.alice.session, name="recorded", url="http://127.0.0.1:9/")
    await run_now(core_app, cast.alice.session, job["id"])
    async with engine.begin() as conn:
        queue_job_id = await conn.scalar(
            text("UPDATE procrastinate_jobs SET status = 'doing' RETURNING id")
        )
        await conn.execute(
            text(
                "INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts,"
                " trigger, pool_index, loop_iteration, attempted_at, finalized_at)"
                " VALUES (:job, :queue_job, 'succeeded', 1, 5, 'run_now', 0, 0, now(), now())"
            ),
            {"job": job["id"], "queue_job": queue_job_id},
        )
    reaper = StalledAttemptReaper(engine)
    assert await reaper.run_once() is True
    assert await queue_statuses(engine) == ["succeeded"]
    assert [a["state"] for a in await attempts(engine, job["id"])] == ["succeeded"]
    assert await reaper.run_once() is False
