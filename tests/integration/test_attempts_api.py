"""`POST /api/jobs/{id}/run` and `GET /api/jobs/{id}/calls`: refusals, audit, limits."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import UNKNOWN_ID, audit_rows
from tests.support.attempts import calls, logged, queue_statuses, run_now
from tests.support.jobs import FUTURE, create
from zilean.db.tables import job_attempts


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"enabled": False}, "the job is disabled"),  # a disabled job
        ({"group_name": "Ops/Nightly"}, "the job's group is disabled"),  # a gated group
        ({"schedule_type": "one_off", "run_at": FUTURE}, "a one_off job cannot be run"),
        ({"schedule_type": "webhook"}, "a webhook job cannot be run"),  # no payload
    ],
)
async def test_run_now_refuses_a_job_it_must_not_fire(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, fields: dict[str, Any], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await alice.post("/api/groups/disable", json={"group_name": "Ops"})
    job = await create(core_app, cast.alice.session, **fields)
    before = await queue_statuses(engine)  # a one-off queued itself when it was saved
    response = await run_now(core_app, cast.bob.session, job["id"])
    assert response.status_code == 409
    assert response.json()["error"].startswith(message)
    assert await queue_statuses(engine) == before
    assert [row for row in await audit_rows(engine) if row["action"] == "job.run"] == []


async def test_run_now_queues_every_free_member_and_audits_the_run(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session, pool_count=2)
    first = await run_now(core_app, cast.bob.session, job["id"])
    busy = await run_now(core_app, cast.bob.session, job["id"])
    unknown = await run_now(core_app, cast.bob.session, UNKNOWN_ID)
    assert (first.status_code, first.json()) == (200, {"queued": 2, "busy_members": []})
    assert busy.status_code == 409
    assert unknown.status_code == 404
    [entry] = [row for row in await audit_rows(engine) if row["action"] == "job.run"]
    assert (entry["actor_email"], entry["resource_id"]) == ("bob@example.com", job["id"])
    assert entry["after"] == {"queued": 2, "busy_members": []}


async def test_a_member_still_running_is_skipped_and_logged_with_the_job(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, caplog: pytest.LogCaptureFixture
) -> None:
    job = await create(core_app, cast.alice.session, pool_count=3)
    async with engine.begin() as conn:  # member 1 is still running
        await conn.execute(
            text(
                "UPDATE scheduled_jobs SET running_since_by_pool = jsonb_build_object('1', now())"
                " WHERE id = :id"
            ),
            {"id": job["id"]},
        )
    with caplog.at_level(logging.INFO):
        response = await run_now(core_app, cast.bob.session, job["id"])
    assert (response.status_code, response.json()) == (200, {"queued": 2, "busy_members": [1]})
    [entry] = logged(caplog, "firing.members_skipped")
    assert (entry["level"], entry["job_id"], entry["skipped"]) == ("info", job["id"], [1])


async def test_run_now_is_refused_to_read_only(core_app: FastAPI, cast: Cast) -> None:
    job = await create(core_app, cast.alice.session)
    response = await run_now(core_app, cast.carol.session, job["id"])
    assert response.status_code == 403


async def add_attempts(engine: AsyncEngine, job_id: str, count: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with engine.begin() as conn:
        await conn.execute(
            insert(job_attempts),
            [
                {
                    "job_id": uuid.UUID(job_id),
                    "queue_job_id": number,
                    "state": "succeeded",
                    "attempt": 1,
                    "max_attempts": 5,
                    "trigger": "schedule",
                    "pool_index": 0,
                    "loop_iteration": 0,
                    "scheduled_at": start + timedelta(minutes=number),
                    "attempted_at": start + timedelta(minutes=number),
                    "finalized_at": start + timedelta(minutes=number),
                    "duration_ms": 3,
                }
                for number in range(1, count + 1)
            ],
        )


async def test_calls_lists_the_newest_attempts_first_within_the_limit(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    empty = await calls(core_app, cast.carol.session, job["id"])
    assert (empty.status_code, empty.json()) == (200, [])
    await add_attempts(engine, job["id"], 105)
    default = await calls(core_app, cast.carol.session, job["id"])
    three = await calls(core_app, cast.carol.session, job["id"], limit=3)
    capped = await calls(core_app, cast.carol.session, job["id"], limit=1000)
    assert [entry["job_id"] for entry in default.json()] == list(range(105, 85, -1))
    assert [entry["job_id"] for entry in three.json()] == [105, 104, 103]
    assert len(capped.json()) == 100
    assert set(three.json()[0]) >= {
        "job_id", "state", "attempt", "attempted_at", "finalized_at", "scheduled_at",
        "last_error", "pool_index", "loop_iteration", "last_call",
    }  # fmt: skip
    assert three.json()[0]["attempted_at"] == "2026-01-01T01:45:00Z"


@pytest.mark.parametrize(
    "limit",
    [
        "0",  # not positive
        "-3",  # negative
        "abc",  # not a number
        "2.5",  # not an integer
        "",  # empty
    ],
)
async def test_calls_refuses_a_limit_that_is_not_a_positive_integer(
    core_app: FastAPI, cast: Cast, limit: str
) -> None:
    job = await create(core_app, cast.alice.session)
    response = await calls(core_app, cast.carol.session, job["id"], limit=limit)
    assert (response.status_code, response.json()) == (
        400,
        {"error": "limit: must be a positive integer"},
    )


async def test_calls_of_an_unknown_job_is_a_404(core_app: FastAPI, cast: Cast) -> None:
    response = await calls(core_app, cast.carol.session, UNKNOWN_ID)
    assert response.status_code == 404
