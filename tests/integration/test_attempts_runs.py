"""A real worker runs HTTP attempts: records, loops, pools, variables and the overlap lock."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import (
    add_variable,
    attempts,
    http_job,
    job_row,
    locks,
    queue_rows,
    queue_statuses,
    remaining,
    run_now,
    settled,
    stats,
    worker_for,
)
from tests.support.target import ScriptedResponse, http_target
from zilean.execution.loop import MAX_ITERATIONS_MESSAGE
from zilean.execution.payload import AttemptArgs


async def test_a_success_records_one_attempt_its_stats_and_counters_in_two_statements(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(ScriptedResponse(body=b'{"ok": true}'))
        job = await http_job(core_app, cast.alice.session, target, name="ping")
        queued = await run_now(core_app, cast.alice.session, job["id"])
        assert (queued.status_code, queued.json()) == (200, {"queued": 1, "busy_members": []})
        assert set(await locks(engine, job["id"])) == {"0"}
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
            hot = worker.runner.statements.statements_sent
    # The hot path: one statement to read, one to record, on the worker's own autocommit
    # connections (no BEGIN/COMMIT).
    assert hot == 2
    assert len(target.requests) == 1
    assert target.requests[0].headers["x-zilean-webhook-hops"] == "1"
    [attempt] = await attempts(engine, job["id"])
    assert attempt["state"] == "succeeded"
    assert (attempt["attempt"], attempt["max_attempts"], attempt["trigger"]) == (1, 5, "run_now")
    assert (attempt["pool_index"], attempt["loop_iteration"], attempt["error"]) == (0, 0, None)
    assert attempt["scheduled_at"] <= attempt["attempted_at"] <= attempt["finalized_at"]
    assert attempt["last_call"] == {
        "job_name": "ping",
        "timeout_ms": 60_000,
        "duration_ms": attempt["duration_ms"],
        "error": None,
        "method": "GET",
        "url": f"{target.base_url}/work",
        "status_code": 200,
        "response_snippet": '{"ok": true}',
    }
    [bucket] = await stats(engine, job["id"])
    assert (bucket["total"], bucket["completed"], bucket["failed"]) == (1, 1, 0)
    assert bucket["duration_sum_ms"] == bucket["duration_max_ms"] == attempt["duration_ms"]
    assert bucket["bucket_start"].second == bucket["bucket_start"].microsecond == 0
    row = await job_row(engine, job["id"])
    assert row is not None
    assert (row["invocations_total"], row["invocations_completed"]) == (1, 1)
    assert row["invocations_failed"] == 0
    assert row["running_since_by_pool"] == {}
    assert await queue_statuses(engine) == ["finished"]


async def test_a_countdown_endpoint_loops_until_nothing_remains(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(remaining(2), remaining(1), remaining(0), remaining(7))
        job = await http_job(
            core_app, cast.alice.session, target, loop_enabled=True, loop_delay_ms=0
        )
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    assert len(target.requests) == 3
    rows = await attempts(engine, job["id"])
    assert [(row["loop_iteration"], row["state"]) for row in rows] == [
        (0, "succeeded"),
        (1, "succeeded"),
        (2, "succeeded"),
    ]
    assert {row["trigger"] for row in rows} == {"run_now"}
    assert await locks(engine, job["id"]) == {}
    row = await job_row(engine, job["id"])
    assert row is not None
    assert row["invocations_total"] == 3


async def test_a_loop_due_at_once_continues_on_its_worker_without_a_claim_or_a_read(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(remaining(2), remaining(1), remaining(0))
        job = await http_job(
            core_app, cast.alice.session, target, loop_enabled=True, loop_delay_ms=0
        )
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
            hot = worker.runner.statements.statements_sent
    assert len(target.requests) == 3
    # One read for the first iteration, then one statement per iteration: each recording
    # claims, reads and starts the next (it was a claim, a read and a recording each).
    assert hot == 4
    rows = await attempts(engine, job["id"])
    assert [(row["loop_iteration"], row["state"]) for row in rows] == [
        (0, "succeeded"),
        (1, "succeeded"),
        (2, "succeeded"),
    ]
    assert rows[1]["attempted_at"] == rows[0]["finalized_at"]  # started as it was recorded
    assert await queue_statuses(engine) == ["finished"] * 3
    async with engine.connect() as conn:
        logged = (
            await conn.execute(
                text("SELECT job_id, status::text FROM pgqueuer_log ORDER BY job_id, id")
            )
        ).all()
    first = logged[0][0]
    assert [status for _, status in logged] == ["queued", "picked", "successful"] * 3
    assert {job_id for job_id, _ in logged} == {first, first + 1, first + 2}
    assert await locks(engine, job["id"]) == {}


async def test_a_stopping_worker_leaves_the_next_iteration_queued_for_another(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(*(remaining(1) for _ in range(5_000)))
        job = await http_job(
            core_app, cast.alice.session, target, loop_enabled=True, loop_delay_ms=0,
            loop_max_iterations=5_000,
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])

        async def looping() -> bool:
            return len(await attempts(engine, job["id"])) >= 5

        async with worker_for(database_url) as worker:
            await worker.drain(looping)
    rows = await attempts(engine, job["id"])
    assert {row["state"] for row in rows} == {"succeeded"}  # nothing left running
    assert len(target.requests) == len(rows)
    # The iteration after the last recorded one waits in the queue, claimed by nobody.
    [waiting] = await queue_rows(engine)
    assert waiting["status"] == "queued"
    assert AttemptArgs.from_payload(waiting["payload"]).loop_iteration == len(rows)
    assert set(await locks(engine, job["id"])) == {"0"}  # the run goes on


async def test_the_iteration_cap_stops_the_loop_cleanly(
    core_app: FastAPI,
    engine: AsyncEngine,
    database_url: str,
    cast: Cast,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with http_target() as target:
        target.respond(*(remaining(5) for _ in range(5)))
        job = await http_job(
            core_app, cast.alice.session, target, name="drainer", loop_enabled=True,
            loop_delay_ms=0, loop_max_iterations=2,
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        with caplog.at_level(logging.ERROR):
            async with worker_for(database_url) as worker:
                await worker.drain(lambda: settled(engine))
    assert len(target.requests) == 2
    rows = await attempts(engine, job["id"])
    assert [row["state"] for row in rows] == ["succeeded", "succeeded"]
    assert await locks(engine, job["id"]) == {}
    assert await queue_statuses(engine) == ["finished", "finished"]  # never failed
    [line] = [record for record in caplog.records if MAX_ITERATIONS_MESSAGE in record.getMessage()]
    logged = line.msg
    assert isinstance(logged, dict)
    assert (logged["job_id"], logged["name"], logged["pool_index"], logged["cap"]) == (
        job["id"],
        "drainer",
        0,
        2,
    )


async def test_each_pool_member_gets_its_index_and_a_single_job_gets_none(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        pooled = await http_job(core_app, cast.alice.session, target, name="pooled", pool_count=3)
        single = await http_job(
            core_app, cast.alice.session, target, name="single", query_params={"a": "1"}
        )
        assert (await run_now(core_app, cast.alice.session, pooled["id"])).json()["queued"] == 3
        await run_now(core_app, cast.alice.session, single["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    queries = sorted(request.query for request in target.requests)
    assert queries == ["a=1", "pool_idx=0", "pool_idx=1", "pool_idx=2"]
    rows = await attempts(engine, pooled["id"])
    assert sorted(row["pool_index"] for row in rows) == [0, 1, 2]
    assert await locks(engine, pooled["id"]) == {}


async def test_a_global_variable_edit_reaches_the_next_attempt(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    variable = await add_variable(core_app, cast.alice.session, "REGION", "eu")
    with http_target() as target:
        job = await http_job(
            core_app, cast.alice.session, target, headers={"X-Region": "{{ REGION }}"}
        )
        async with worker_for(database_url) as worker:
            await run_now(core_app, cast.alice.session, job["id"])
            await worker.drain(lambda: settled(engine))
            async with client_for(core_app, cast.alice.session) as alice:
                edited = await alice.put(
                    f"/api/global-variables/{variable['id']}", json={**variable, "value": "us"}
                )
                assert edited.status_code == 200, edited.text
            await run_now(core_app, cast.alice.session, job["id"])
            await worker.drain(lambda: settled(engine))
    assert [request.headers["x-region"] for request in target.requests] == ["eu", "us"]


async def test_a_request_edited_in_its_row_reaches_the_same_workers_next_attempt(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """A worker keeps the requests it built; a row written by hand (no API, no deploy)
    still changes the very next attempt's request, and an unchanged row sends the same."""
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target, headers={"X-A": "1"})
        async with worker_for(database_url) as worker:
            for edit in (
                None,
                None,
                'headers = \'{"X-A": "2"}\', query_params = \'{"q": "x"}\'',
                "http_method = 'POST', body = '{\"n\": 1}'",
            ):
                if edit is not None:
                    async with engine.begin() as conn:
                        await conn.execute(
                            text(f"UPDATE scheduled_jobs SET {edit} WHERE id = :id"),  # noqa: S608
                            {"id": job["id"]},
                        )
                await run_now(core_app, cast.alice.session, job["id"])
                await worker.drain(lambda: settled(engine))
    sent = [
        (request.method, request.query, request.headers["x-a"], request.body)
        for request in target.requests
    ]
    assert sent == [
        ("GET", "", "1", b""),
        ("GET", "", "1", b""),
        ("GET", "q=x", "2", b""),
        ("POST", "q=x", "2", b'{"n": 1}'),
    ]


async def test_a_second_run_now_while_a_skip_job_runs_is_refused(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target)
        first = await run_now(core_app, cast.alice.session, job["id"])
        second = await run_now(core_app, cast.alice.session, job["id"])
    assert first.status_code == 200
    assert second.status_code == 409
    assert "run in progress" in second.json()["error"]
    assert await queue_statuses(engine) == ["queued"]


@pytest.mark.parametrize("switch_off", ["job", "group"])
async def test_a_job_switched_off_before_its_attempt_runs_exits_cleanly_and_unlocks(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, switch_off: str
) -> None:
    with http_target() as target:
        job = await http_job(core_app, cast.alice.session, target, group_name="Ops/Nightly")
        await run_now(core_app, cast.alice.session, job["id"])
        async with client_for(core_app, cast.alice.session) as alice:
            if switch_off == "job":  # the job itself is disabled
                response = await alice.post(f"/api/jobs/{job['id']}/disable")
            else:  # an ancestor group is disabled
                response = await alice.post("/api/groups/disable", json={"group_name": "Ops"})
            assert response.status_code == 200, response.text
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    assert target.requests == []
    assert await attempts(engine, job["id"]) == []
    assert await locks(engine, job["id"]) == {}
    assert await queue_statuses(engine) == ["finished"]  # finished, not failed or retried


async def test_attempts_running_together_share_their_statements_and_add_up_per_job(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """Pool members of one job read and record in the same statements: each member's
    lock is stamped and released, and the job's counters and stats add every attempt."""
    with http_target() as target:
        target.respond(*(ScriptedResponse(status=500, body=b"no") for _ in range(4)))
        pooled = await http_job(
            core_app, cast.alice.session, target, name="pooled", pool_count=8, retry_enabled=False
        )
        others = [
            await http_job(
                core_app, cast.alice.session, target, name=f"other {n}", retry_enabled=False
            )
            for n in range(12)
        ]
        await run_now(core_app, cast.alice.session, pooled["id"])
        for job in others:
            await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url, concurrency=20) as worker:
            await worker.drain(lambda: settled(engine))
            statements = worker.runner.statements
    assert len(target.requests) == 20
    assert statements.loads.items_sent == statements.records.items_sent == 20
    assert statements.loads.batches_sent < 20  # some attempts shared a statement
    rows = await attempts(engine, pooled["id"])
    assert sorted(row["pool_index"] for row in rows) == list(range(8))
    assert {row["state"] for row in rows} <= {"succeeded", "cancelled"}
    assert await locks(engine, pooled["id"]) == {}  # all eight members released
    row = await job_row(engine, pooled["id"])
    assert row is not None
    failed = sum(1 for attempt in rows if attempt["state"] != "succeeded")
    assert (row["invocations_total"], row["invocations_failed"]) == (8, failed)
    buckets = await stats(engine, pooled["id"])
    assert sum(bucket["total"] for bucket in buckets) == 8
    assert sum(bucket["failed"] for bucket in buckets) == failed
    for job in others:
        [attempt] = await attempts(engine, job["id"])
        assert attempt["state"] in {"succeeded", "cancelled"}


async def test_a_transaction_locking_many_jobs_never_deadlocks_with_the_worker(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """A bulk edit locks many job rows, in its own order, while the worker reads and
    records attempts of those jobs in batches: no deadlock, and the edit goes through."""
    with http_target() as target:
        jobs = [
            await http_job(
                core_app,
                cast.alice.session,
                target,
                name=f"looping {n}",
                loop_enabled=True,
                loop_delay_ms=0,
                loop_max_iterations=1_000,
            )
            for n in range(12)
        ]
        target.respond(*(remaining(1) for _ in range(20_000)))
        job_ids = [job["id"] for job in jobs]
        async with worker_for(database_url, concurrency=20) as worker:
            deadlocks = await _deadlocks(engine)
            for job_id in job_ids:
                await run_now(core_app, cast.alice.session, job_id)
            await worker.drain(lambda: _attempted(engine, 200))
            for round_ in range(30):  # each a bulk edit, locking the rows in a new order
                order = job_ids[round_ % 12 :] + job_ids[: round_ % 12]
                async with engine.begin() as conn:
                    for job_id in reversed(order) if round_ % 2 else order:
                        await conn.execute(
                            text("SELECT 1 FROM scheduled_jobs WHERE id = :id FOR UPDATE"),
                            {"id": job_id},
                        )
                    await conn.execute(text("SELECT pg_sleep(0.01)"))
            assert await _deadlocks(engine) == deadlocks


async def _deadlocks(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        )
    return int(count or 0)


async def _attempted(engine: AsyncEngine, count: int) -> bool:
    async with engine.connect() as conn:
        done = await conn.scalar(text("SELECT count(*) FROM job_attempts WHERE state <> 'running'"))
    return int(done or 0) >= count
