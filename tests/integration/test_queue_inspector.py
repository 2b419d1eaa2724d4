"""The queue inspector's routes against a live HTTP worker: listing with counts, a job's
detail, retry through the firing path, cancel of a waiting job (its lock released), the
delete of an ended one, a held engine failure, and each action's audit entry."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import attempts, http_job, locks, run_now, settled, worker_for
from tests.support.target import ScriptedResponse, http_target
from zilean.db.engine import driver_connection
from zilean.queue_engine.statements import NewQueueJob, enqueue

FAIL = ScriptedResponse(status=500, body=b"boom")


async def page(client: httpx.AsyncClient, **query: Any) -> dict[str, Any]:
    response = await client.get("/api/queue/jobs", params=query)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def audited(client: httpx.AsyncClient, action: str) -> list[dict[str, Any]]:
    log = await client.get("/api/audit-log", params={"action": action})
    entries: list[dict[str, Any]] = log.json()["entries"]
    return entries


async def test_a_failed_attempt_is_listed_retried_through_a_firing_and_audited(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        with http_target() as target:
            target.respond(FAIL)
            job = await http_job(core_app, cast.alice.session, target, retry_enabled=False)
            await run_now(core_app, cast.alice.session, job["id"])
            async with worker_for(database_url) as worker:
                await worker.drain(lambda: settled(engine))
                listed = await page(alice, state="finished")
                (first,) = [q for q in listed["queue_jobs"] if q["job_id"] == job["id"]]
                detail = (await alice.get(f"/api/queue/jobs/{first['id']}")).json()
                retried = await alice.post(f"/api/queue/jobs/{first['id']}/retry")
                await worker.drain(lambda: settled(engine))
            assert len(target.requests) == 2
        again = await alice.post(f"/api/queue/jobs/{retried.json()['queue_job_id']}/retry")
        entries = await audited(alice, "queue_job.retry")
        bad_state = await alice.get("/api/queue/jobs", params={"state": "stuck"})
        missing = await alice.get("/api/queue/jobs/999999")
    async with client_for(core_app, cast.carol.session) as carol:  # Read-Only
        refused = await carol.get("/api/queue/jobs")
    assert (first["queue"], first["state"]) == ("default", "finished")
    assert first["job_name"] == job["name"]
    assert first["attempt"]["state"] == "cancelled"  # retries off: the run ends
    assert {"queue": "default", "state": "finished", "count": 1} in listed["counts"]
    assert "default" in listed["queues"]
    assert detail["payload"] is None  # the engine deleted the finished row
    assert [t["state"] for t in detail["transitions"]] == ["queued", "running", "finished"]
    assert retried.status_code == 201, retried.text
    rows = await attempts(engine, job["id"])
    assert [(r["queue_job_id"], r["attempt"], r["trigger"]) for r in rows] == [
        (first["id"], 1, "run_now"),
        (retried.json()["queue_job_id"], 1, "run_now"),
    ]
    assert await locks(engine, job["id"]) == {}  # the retry's run took and released it
    assert again.status_code == 409  # the retried call succeeded: nothing to retry
    assert again.json() == {"error": "the queue job's attempt succeeded: there is nothing to retry"}
    assert [(e["resource_id"], e["actor_email"], e["after"]) for e in entries] == [
        (
            str(first["id"]),
            cast.alice.email,
            {"queued_queue_job_id": retried.json()["queue_job_id"]},
        )
    ]
    assert entries[0]["before"]["job_id"] == job["id"]
    assert refused.status_code == 403
    assert bad_state.status_code == 400
    assert bad_state.json()["error"].startswith("state: must be one of queued, running")
    assert missing.status_code == 404


async def test_a_waiting_job_is_cancelled_with_its_lock_and_an_ended_one_deleted(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        with http_target() as target:
            job = await http_job(core_app, cast.alice.session, target)
        await run_now(core_app, cast.alice.session, job["id"])  # no worker: it waits
        held_lock = await locks(engine, job["id"])
        (waiting,) = (await page(alice, state="queued"))["queue_jobs"]
        detail = (await alice.get(f"/api/queue/jobs/{waiting['id']}")).json()
        delete_waiting = await alice.delete(f"/api/queue/jobs/{waiting['id']}")
        cancelled = await alice.post(f"/api/queue/jobs/{waiting['id']}/cancel")
        cancel_again = await alice.post(f"/api/queue/jobs/{waiting['id']}/cancel")
        after = (await alice.get(f"/api/queue/jobs/{waiting['id']}")).json()
        rerun = await run_now(core_app, cast.alice.session, job["id"])
        deleted = await alice.delete(f"/api/queue/jobs/{waiting['id']}")
        gone = await alice.get(f"/api/queue/jobs/{waiting['id']}")
        actions = [
            (await audited(alice, action))[0]["resource_id"]
            for action in ("queue_job.cancel", "queue_job.delete")
        ]
    assert list(held_lock) == ["0"]
    assert detail["payload"]["job_id"] == job["id"]
    assert (detail["payload"]["attempt"], detail["payload"]["trigger"]) == (1, "run_now")
    assert "webhook_payload" in detail["payload"]
    assert delete_waiting.status_code == 409
    assert cancelled.status_code == 204
    assert cancel_again.status_code == 409
    assert after["state"] == "cancelled"
    (row,) = [r for r in await attempts(engine, job["id"]) if r["queue_job_id"] == waiting["id"]]
    assert (row["state"], row["error"]) == (
        "cancelled",
        "cancelled in the queue inspector before it ran",
    )
    assert rerun.status_code == 200, rerun.text  # the lock went with the cancelled job
    assert deleted.status_code == 204
    assert gone.status_code == 404
    assert actions == [str(waiting["id"])] * 2


async def test_a_held_engine_failure_shows_its_error_and_can_be_deleted(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    async with engine.begin() as conn:
        (held_id,) = await enqueue(await driver_connection(conn), [NewQueueJob("default", b"{")])
    async with worker_for(database_url) as worker:
        await worker.drain(lambda: settled(engine))
    async with client_for(core_app, cast.alice.session) as alice:
        failed = await page(alice, state="failed")
        detail = (await alice.get(f"/api/queue/jobs/{held_id}")).json()
        retry = await alice.post(f"/api/queue/jobs/{held_id}/retry")
        deleted = await alice.delete(f"/api/queue/jobs/{held_id}")
        left = await page(alice, state="failed")
    assert [q["id"] for q in failed["queue_jobs"]] == [held_id]
    assert failed["queue_jobs"][0]["engine_status"] == "failed"
    assert (detail["payload"], detail["job_id"]) == (None, None)
    assert detail["transitions"][-1]["state"] == "failed"
    assert detail["transitions"][-1]["error"].startswith("JSONDecodeError")
    assert retry.status_code == 409
    assert deleted.status_code == 204
    assert left["queue_jobs"] == []
