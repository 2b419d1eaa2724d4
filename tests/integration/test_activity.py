"""Heartbeats and per-job activity: window geometry, clamping, folding, one query."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import http_job, run_now, settled, worker_for
from tests.support.jobs import create
from tests.support.target import ScriptedResponse, http_target
from zilean.api.app import create_core_app

SINCE_MESSAGE = {"error": "since: must be a positive duration, e.g. 24h"}
BUCKETS_MESSAGE = {"error": "buckets: must be a positive integer"}
ROUTES = ["/api/jobs/heartbeats", "/api/jobs/{job_id}/activity"]


async def get(app: FastAPI, session: str, path: str, **params: Any) -> Any:
    async with client_for(app, session) as client:
        response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def add_stats(
    engine: AsyncEngine, job_id: str, minutes_ago: int, total: int, failed: int = 0,
    duration_sum_ms: int = 0, duration_max_ms: int = 0,
) -> None:  # fmt: skip
    """A one-minute bucket `minutes_ago` minutes before the database's current minute."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO job_call_stats VALUES (:job_id, date_trunc('minute', now()) "
                "- make_interval(mins => :ago), :total, :completed, :failed, :sum, :max)"
            ),
            {
                "job_id": job_id, "ago": minutes_ago, "total": total,
                "completed": total - failed, "failed": failed,
                "sum": duration_sum_ms, "max": duration_max_ms,
            },
        )  # fmt: skip


async def database_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        now: datetime = (await conn.execute(text("SELECT now()"))).scalar_one()
    return now


def job_totals(body: dict[str, Any]) -> dict[str, int]:
    return {entry["job_id"]: sum(b["total"] for b in entry["buckets"]) for entry in body["jobs"]}


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.parametrize(
    ("params", "width", "slots"),
    [
        ({}, 2160, 40),  # 24h in 40 slots of 36 minutes
        ({"since": "24h", "buckets": "500"}, 180, 480),  # never finer than whole minutes
        ({"since": "1h", "buckets": "500"}, 60, 60),  # one-minute rows: 60 s at the finest
        ({"since": "90m", "buckets": "40"}, 180, 30),
        ({"since": "30s"}, 60, 1),
        ({"since": "1000h"}, 64800, 40),  # clamped silently to 720h
        ({"since": "720h", "buckets": "9999999999999999999999"}, 5220, 497),  # clamped to 500
        ({"since": " 2h ", "buckets": " 4 "}, 1800, 4),
        ({"since": "", "buckets": ""}, 2160, 40),  # empty means the default
    ],
)
@pytest.mark.parametrize("route", ROUTES)
async def test_window_geometry_follows_since_and_buckets(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast,
    route: str, params: dict[str, str], width: int, slots: int,
) -> None:  # fmt: skip
    job = await create(core_app, cast.alice.session)
    body = await get(core_app, cast.carol.session, route.format(job_id=job["id"]), **params)
    assert (body["bucket_width_seconds"], body["slot_count"]) == (width, slots)
    start = parse(body["window_start"])
    # Epoch-aligned, and the last slot holds the database's current time.
    assert start.timestamp() % width == 0
    now = await database_now(engine)
    assert (
        start.timestamp() + (slots - 1) * width
        <= now.timestamp()
        < start.timestamp() + (slots * width)
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "abc"}, SINCE_MESSAGE),
        ({"since": "0"}, SINCE_MESSAGE),
        ({"since": "0s"}, SINCE_MESSAGE),
        ({"since": "-1h"}, SINCE_MESSAGE),
        ({"since": "24"}, SINCE_MESSAGE),
        ({"since": "1d"}, SINCE_MESSAGE),
        ({"since": "9999999999999999999h"}, SINCE_MESSAGE),
        ({"buckets": "0"}, BUCKETS_MESSAGE),
        ({"buckets": "-3"}, BUCKETS_MESSAGE),
        ({"buckets": "1.5"}, BUCKETS_MESSAGE),
        ({"buckets": "ten"}, BUCKETS_MESSAGE),
        ({"buckets": "٣"}, BUCKETS_MESSAGE),  # a non-ASCII digit
    ],
)
@pytest.mark.parametrize("route", ROUTES)
async def test_invalid_window_parameters_get_the_specified_400(
    core_app: FastAPI, cast: Cast, route: str, params: dict[str, str], message: dict[str, str]
) -> None:
    job = await create(core_app, cast.alice.session)
    async with client_for(core_app, cast.carol.session) as client:
        response = await client.get(route.format(job_id=job["id"]), params=params)
    assert (response.status_code, response.json()) == (400, message)


async def test_heartbeats_list_every_job_with_an_empty_list_for_one_that_never_ran(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    ran = await create(core_app, cast.alice.session, name="a-ran")
    idle = await create(core_app, cast.alice.session, name="b-idle")
    await add_stats(engine, ran["id"], minutes_ago=0, total=2, failed=1, duration_sum_ms=90,
                    duration_max_ms=60)  # fmt: skip
    body = await get(core_app, cast.carol.session, "/api/jobs/heartbeats", since="1h")
    assert [entry["job_id"] for entry in body["jobs"]] == [ran["id"], idle["id"]]
    [bucket] = body["jobs"][0]["buckets"]
    # Latency is left at 0 on the heartbeat route.
    assert {k: v for k, v in bucket.items() if k != "bucket_start"} == {
        "total": 2, "completed": 1, "failed": 1, "duration_ms_avg": 0, "duration_ms_max": 0,
    }  # fmt: skip
    assert body["jobs"][1] == {"job_id": idle["id"], "buckets": []}


async def test_heartbeats_with_no_jobs_still_report_the_geometry(
    core_app: FastAPI, cast: Cast
) -> None:
    body = await get(core_app, cast.carol.session, "/api/jobs/heartbeats")
    assert body["jobs"] == []
    assert (body["bucket_width_seconds"], body["slot_count"]) == (2160, 40)
    assert body["window_start"]


async def test_minute_buckets_fold_into_epoch_aligned_slots_inside_the_window(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    for ago, total, failed, duration_sum, duration_max in [
        (0, 1, 0, 10, 10),
        (1, 2, 1, 50, 40),
        (2, 3, 0, 60, 30),
        (7, 4, 4, 400, 150),
        (600, 9, 0, 90, 10),  # ten hours ago: outside a one-hour window
    ]:
        await add_stats(engine, job["id"], ago, total, failed, duration_sum, duration_max)
    body = await get(
        core_app, cast.carol.session, f"/api/jobs/{job['id']}/activity", since="1h", buckets="12"
    )
    width = body["bucket_width_seconds"]
    assert width == 300
    start = parse(body["window_start"]).timestamp()
    now = (await database_now(engine)).timestamp()
    minute = now // 60 * 60
    # Recompute the expected slots from the stored minutes, independently of the route.
    expected: dict[float, list[tuple[int, int, int, int]]] = {}
    for ago, total, failed, duration_sum, duration_max in [
        (0, 1, 0, 10, 10), (1, 2, 1, 50, 40), (2, 3, 0, 60, 30), (7, 4, 4, 400, 150),
    ]:  # fmt: skip
        stamp = minute - ago * 60
        if stamp >= start:
            expected.setdefault(stamp // width * width, []).append(
                (total, failed, duration_sum, duration_max)
            )
    buckets = body["buckets"]
    assert [parse(b["bucket_start"]).timestamp() for b in buckets] == sorted(expected)
    for bucket in buckets:
        parts = expected[parse(bucket["bucket_start"]).timestamp()]
        total = sum(p[0] for p in parts)
        failed = sum(p[1] for p in parts)
        assert bucket == {
            "bucket_start": bucket["bucket_start"],
            "total": total,
            "completed": total - failed,
            "failed": failed,
            "duration_ms_avg": round(sum(p[2] for p in parts) / total),
            "duration_ms_max": max(p[3] for p in parts),
        }
    assert sum(b["total"] for b in buckets) == 10  # the ten-hour-old bucket is left out


async def test_activity_counters_cover_the_jobs_whole_life_not_the_window(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    await add_stats(engine, job["id"], minutes_ago=0, total=1)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE scheduled_jobs SET invocations_total = 500, invocations_completed = 450,"
                " invocations_failed = 50 WHERE id = :id"
            ),
            {"id": job["id"]},
        )
    body = await get(core_app, cast.carol.session, f"/api/jobs/{job['id']}/activity", since="1m")
    assert (body["invocations_total"], body["invocations_completed"]) == (500, 450)
    assert body["invocations_failed"] == 50
    assert [b["total"] for b in body["buckets"]] == [1]
    assert body["job_id"] == job["id"]


async def test_activity_of_an_unknown_job_is_404_and_a_malformed_id_is_400(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.carol.session) as client:
        missing = await client.get(f"/api/jobs/{uuid.uuid4()}/activity")
        malformed = await client.get("/api/jobs/not-a-uuid/activity")
    assert (missing.status_code, missing.json()) == (404, {"error": "job not found"})
    assert malformed.status_code == 400


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Collect every SQL statement the engine sends while the block runs."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def test_heartbeats_take_one_query_whatever_the_number_of_jobs(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async def heartbeat_statements() -> tuple[int, int]:
        with statements(engine) as seen:
            body = await get(core_app, cast.carol.session, "/api/jobs/heartbeats")
        reading = [s for s in seen if "job_call_stats" in s]
        return len(reading), len(body["jobs"])

    first = await create(core_app, cast.alice.session, name="job-0")
    await add_stats(engine, first["id"], minutes_ago=3, total=1)
    one = await heartbeat_statements()
    for number in range(1, 60):
        job = await create(core_app, cast.alice.session, name=f"job-{number}")
        await add_stats(engine, job["id"], minutes_ago=number % 5, total=number)
    many = await heartbeat_statements()
    assert one == (1, 1)
    assert many == (1, 60)


async def test_real_attempts_show_up_in_heartbeats_and_activity(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(ScriptedResponse(), ScriptedResponse(status=500, body=b"no"))
        job = await http_job(
            core_app, cast.alice.session, target, pool_count=2, retry_max_attempts=1
        )
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
    beats = await get(core_app, cast.carol.session, "/api/jobs/heartbeats", since="10m")
    [entry] = [e for e in beats["jobs"] if e["job_id"] == job["id"]]
    assert sum(b["total"] for b in entry["buckets"]) == 2
    assert sum(b["failed"] for b in entry["buckets"]) == 1
    activity = await get(core_app, cast.carol.session, f"/api/jobs/{job['id']}/activity")
    assert (activity["invocations_total"], activity["invocations_failed"]) == (2, 1)
    assert sum(b["completed"] for b in activity["buckets"]) == 1
    assert all(b["duration_ms_max"] >= b["duration_ms_avg"] >= 0 for b in activity["buckets"])


async def test_repeated_heartbeats_read_only_unsettled_buckets_and_match_a_fresh_read(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    jobs = [await create(core_app, cast.alice.session, name=f"job-{n}") for n in range(3)]
    for number, job in enumerate(jobs):
        for ago in (0, 1, 5, 40, 300, 1000):
            await add_stats(engine, job["id"], minutes_ago=ago, total=number + 1, failed=number)
    params = {"since": "24h", "buckets": "48"}  # 30-minute slots
    first = await get(core_app, cast.carol.session, "/api/jobs/heartbeats", **params)
    # New calls in the current minute, then a job deleted: both show on the next poll.
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE job_call_stats SET total = total + 7, completed = completed + 7 "
                "WHERE job_id = :id AND bucket_start = date_trunc('minute', now())"
            ),
            {"id": jobs[0]["id"]},
        )
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.delete(f"/api/jobs/{jobs[2]['id']}")).status_code == 204
    with statements(engine) as seen:
        second = await get(core_app, cast.carol.session, "/api/jobs/heartbeats", **params)
    [read] = [s for s in seen if "job_call_stats" in s]
    # The settled slots came from the cache: the read carried their range as a bound.
    assert "greatest" in read.lower()
    fresh_app = create_core_app(core_app.state.settings, engine)  # an empty cache
    expected = await get(fresh_app, cast.carol.session, "/api/jobs/heartbeats", **params)
    assert second == expected
    assert [entry["job_id"] for entry in second["jobs"]] == [jobs[0]["id"], jobs[1]["id"]]
    totals, before = job_totals(second), job_totals(first)
    assert totals[jobs[0]["id"]] == before[jobs[0]["id"]] + 7
    assert totals[jobs[1]["id"]] == before[jobs[1]["id"]]
