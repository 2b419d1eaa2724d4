"""A queue job delivered again: recognised by its start marker, never called blindly twice.

The engine hands a job to another worker once the one holding it stops heart-beating.
What the call history already knows of that queue job decides what happens: nothing
(never started: it runs), a `running` row (started, outcome unknown: recorded as lost,
then the retry policy), or a finished row (recorded: it only finishes).
"""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import Cast
from tests.support.attempts import (
    attempts,
    job_row,
    leave_history_row,
    locks,
    queue_rows,
    queue_statuses,
    run_now,
    settled,
    stats,
    worker_for,
)
from tests.support.cli import base_environment, spawn_cli
from tests.support.jobs import create
from tests.support.queue_engine import strand
from tests.support.target import hanging_target, http_target
from zilean.execution.attempt import LOST_ERROR
from zilean.execution.payload import AttemptArgs

pytestmark = pytest.mark.acceptance

HEARTBEAT_TIMEOUT = 1.0  # seconds: shorter than production, so the test waits less


async def killed_mid_attempt(database_url: str, received: list[str]) -> None:
    """Run a real `zilean worker` until the target holds a request, then SIGKILL it."""
    env = base_environment(DATABASE_URL=database_url, SETTINGS_ENCRYPTION_KEY=KEY)
    with spawn_cli(["worker"], env) as worker:
        worker.wait_for("queue.listening")
        for _ in range(300):
            if received:
                break
            await asyncio.sleep(0.05)
        assert received, worker.output
        worker.stop(signal.SIGKILL)


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
        assert await queue_statuses(engine) == ["running"]  # claimed by the dead worker
        [started] = await attempts(engine, job["id"])
        assert started["state"] == "running"  # the start marker, written before the call

        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            waited = await worker.drain(lambda: _lost_and_retry_queued(engine, job["id"]))
    assert waited < HEARTBEAT_TIMEOUT + 5.0
    assert received == ["/hang"]  # the lost attempt's call was not made again
    [lost] = await attempts(engine, job["id"])
    assert (lost["state"], lost["error"], lost["attempt"]) == ("retrying", LOST_ERROR, 1)
    assert lost["finalized_at"] is not None
    [retry] = await queue_rows(engine)
    retry_args = AttemptArgs.from_payload(retry["payload"])
    assert (retry_args.attempt, retry_args.max_attempts) == (2, 3)
    assert set(await locks(engine, job["id"])) == {"0"}  # the retry keeps the member's lock
    row = await job_row(engine, job["id"])
    assert row is not None
    assert (row["invocations_total"], row["invocations_failed"]) == (1, 1)
    [bucket] = await stats(engine, job["id"])
    assert (bucket["total"], bucket["failed"]) == (1, 1)


async def test_a_killed_workers_last_attempt_ends_the_run_and_calls_back(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with hanging_target() as (url, received), http_target() as callbacks:
        job = await create(
            core_app,
            cast.alice.session,
            name="hangs-once",
            url=url,
            exec_timeout_ms=600_000,
            retry_enabled=False,
            on_failure_url=f"{callbacks.base_url}/failed",
        )
        await run_now(core_app, cast.alice.session, job["id"])
        await killed_mid_attempt(database_url, received)
        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            await worker.drain(lambda: settled(engine))
    [lost] = await attempts(engine, job["id"])
    # With retries off, a failure ends the run as `cancelled`, a lost attempt included.
    assert (lost["state"], lost["error"]) == ("cancelled", LOST_ERROR)
    assert await queue_statuses(engine) == ["finished"]
    assert await locks(engine, job["id"]) == {}
    [callback] = callbacks.requests
    assert json.loads(callback.body)["last_error"] == LOST_ERROR


async def test_a_recorded_attempt_delivered_again_only_finishes(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """A worker that died after recording, before the engine heard the job finished."""
    with http_target() as target:
        job = await create(core_app, cast.alice.session, url=f"{target.base_url}/work")
        await run_now(core_app, cast.alice.session, job["id"])
        [queue_job_id] = await strand(engine)
        await leave_history_row(engine, job["id"], queue_job_id, "succeeded")
        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            await worker.drain(lambda: settled(engine))
    assert target.requests == []  # recorded already: not called
    assert [row["state"] for row in await attempts(engine, job["id"])] == ["succeeded"]
    assert await queue_statuses(engine) == ["finished"]
    row = await job_row(engine, job["id"])
    assert row is not None
    assert row["invocations_total"] == 0  # nothing recorded a second time


async def test_a_job_claimed_but_never_started_runs_normally(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """A worker that died between claiming a batch and starting it (or whose claim's
    answer was lost): no start marker, so no call was made and it simply runs."""
    with http_target() as target:
        job = await create(core_app, cast.alice.session, url=f"{target.base_url}/work")
        await run_now(core_app, cast.alice.session, job["id"])
        assert len(await strand(engine)) == 1
        async with worker_for(database_url, heartbeat_timeout=HEARTBEAT_TIMEOUT) as worker:
            await worker.drain(lambda: settled(engine))
    assert len(target.requests) == 1
    [row] = await attempts(engine, job["id"])
    assert (row["state"], row["error"], row["attempt"]) == ("succeeded", None, 1)


async def _lost_and_retry_queued(engine: AsyncEngine, job_id: str) -> bool:
    rows = await attempts(engine, job_id)
    return (
        bool(rows)
        and rows[0]["state"] == "retrying"
        and await queue_statuses(engine)
        == [
            "finished",
            "queued",
        ]
    )
