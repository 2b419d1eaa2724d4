"""The attempt path checks no connection before use: a dead one is retried once, and
recording is idempotent per queue job, so a repeated write records nothing twice."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
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
from tests.support.attempts import attempts, http_job, job_row, run_now, stats
from tests.support.jobs import create
from tests.support.servers import live_server
from tests.support.target import http_target
from zilean.crypto.secretbox import SecretBox
from zilean.db.engine import driver_connection
from zilean.db.urls import libpq_url
from zilean.execution.attempt import AttemptRunner, QueuedAttempt
from zilean.execution.payload import AttemptArgs
from zilean.execution.recording import (
    AttemptRecord,
    AttemptState,
    Continuation,
    Ending,
    Recorded,
)
from zilean.jobkinds.http.call import new_client
from zilean.jobkinds.http.caller import http_callers
from zilean.queue_engine.statements import queue_jobs, take_queued

TERMINATE_OTHERS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


@asynccontextmanager
async def a_runner(database_url: str) -> AsyncIterator[AttemptRunner]:
    """The HTTP worker's attempt runner; its two statements use its own connections."""
    client = new_client()
    runner = AttemptRunner(
        database_url, http_callers(client, SecretBox(base64.b64decode(KEY))), client
    )
    try:
        yield runner
    finally:
        await runner.close()
        await client.close()


async def queued_attempts(engine: AsyncEngine) -> list[tuple[QueuedAttempt, AttemptArgs]]:
    """Every queued attempt, taken off the queue (we run them by hand)."""
    async with engine.begin() as conn:
        rows = await take_queued(await driver_connection(conn))
    return [
        (QueuedAttempt(row["id"], row["due_at"]), AttemptArgs.from_payload(row["payload"]))
        for row in rows
    ]


def terminate_other_backends(database_url: str) -> int:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute(TERMINATE_OTHERS).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_connection_killed_between_attempts_is_replaced_and_both_are_recorded(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target)
        async with a_runner(database_url) as runner:
            await run_now(core_app, cast.alice.session, job["id"])
            [(queued, args)] = await queued_attempts(engine)
            assert await runner.run(queued, args) is AttemptState.SUCCEEDED
            # The runner's pooled connections die, as in a Postgres restart.
            assert terminate_other_backends(database_url) >= 1
            await run_now(core_app, cast.alice.session, job["id"])
            [(queued, args)] = await queued_attempts(engine)
            with caplog.at_level(logging.INFO):
                assert await runner.run(queued, args) is AttemptState.SUCCEEDED
    assert [row["state"] for row in await attempts(engine, job["id"])] == ["succeeded"] * 2
    assert "attempt.reconnect" in caplog.text
    assert "attempt.record_failed" not in caplog.text


async def test_a_connection_killed_during_the_call_still_records_the_attempt_once(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    killed: list[int] = []
    calls = 0

    async def kill_then_answer(request: Request) -> Response:
        nonlocal calls
        calls += 1
        if calls == 2:  # once the first run has left idle connections in every pool
            killed.append(terminate_other_backends(database_url))
        return Response("ok")

    app = Starlette(routes=[Route("/{path:path}", kill_then_answer)])
    with live_server(app) as base_url:
        job = await http_job_at(core_app, cast.alice.session, base_url)
        async with a_runner(database_url) as runner:
            for _ in range(2):
                await run_now(core_app, cast.alice.session, job["id"])
                [(queued, args)] = await queued_attempts(engine)
                with caplog.at_level(logging.INFO):
                    assert await runner.run(queued, args) is AttemptState.SUCCEEDED
    assert killed == [killed[0]]
    assert killed[0] >= 2  # the read's and the recording's pooled connections among them
    rows = await attempts(engine, job["id"])
    assert [row["state"] for row in rows] == ["succeeded", "succeeded"]
    assert "attempt.reconnect" in caplog.text
    assert "attempt.record_failed" not in caplog.text
    stored = await job_row(engine, job["id"])
    assert stored is not None
    assert (stored["invocations_total"], stored["running_since_by_pool"]) == (2, {})


async def http_job_at(app: FastAPI, session: str, base_url: str) -> dict[str, Any]:
    return await create(app, session, url=f"{base_url}/work", retry_max_attempts=1)


async def a_failed_attempt(
    core_app: FastAPI, engine: AsyncEngine, runner: AttemptRunner, cast: Cast
) -> tuple[dict[str, Any], AttemptRecord]:
    """A job queued by run-now, taken off the queue and started (its start marker
    written), and a failed record of its attempt."""
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target)
    await run_now(core_app, cast.alice.session, job["id"])
    [(queued, args)] = await queued_attempts(engine)
    loaded = await runner.statements.load(args, queued.queue_job_id, queued.due_at)
    assert loaded is not None
    assert loaded.started
    record = AttemptRecord(
        args=args,
        queue_job_id=queued.queue_job_id,
        state=AttemptState.FAILED,
        duration_ms=12,
        error="boom",
        last_call=None,
    )
    return job, record


async def test_recording_the_same_queue_job_twice_records_it_once(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    async with a_runner(database_url) as runner:
        job, record = await a_failed_attempt(core_app, engine, runner, cast)
        first = await runner.statements.record(record, Ending(release=True))
        second = await runner.statements.record(record, Ending(release=True))
    assert first.at is not None
    assert second.at is None  # nothing written: the caller queues no continuation either
    assert len(await attempts(engine, job["id"])) == 1
    [bucket] = await stats(engine, job["id"])
    assert (bucket["total"], bucket["failed"]) == (1, 1)
    stored = await job_row(engine, job["id"])
    assert stored is not None
    assert (stored["invocations_total"], stored["invocations_failed"]) == (1, 1)


async def test_a_repeated_recording_queues_its_continuation_once(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    async with a_runner(database_url) as runner:
        _, record = await a_failed_attempt(core_app, engine, runner, cast)
        args = record.args
        retry = Continuation("default", replace(args, attempt=2), delay_ms=250)
        first = await runner.statements.record(record, Ending(release=False), retry)
        second = await runner.statements.record(record, Ending(release=False), retry)
    assert first.at is not None
    assert second.at is None
    [(queued, next_args)] = await queued_attempts(engine)
    # Due from the recording time.
    assert queued.due_at is not None
    assert queued.due_at - first.at == timedelta(milliseconds=250)
    assert (next_args.attempt, next_args.pool_index) == (2, args.pool_index)


async def test_a_repeated_adopting_recording_hands_back_the_iteration_it_claimed(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    # A loop iteration due at once is claimed for the recording worker; if the answer to
    # that statement was lost, its repeat must find the same claim (and marker) rather
    # than leave it to go stale and be recorded as lost.
    claimant, other = uuid.uuid4(), uuid.uuid4()
    async with a_runner(database_url) as runner:
        job, failed = await a_failed_attempt(core_app, engine, runner, cast)
        record = replace(failed, state=AttemptState.SUCCEEDED, error=None)
        args = record.args
        following = Continuation("default", replace(args, loop_iteration=1), delay_ms=0)
        ending = Ending(release=False)
        first = await runner.statements.record(record, ending, following, claimant=claimant)
        again = await runner.statements.record(record, ending, following, claimant=claimant)
        elsewhere = await runner.statements.record(record, ending, following, claimant=other)
    assert first.at is not None
    assert first.adopted is not None
    assert (again.at, elsewhere) == (None, Recorded(None))
    assert again.adopted is not None
    assert again.adopted.queue_job_id == first.adopted.queue_job_id
    loaded = first.adopted.loaded
    assert (loaded.started, loaded.prior, loaded.runnable) == (True, None, True)
    assert loaded.row["id"] == uuid.UUID(job["id"])
    assert AttemptArgs.from_payload(first.adopted.payload) == following.args
    async with engine.connect() as conn:
        [claim] = await queue_jobs(await driver_connection(conn))
        manager = (await conn.execute(text("SELECT queue_manager_id FROM pgqueuer"))).scalar_one()
    assert (claim["id"], claim["status"], manager) == (
        first.adopted.queue_job_id, "picked", claimant,
    )  # fmt: skip
    rows = await attempts(engine, job["id"])
    assert [(row["loop_iteration"], row["state"]) for row in rows] == [
        (0, "succeeded"),
        (1, "running"),
    ]
    assert rows[1]["queue_job_id"] == first.adopted.queue_job_id
    stored = await job_row(engine, job["id"])
    assert stored is not None
    assert stored["invocations_total"] == 1  # recorded once
