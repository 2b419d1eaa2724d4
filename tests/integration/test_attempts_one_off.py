"""A one-off is queued once, when saved enabled, and completed when its run ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import attempts, http_job, job_row, queue_statuses, soon, worker_for
from tests.support.target import ScriptedResponse, http_target


async def test_a_one_off_fires_once_then_is_disabled(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        job = await http_job(
            core_app, cast.alice.session, target, schedule_type="one_off", run_at=soon()
        )
        assert job["run_at_fired_at"] is not None  # queued with the save
        assert job["next_run_at"] == job["run_at"]  # but still to come
        async with client_for(core_app, cast.alice.session) as alice:
            resaved = await alice.put(f"/api/jobs/{job['id']}", json={**job, "name": "renamed"})
            assert resaved.status_code == 200, resaved.text
        assert await queue_statuses(engine) == ["queued"]  # a second save queues nothing

        async def disabled() -> bool:
            row = await job_row(engine, job["id"])
            return row is not None and not row["enabled"]

        async with worker_for(database_url) as worker:
            await worker.drain(disabled)
        async with client_for(core_app, cast.alice.session) as alice:
            enabled = await alice.post(f"/api/jobs/{job['id']}/enable")
            assert enabled.status_code == 200, enabled.text
    assert len(target.requests) == 1
    [attempt] = await attempts(engine, job["id"])
    assert (attempt["state"], attempt["trigger"]) == ("succeeded", "one_off")
    assert attempt["scheduled_at"] == datetime.fromisoformat(job["run_at"])
    assert await queue_statuses(engine) == ["finished"]  # enabling again fires nothing
    row = await job_row(engine, job["id"])
    assert row is not None
    assert row["running_since_by_pool"] == {}


@pytest.mark.parametrize("outcome", [200, 500])  # after a success, and after a failure
async def test_a_one_off_set_to_delete_is_removed_after_its_run(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, outcome: int
) -> None:
    with http_target() as target:
        if outcome != 200:
            target.respond(ScriptedResponse(status=outcome))
        job = await http_job(
            core_app, cast.alice.session, target, schedule_type="one_off", run_at=soon(),
            one_off_after_run="delete", retry_enabled=False,
        )  # fmt: skip

        async def deleted() -> bool:
            return await job_row(engine, job["id"]) is None

        async with worker_for(database_url) as worker:
            await worker.drain(deleted)
    assert len(target.requests) == 1
    assert await queue_statuses(engine) == ["finished"]


async def test_a_one_off_saved_disabled_is_queued_when_enabled(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    with http_target() as target:
        job = await http_job(
            core_app, cast.alice.session, target, schedule_type="one_off",
            run_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat(), enabled=False,
        )  # fmt: skip
        assert job["run_at_fired_at"] is None
        assert await queue_statuses(engine) == []
        async with client_for(core_app, cast.alice.session) as alice:
            enabled = (await alice.post(f"/api/jobs/{job['id']}/enable")).json()
    assert enabled["run_at_fired_at"] is not None
    assert await queue_statuses(engine) == ["queued"]
