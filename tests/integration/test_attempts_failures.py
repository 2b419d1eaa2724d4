"""Failed attempts: backoff, exhaustion, cancellation, redaction and the failure callback."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import (
    add_variable,
    attempts,
    calls,
    http_job,
    job_row,
    locks,
    queue_rows,
    queue_statuses,
    run_now,
    settled,
    stats,
    worker_for,
)
from tests.support.target import HttpTarget, ScriptedResponse, http_target

FAIL = ScriptedResponse(status=500, body=b"boom")


async def test_retries_back_off_exponentially_from_the_rows_settings(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(*(FAIL for _ in range(5)))
        job = await http_job(
            core_app, cast.alice.session, target,
            retry_base_delay_ms=10, retry_multiplier=2, retry_max_attempts=5,
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"]) for row in rows] == [
        *((number, "retrying") for number in range(1, 5)),
        (5, "failed"),  # the budget is spent: the run ends failed
    ]
    assert {row["max_attempts"] for row in rows} == {5}
    assert {row["error"] for row in rows} == {"endpoint returned status 500: boom"}
    # Each retry is queued for exactly base × 2^(attempt−1) after the failure was recorded.
    delays = [
        later["scheduled_at"] - earlier["finalized_at"]
        for earlier, later in itertools.pairwise(rows)
    ]
    assert delays == [timedelta(milliseconds=ms) for ms in (10, 20, 40, 80)]
    gaps = [
        later["scheduled_at"] - earlier["scheduled_at"]
        for earlier, later in itertools.pairwise(rows)
    ]
    assert all(gap >= delay for gap, delay in zip(gaps, delays, strict=True))
    # Five attempts over ~150 ms can straddle a minute boundary: sum the buckets.
    buckets = await stats(engine, job["id"])
    assert sum(b["total"] for b in buckets) == sum(b["failed"] for b in buckets) == 5
    assert sum(b["completed"] for b in buckets) == 0
    row = await job_row(engine, job["id"])
    assert row is not None
    assert (row["invocations_total"], row["invocations_failed"]) == (5, 5)
    # The engine saw five finished jobs: the retries are ours, not its.
    assert await queue_statuses(engine) == ["finished"] * 5


async def test_exhausted_retries_release_the_lock_so_a_later_run_succeeds(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(FAIL, FAIL)
        job = await http_job(
            core_app, cast.alice.session, target, retry_base_delay_ms=10, retry_max_attempts=2
        )
        async with worker_for(database_url) as worker:
            await run_now(core_app, cast.alice.session, job["id"])
            await worker.drain(lambda: settled(engine))
            assert await locks(engine, job["id"]) == {}
            again = await run_now(core_app, cast.alice.session, job["id"])
            assert again.status_code == 200, again.text
            await worker.drain(lambda: settled(engine))
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"]) for row in rows] == [
        (1, "retrying"),
        (2, "failed"),
        (1, "succeeded"),
    ]
    assert await locks(engine, job["id"]) == {}


@pytest.mark.parametrize(
    ("fields", "response"),
    [
        ({"retry_enabled": False}, FAIL),  # retries off: the failure is cancelled outright
        ({"url": "http://{{HOST}}:99999/x"}, None),  # a URL that can never be sent: permanent
    ],
)
async def test_a_failure_that_must_not_be_retried_is_cancelled_after_one_attempt(
    core_app: FastAPI,
    engine: AsyncEngine,
    database_url: str,
    cast: Cast,
    fields: dict[str, object],
    response: ScriptedResponse | None,
) -> None:
    with http_target() as target:
        if response is not None:
            target.respond(response)
        job = await http_job(core_app, cast.alice.session, target, retry_base_delay_ms=10)
        async with client_for(core_app, cast.alice.session) as alice:
            changed = await alice.put(f"/api/jobs/{job['id']}", json={**job, **fields})
            assert changed.status_code == 200, changed.text
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    [attempt] = await attempts(engine, job["id"])
    assert attempt["state"] == "cancelled"
    assert attempt["max_attempts"] == (1 if "retry_enabled" in fields else 5)
    assert await locks(engine, job["id"]) == {}
    assert await queue_statuses(engine) == ["finished"]


SECRET = "tok-5ecret-value"


async def test_secret_values_never_reach_the_call_history(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    await add_variable(core_app, cast.alice.session, "TOKEN", SECRET, secret=True)
    with http_target() as target:
        echo = json.dumps({"error": f"bad token {SECRET}"}).encode()
        target.respond(ScriptedResponse(status=401, body=echo))
        job = await http_job(
            core_app, cast.alice.session, target, retry_enabled=False,
            headers={"X-Token": "{{TOKEN}}"}, query_params={"token": "{{TOKEN}}"},
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
        history = await calls(core_app, cast.alice.session, job["id"])
    [sent] = target.requests
    assert sent.headers["x-token"] == SECRET  # the call itself carries the real value
    assert sent.query == f"token={SECRET}"
    [attempt] = await attempts(engine, job["id"])
    stored = json.dumps({"error": attempt["error"], "last_call": attempt["last_call"]})
    assert SECRET not in stored
    assert attempt["error"] == 'endpoint returned status 401: {"error": "bad token REDACTED"}'
    assert attempt["last_call"]["url"] == f"{target.base_url}/work?token=REDACTED"
    assert attempt["last_call"]["response_snippet"] == '{"error": "bad token REDACTED"}'
    assert history.status_code == 200
    assert SECRET not in history.text
    assert history.json()[0]["last_error"] == attempt["error"]


@pytest.mark.parametrize("own_url", [True, False])  # the job's URL, or the worker's default
async def test_a_run_that_finally_fails_posts_one_failure_callback(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, own_url: bool
) -> None:
    with http_target() as target:
        target.respond(FAIL, FAIL)
        failure_url = f"{target.base_url}/failed"
        job = await http_job(
            core_app, cast.alice.session, target, name="sync", retry_base_delay_ms=10,
            retry_max_attempts=2, on_failure_url=failure_url if own_url else "",
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        default = None if own_url else failure_url
        async with worker_for(database_url, on_failure_url=default) as worker:
            await worker.drain(lambda: settled(engine))
    assert [request.path for request in target.requests] == ["/work", "/work", "/failed"]
    callback = target.requests[-1]
    assert callback.method == "POST"
    assert json.loads(callback.body) == {
        "id": job["id"],
        "name": "sync",
        "status": "failed",
        "attempts": 2,
        "last_error": "endpoint returned status 500: boom",
        "status_code": 500,
    }


async def test_a_success_or_a_retried_failure_sends_no_callback(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(FAIL)  # then the default 200
        job = await http_job(
            core_app, cast.alice.session, target, retry_base_delay_ms=10,
            on_failure_url=f"{target.base_url}/failed",
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    assert [request.path for request in target.requests] == ["/work", "/work"]


async def test_a_recording_that_fails_for_a_while_is_retried_and_the_run_goes_on(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    refuse_outcomes = "ALTER TABLE job_attempts ADD CONSTRAINT refuse CHECK (state = 'running')"
    async with engine.begin() as conn:  # the start marker goes in; no outcome can be written
        await conn.execute(text(refuse_outcomes + " NOT VALID"))
    with http_target() as target:
        target.respond(FAIL)  # then the default 200
        job = await http_job(core_app, cast.alice.session, target, retry_base_delay_ms=10)
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: _requests_at_least(target, 1))
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE job_attempts DROP CONSTRAINT refuse"))
            await worker.drain(lambda: settled(engine))
    assert len(target.requests) == 2  # the retry the first outcome asked for, once
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"]) for row in rows] == [
        (1, "retrying"),
        (2, "succeeded"),
    ]
    assert rows[0]["error"] == "endpoint returned status 500: boom"  # the real outcome
    assert await locks(engine, job["id"]) == {}
    row = await job_row(engine, job["id"])
    assert row is not None
    assert (row["invocations_total"], row["invocations_failed"]) == (2, 1)


async def test_an_outcome_never_written_is_recorded_lost_on_redelivery_and_retried(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "ALTER TABLE job_attempts ADD CONSTRAINT refuse CHECK (state = 'running') NOT VALID"
            )
        )
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target, retry_base_delay_ms=10)
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url, record_patience=0.2) as worker:
            # The worker gives up writing and hands the queue job back to the engine.
            await worker.drain(lambda: _handed_back(engine))
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE job_attempts DROP CONSTRAINT refuse"))
            await worker.drain(lambda: settled(engine))
    # The first call went out; its outcome was never known, so the retry policy ran it again.
    assert len(target.requests) == 2
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"], row["error"]) for row in rows] == [
        (1, "retrying", "worker lost; outcome unknown"),
        (2, "succeeded", None),
    ]
    assert await locks(engine, job["id"]) == {}


async def _requests_at_least(target: HttpTarget, count: int) -> bool:
    return len(target.requests) >= count


async def _handed_back(engine: AsyncEngine) -> bool:
    return any(row["attempts"] > 0 for row in await queue_rows(engine))
