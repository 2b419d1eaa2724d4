"""Process samples, their API (live, history, health, liveness), the Prometheus export and
the 30-day sweep, against a real database.

Samples are stored straight into `worker_metrics` where a test needs a chosen age or value,
and by the real sampler (`run_sampling`, or a live core's lifespan) where a test checks
what the sampler writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tests.integration.conftest import core_settings
from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, bearer
from tests.support.jobs import SCRIPT, create
from tests.support.monitoring import (
    age_samples,
    by_label,
    create_token,
    eventually,
    insert_sample,
    live_sample,
    parse_exposition,
    stored_samples,
)
from tests.support.queue_engine import strand
from tests.support.servers import live_server
from zilean.api.app import create_core_app
from zilean.config import ScriptRuntime, Service, script_worker_service
from zilean.db.engine import driver_connection
from zilean.db.tables import job_call_stats, scheduled_jobs, worker_metrics
from zilean.db.urls import sqlalchemy_url, with_database
from zilean.maintenance.metrics import sweep_samples
from zilean.monitoring.sampling import ProcessSampler, record_sample, run_sampling
from zilean.monitoring.window import BUCKETS_MESSAGE, SINCE_MESSAGE
from zilean.queue_engine.statements import NewQueueJob, enqueue

# Health's order: the workers first, then the HTTP services.
SERVICE_ORDER = [
    "worker",
    "script-worker-bash",
    "script-worker-node",
    "script-worker-groovy",
    "script-worker-python",
    "core",
    "ui",
    "mcp",
    "webhook",
]
SERVICE_MESSAGE = "service: must be one of " + ", ".join(SERVICE_ORDER)
SAMPLE_KEYS = {
    "service",
    "sampled_at",
    "hostname",
    "pid",
    "cpu_percent",
    "rss_bytes",
    "anon_rss_bytes",
    "python_allocated_blocks",
    "threads",
    "asyncio_tasks",
    "open_fds",
    "process_services",
}
METRICS_READ_ROUTES = [
    "/api/metrics/live",
    "/api/metrics/history",
    "/api/system/health",
    "/prometheus/metrics",
]
FAST_INTERVAL_MS = 50  # sampling interval for the loop tests
SLOW_INTERVAL_MS = 60_000  # long enough that only the start-up sample can happen
PROCESS_GAUGES = [
    "zilean_process_cpu_percent",
    "zilean_process_mem_alloc_bytes",
    "zilean_process_mem_sys_bytes",
    "zilean_process_goroutines",
    "zilean_process_resident_memory_bytes",
    "zilean_process_python_allocated_blocks",
    "zilean_process_threads",
    "zilean_process_asyncio_tasks",
    "zilean_process_open_fds",
    "zilean_process_last_sample_timestamp_seconds",
]


async def get(app: FastAPI, session: str, path: str, **params: str) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.get(path, params=params)


async def scrape(app: FastAPI, secret: str) -> httpx.Response:
    async with client_for(app) as client:
        return await client.get("/prometheus/metrics", headers=bearer(secret))


async def database_minute(engine: AsyncEngine, *, ago: int) -> datetime:
    """The start of the minute `ago` minutes before the database's current one, read once
    so that a minute boundary passing mid-test cannot move it."""
    async with engine.connect() as conn:
        minute = func.date_trunc("minute", func.now()) - timedelta(minutes=ago)
        value: datetime = (await conn.execute(select(minute))).scalar_one()
    return value


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


# --- /api/metrics/live ---------------------------------------------------------------------


async def test_live_answers_null_until_the_service_samples_then_its_latest_sample(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    never = await get(core_app, cast.carol.session, "/api/metrics/live", service="core")
    await insert_sample(engine, Service.CORE, age=timedelta(minutes=1), pid=1)
    await insert_sample(engine, Service.UI, pid=3)  # another service's, newer still
    sample = ProcessSampler().sample()
    await record_sample(database_url, [Service.CORE], sample)
    response = await get(core_app, cast.carol.session, "/api/metrics/live", service="core")
    assert (never.status_code, never.text) == (200, "null")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == SAMPLE_KEYS
    assert body["service"] == "core"
    assert (body["pid"], body["hostname"]) == (os.getpid(), socket.gethostname())
    assert body["rss_bytes"] == sample.rss_bytes
    assert 0 < body["anon_rss_bytes"] == sample.anon_rss_bytes < sample.rss_bytes
    assert body["cpu_percent"] == sample.cpu_percent
    assert body["process_services"] == ["core"]  # a process hosting core alone


# Service values live refuses, each with the same message.
UNKNOWN_LIVE_SERVICES = [
    "workers",  # a near miss
    "all",  # allowed on history only
    "script-worker-ruby",  # not a runtime we run
    "CORE",  # labels are case-sensitive
]


async def test_live_reads_the_worker_by_default_and_refuses_unknown_services(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, Service.WORKER, pid=11)
    await insert_sample(engine, Service.CORE, pid=22)
    empty = await get(core_app, cast.carol.session, "/api/metrics/live", service="")
    absent = await get(core_app, cast.carol.session, "/api/metrics/live")
    assert (empty.status_code, empty.json()["service"], empty.json()["pid"]) == (200, "worker", 11)
    assert absent.json() == empty.json()
    for service in UNKNOWN_LIVE_SERVICES:
        response = await get(core_app, cast.carol.session, "/api/metrics/live", service=service)
        assert (response.status_code, response.json()) == (400, {"error": SERVICE_MESSAGE}), service


# --- run_sampling -------------------------------------------------------------------------


async def test_sampling_writes_one_sample_at_once_and_stops_when_asked(
    engine: AsyncEngine, database_url: str
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_sampling(database_url, [Service.UI], stop, interval=SLOW_INTERVAL_MS / 1000)
    )
    try:
        await eventually(lambda: stored_samples(engine, Service.UI), what="a start-up sample")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
    [sample] = await stored_samples(engine, Service.UI)
    assert sample["pid"] == os.getpid()
    assert sample["hostname"] == socket.gethostname()
    assert isinstance(sample["cpu_percent"], float)
    assert sample["cpu_percent"] >= 0
    assert sample["rss_bytes"] > 0
    assert sample["python_allocated_blocks"] > 0
    assert sample["threads"] >= 1
    assert sample["asyncio_tasks"] >= 1  # at least the sampling task itself
    assert sample["open_fds"] > 0


async def test_sampling_repeats_at_its_interval(engine: AsyncEngine, database_url: str) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_sampling(database_url, [Service.MCP], stop, interval=FAST_INTERVAL_MS / 1000)
    )

    async def three() -> bool:
        return len(await stored_samples(engine, Service.MCP)) >= 3

    try:
        await eventually(three, what="three samples")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
    samples = await stored_samples(engine, Service.MCP)
    assert {s["pid"] for s in samples} == {os.getpid()}
    assert all(s["cpu_percent"] >= 0 and s["rss_bytes"] > 0 for s in samples)
    times = [s["sampled_at"] for s in samples]
    assert times == sorted(times)


async def test_a_failed_sample_is_logged_and_the_loop_goes_on(
    postgres_admin_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = with_database(postgres_admin_url, "zilean_no_such_database")
    stop = asyncio.Event()
    failures: list[logging.LogRecord] = []

    async def two_failures() -> bool:
        failures[:] = [
            r
            for r in caplog.records
            if isinstance(r.msg, dict) and r.msg.get("action") == "metrics.sample_failed"
        ]
        return len(failures) >= 2

    with caplog.at_level(logging.WARNING):
        task = asyncio.create_task(
            run_sampling(missing, [Service.WEBHOOK], stop, interval=FAST_INTERVAL_MS / 1000)
        )
        try:
            # A second failure proves the loop outlived the first one.
            await eventually(two_failures, what="two logged failures")
            assert not task.done()
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=10)
    assert task.exception() is None
    assert failures[0].levelno == logging.WARNING
    assert failures[0].msg["service"] == "webhook"  # type: ignore[index]
    assert failures[0].msg["error"]  # type: ignore[index]


# --- /api/metrics/history -----------------------------------------------------------------


async def test_history_geometry_is_epoch_aligned_and_ends_with_now(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async def database_now() -> float:
        async with engine.connect() as conn:
            now = (await conn.execute(select(func.extract("epoch", func.now())))).scalar_one()
        return float(now)

    before = await database_now()
    response = await get(
        core_app, cast.carol.session, "/api/metrics/history", since="2h", buckets="4"
    )
    after = await database_now()
    assert response.status_code == 200
    body = response.json()
    assert (body["bucket_width_seconds"], body["slot_count"]) == (1800, 4)
    start = at(body["window_start"]).timestamp()
    assert start % 1800 == 0
    # The last slot holds the request's now, which lies between the two reads.
    assert before < start + 4 * 1800
    assert start + 3 * 1800 <= after
    assert (body["service"], body["samples"]) == ("worker", [])


async def test_history_averages_one_services_samples_per_slot(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    minute = await database_minute(engine, ago=1)
    await insert_sample(
        engine,
        Service.WORKER,
        sampled_at=minute + timedelta(seconds=5),
        cpu_percent=1.0,
        rss_bytes=100,
        anon_rss_bytes=60,
        threads=3,
        open_fds=10,
    )
    await insert_sample(
        engine,
        Service.WORKER,
        sampled_at=minute + timedelta(seconds=35),
        cpu_percent=3.0,
        rss_bytes=300,
        anon_rss_bytes=None,  # stored before revision 0010: left out of the average
        threads=4,
        open_fds=20,
    )
    await insert_sample(engine, Service.WORKER, age=timedelta(hours=3))  # before the window
    await insert_sample(engine, Service.CORE, cpu_percent=99.0)  # another service
    response = await get(
        core_app,
        cast.carol.session,
        "/api/metrics/history",
        since="1h",
        buckets="60",
        service="worker",
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["bucket_width_seconds"], body["slot_count"]) == (60, 60)
    [slot] = body["samples"]
    assert at(slot["bucket_start"]) == minute
    assert slot == {
        "bucket_start": slot["bucket_start"],
        "sample_count": 2,
        "cpu_percent": 2.0,
        "cpu_percent_max": 3.0,
        "rss_bytes": 200,
        "rss_bytes_max": 300,
        "anon_rss_bytes": 60,
        "python_allocated_blocks": 100_000,
        "threads": 3.5,
        "asyncio_tasks": 3.0,
        "open_fds": 15.0,
    }


async def test_history_for_all_services_has_every_label_and_the_summed_invocations(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    first = await create(core_app, cast.alice.session, name="first")
    second = await create(core_app, cast.alice.session, name="second")
    await insert_sample(engine, script_worker_service(ScriptRuntime.PYTHON), cpu_percent=7.0)
    bucket = await database_minute(engine, ago=2)
    async with engine.begin() as conn:
        await conn.execute(
            insert(job_call_stats),
            [
                {"job_id": first["id"], "bucket_start": bucket, "total": 3, "completed": 2,
                 "failed": 1},
                {"job_id": second["id"], "bucket_start": bucket, "total": 4, "completed": 4,
                 "failed": 0},
                # Older than the window: left out.
                {"job_id": second["id"], "bucket_start": bucket - timedelta(hours=5),
                 "total": 50, "completed": 50, "failed": 0},
            ],
        )  # fmt: skip
    response = await get(
        core_app,
        cast.carol.session,
        "/api/metrics/history",
        since="1h",
        buckets="60",
        service="all",
    )
    assert response.status_code == 200
    body = response.json()
    assert "samples" not in body
    assert list(body["samples_by_service"]) == SERVICE_ORDER
    assert all(
        samples == []
        for label, samples in body["samples_by_service"].items()
        if label != "script-worker-python"
    )
    [python] = body["samples_by_service"]["script-worker-python"]
    assert (python["sample_count"], python["cpu_percent"]) == (1, 7.0)
    assert body["invocations"] == [
        {
            "bucket_start": body["invocations"][0]["bucket_start"],
            "total": 7,
            "completed": 6,
            "failed": 1,
            "duration_ms_avg": 0,
            "duration_ms_max": 0,
        }
    ]
    assert at(body["invocations"][0]["bucket_start"]) == bucket


# Query strings history refuses, with the message each gets.
BAD_HISTORY_PARAMS = [
    ({"since": "yesterday"}, SINCE_MESSAGE),  # not a duration
    ({"since": "0h"}, SINCE_MESSAGE),  # not positive
    ({"since": "-2h"}, SINCE_MESSAGE),  # negative
    ({"buckets": "0"}, BUCKETS_MESSAGE),  # not positive
    ({"buckets": "ten"}, BUCKETS_MESSAGE),  # not a number
    ({"buckets": "-5"}, BUCKETS_MESSAGE),  # negative
    ({"buckets": "2.5"}, BUCKETS_MESSAGE),  # not an integer
    ({"service": "nope"}, SERVICE_MESSAGE + " or all"),  # history also accepts all
]


async def test_history_refuses_bad_parameters(core_app: FastAPI, cast: Cast) -> None:
    for params, message in BAD_HISTORY_PARAMS:
        response = await get(core_app, cast.carol.session, "/api/metrics/history", **params)
        assert (response.status_code, response.json()) == (400, {"error": message}), params


# --- /api/system/health -------------------------------------------------------------------


async def test_health_lists_every_service_in_order_live_stale_or_never_seen(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, Service.WORKER)
    await insert_sample(engine, Service.CORE, age=timedelta(seconds=90))  # within 2 minutes
    await insert_sample(engine, Service.UI, age=timedelta(minutes=3))

    async def health() -> list[dict[str, Any]]:
        response = await get(core_app, cast.carol.session, "/api/system/health")
        assert response.status_code == 200
        body: list[dict[str, Any]] = response.json()
        return body

    first = await health()
    await age_samples(engine, Service.WORKER, timedelta(minutes=3))
    later = await health()
    assert [entry["service"] for entry in first] == SERVICE_ORDER
    state = {e["service"]: (e["live"], e["last_sample_at"] is not None) for e in first}
    assert state == {
        **dict.fromkeys(SERVICE_ORDER, (False, False)),
        "worker": (True, True),
        "core": (True, True),
        "ui": (False, True),  # stale: seen, but not lately
    }
    # The worker flips to stale once its only sample is 3 minutes old.
    assert later[0]["live"] is False
    assert at(first[0]["last_sample_at"]) - at(later[0]["last_sample_at"]) == timedelta(minutes=3)
    assert later[1:] == first[1:]


async def test_a_failed_health_read_degrades_to_never_seen_instead_of_failing(
    database_url: str, engine: AsyncEngine, cast: Cast, caplog: pytest.LogCaptureFixture
) -> None:
    # The app's connections give up on a lock after 50 ms, so a locked table is a quick
    # read failure rather than a wait.
    impatient = create_async_engine(
        sqlalchemy_url(database_url),
        connect_args={"options": "-c timezone=UTC -c lock_timeout=50"},
    )
    app = create_core_app(core_settings(database_url), impatient)
    await insert_sample(engine, Service.WORKER)
    try:
        async with engine.connect() as locker:
            await locker.execute(text("LOCK TABLE worker_metrics IN ACCESS EXCLUSIVE MODE"))
            with caplog.at_level(logging.WARNING):
                degraded = await get(app, cast.carol.session, "/api/system/health")
            await locker.rollback()
        recovered = await get(app, cast.carol.session, "/api/system/health")
    finally:
        await impatient.dispose()
    assert degraded.status_code == 200
    assert degraded.json() == [
        {"service": s, "live": False, "last_sample_at": None} for s in SERVICE_ORDER
    ]
    assert recovered.json()[0]["live"] is True  # the same app reads again once it can
    # The one-statement read failed, then each service was tried (and failed) on its own.
    failed = [
        r.msg["service"] if r.msg["event"].endswith("for a service") else "all"
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("action") == "health.read_failed"
    ]
    assert failed == ["all", *SERVICE_ORDER]


# --- /api/scripts/liveness ----------------------------------------------------------------


async def test_script_liveness_is_keyed_by_job_type_for_jobs_script_holders(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, script_worker_service(ScriptRuntime.NODE))
    await insert_sample(engine, script_worker_service(ScriptRuntime.BASH), age=timedelta(minutes=5))
    response = await get(core_app, cast.alice.session, "/api/scripts/liveness")
    # Read-Only holds metrics:read but not jobs:script.
    refused = await get(core_app, cast.carol.session, "/api/scripts/liveness")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"bash", "javascript", "typescript", "groovy", "python"}
    assert body["javascript"]["live"] is True
    assert body["typescript"] == body["javascript"]  # one Node worker runs both
    assert body["bash"]["live"] is False
    assert body["bash"]["last_sample_at"] is not None
    assert body["groovy"] == {"live": False, "last_sample_at": None}
    assert body["python"] == {"live": False, "last_sample_at": None}
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)


# --- /prometheus/metrics ------------------------------------------------------------------


async def test_the_metrics_routes_need_metrics_read_by_session_or_token(
    core_app: FastAPI, cast: Cast
) -> None:
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    async with client_for(core_app) as anonymous:
        login = await anonymous.get("/prometheus/metrics")
    by_session = await get(core_app, cast.carol.session, "/prometheus/metrics")
    by_token = await scrape(core_app, secret)
    assert (login.status_code, login.headers["location"]) == (302, "/login")
    assert by_session.status_code == 200
    assert by_session.headers["content-type"].startswith("text/plain")
    assert (by_token.status_code, by_token.text) == (200, by_session.text)
    # dave's role holds user and role permissions only.
    for path in METRICS_READ_ROUTES:
        refused = await get(core_app, cast.dave.session, path)
        assert (refused.status_code, refused.json()) == (403, FORBIDDEN), path


async def test_prometheus_publishes_sampled_services_only(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, Service.WORKER, cpu_percent=12.5, rss_bytes=7_000, open_fds=9)
    await insert_sample(
        engine, script_worker_service(ScriptRuntime.NODE), cpu_percent=0.0, threads=2
    )
    await core_app.state.metrics_exporter.refresh()
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    samples = parse_exposition((await scrape(core_app, secret)).text)
    for name in PROCESS_GAUGES:
        assert set(by_label(samples, name, "service")) == {"worker", "script-worker-node"}, name
    assert by_label(samples, "zilean_process_cpu_percent", "service") == {
        "worker": 12.5,
        "script-worker-node": 0.0,  # a real zero, from a real sample
    }
    assert by_label(samples, "zilean_process_resident_memory_bytes", "service")["worker"] == 7_000
    assert by_label(samples, "zilean_process_open_fds", "service")["worker"] == 9
    assert by_label(samples, "zilean_process_threads", "service")["script-worker-node"] == 2
    [worker] = await stored_samples(engine, Service.WORKER)
    stamps = by_label(samples, "zilean_process_last_sample_timestamp_seconds", "service")
    assert stamps["worker"] == pytest.approx(worker["sampled_at"].timestamp())
    # The spec's Go-named gauges carry their nearest Python figures.
    spec = {name: by_label(samples, f"zilean_process_{name}", "service")["worker"]
            for name in ("mem_alloc_bytes", "mem_sys_bytes", "goroutines")}  # fmt: skip
    assert spec == {
        "mem_alloc_bytes": worker["anon_rss_bytes"],
        "mem_sys_bytes": 7_000,  # resident memory, as zilean_process_resident_memory_bytes
        "goroutines": worker["asyncio_tasks"],  # event-loop tasks
    }


async def test_prometheus_publishes_one_series_per_process_labelled_with_its_services(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    # One process running two script runtimes, as under `zilean up`, and a lone worker.
    shared = ProcessSampler().sample()
    await record_sample(
        database_url,
        [script_worker_service(ScriptRuntime.BASH), script_worker_service(ScriptRuntime.NODE)],
        shared,
    )
    await insert_sample(engine, Service.WORKER, cpu_percent=2.0)
    # core and ui shared a process once; core has since sampled from a process of its own.
    await record_sample(database_url, [Service.CORE, Service.UI], shared)
    await age_samples(engine, Service.UI, timedelta(minutes=1))
    await age_samples(engine, Service.CORE, timedelta(minutes=1))
    await insert_sample(engine, Service.CORE, cpu_percent=3.0, pid=77)
    await core_app.state.metrics_exporter.refresh()
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    samples = parse_exposition((await scrape(core_app, secret)).text)
    cpu = by_label(samples, "zilean_process_cpu_percent", "service")
    assert cpu == {
        "worker": 2.0,
        "script-worker-bash,script-worker-node": shared.cpu_percent,  # counted once
        "core": 3.0,  # the new process
        "ui": shared.cpu_percent,  # still its old process's newest sample, not core's
    }
    for name in PROCESS_GAUGES:
        assert set(by_label(samples, name, "service")) == set(cpu), name
    async with client_for(core_app, cast.carol.session) as carol:
        node = await carol.get("/api/metrics/live", params={"service": "script-worker-node"})
    assert node.json()["process_services"] == ["script-worker-bash", "script-worker-node"]
    assert node.json()["cpu_percent"] == shared.cpu_percent


async def test_a_figure_an_older_sample_never_measured_is_left_out_not_zero(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, Service.MCP, anon_rss_bytes=None)  # stored before 0010
    await core_app.state.metrics_exporter.refresh()
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    samples = parse_exposition((await scrape(core_app, secret)).text)
    assert by_label(samples, "zilean_process_mem_alloc_bytes", "service") == {}
    assert by_label(samples, "zilean_process_mem_sys_bytes", "service") == {"mcp": 50_000_000}
    history = await get(core_app, cast.carol.session, "/api/metrics/history", service="mcp")
    [slot] = history.json()["samples"]
    assert (slot["anon_rss_bytes"], slot["rss_bytes"]) == (None, 50_000_000)


async def test_prometheus_counts_attempts_by_job_type_and_outcome_and_never_goes_down(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    exporter = core_app.state.metrics_exporter
    http = await create(core_app, cast.alice.session, name="http")
    bash = await create(core_app, cast.alice.session, **{**SCRIPT, "url": ""})
    other_http = await create(core_app, cast.alice.session, name="other")
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])

    async def set_counts(job: dict[str, Any], completed: int, failed: int) -> None:
        async with engine.begin() as conn:
            await conn.execute(
                update(scheduled_jobs)
                .where(scheduled_jobs.c.id == job["id"])
                .values(invocations_completed=completed, invocations_failed=failed)
            )

    async def attempts() -> dict[tuple[str, str], float]:
        samples = parse_exposition((await scrape(core_app, secret)).text)
        return {
            (labels["job_type"], labels["outcome"]): value
            for labels, value in samples["zilean_attempts_total"]
        }

    await exporter.refresh()
    before = await attempts()
    # Every job type is published from the start, at zero.
    assert set(before) == {
        (t, o)
        for t in ("http", "bash", "javascript", "typescript", "groovy", "python")
        for o in ("completed", "failed")
    }
    assert set(before.values()) == {0.0}

    await set_counts(http, 5, 2)
    await set_counts(other_http, 1, 0)
    await set_counts(bash, 3, 1)
    await exporter.refresh()
    grown = await attempts()
    assert grown == {
        **before,
        ("http", "completed"): 6,
        ("http", "failed"): 2,
        ("bash", "completed"): 3,
        ("bash", "failed"): 1,
    }

    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.delete(f"/api/jobs/{http['id']}")).status_code == 204
    await exporter.refresh()
    assert await attempts() == grown  # the deleted job's attempts still happened

    await set_counts(other_http, 4, 1)
    await exporter.refresh()
    after = await attempts()
    assert (after[("http", "completed")], after[("http", "failed")]) == (9, 3)


async def test_prometheus_reports_queue_depth_per_queue_and_state(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    await queue(engine, "default")
    await strand(engine)  # one running, claimed by a worker
    await queue(engine, "default", "default", "scripts-bash", "unrouted")
    await queue(engine, "someone-elses")  # not ours: not published
    await core_app.state.metrics_exporter.refresh()
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    samples = parse_exposition((await scrape(core_app, secret)).text)
    depth = {(lbl["queue"], lbl["state"]): v for lbl, v in samples["zilean_queue_jobs"]}
    queues = ["default", "scripts-bash", "scripts-node", "scripts-groovy", "scripts-python"]
    assert depth == {
        **{(q, s): 0 for q in queues for s in ("queued", "running")},
        ("default", "queued"): 2,
        ("default", "running"): 1,
        ("scripts-bash", "queued"): 1,
        ("unrouted", "queued"): 1,
    }


async def test_a_scrape_serves_the_snapshot_and_never_reads_the_database(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    exporter = core_app.state.metrics_exporter
    secret = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    await exporter.refresh()
    empty = (await scrape(core_app, secret)).text
    await insert_sample(engine, Service.WORKER)
    await queue(engine, "default")
    unchanged = (await scrape(core_app, secret)).text
    await exporter.refresh()
    refreshed = parse_exposition((await scrape(core_app, secret)).text)
    assert unchanged == empty
    assert "zilean_process_cpu_percent{" not in empty  # never sampled: no line, not a zero
    assert by_label(refreshed, "zilean_process_cpu_percent", "service") == {"worker": 1.5}
    depth = {(lbl["queue"], lbl["state"]): v for lbl, v in refreshed["zilean_queue_jobs"]}
    assert depth[("default", "queued")] == 1


async def test_a_live_core_samples_itself_refreshes_the_snapshot_and_sweeps_at_start_up(
    database_url: str, engine: AsyncEngine, cast: Cast
) -> None:
    await insert_sample(engine, script_worker_service(ScriptRuntime.BASH), cpu_percent=4.25)
    expired = await insert_sample(engine, Service.UI, age=timedelta(days=40))
    app = create_core_app(core_settings(database_url), engine)
    secret = await create_token(app, cast.carol.session, cast.role_ids["read_only"])
    with live_server(app) as base:
        async with httpx.AsyncClient(base_url=base, headers=bearer(secret)) as client:

            async def bash_published() -> dict[str, float] | None:
                response = await client.get("/prometheus/metrics")
                assert response.status_code == 200
                samples = parse_exposition(response.text)
                cpu = by_label(samples, "zilean_process_cpu_percent", "service")
                return cpu if "script-worker-bash" in cpu else None

            # Both happen as the app starts, not a minute later.
            sample = await eventually(
                lambda: live_sample(client, "core"), what="core's start-up sample"
            )
            cpu = await eventually(bash_published, what="the start-up refresh")

            async def expired_gone() -> bool:
                return expired not in {row["id"] for row in await stored_samples(engine, "ui")}

            # Core's daily sweeps also run at start-up, the sample sweep among them.
            await eventually(expired_gone, what="the start-up sample sweep")
    assert sample["service"] == "core"
    assert sample["pid"] == os.getpid()  # the live server runs in this process
    assert sample["rss_bytes"] > 0
    assert sample["cpu_percent"] >= 0
    assert cpu["script-worker-bash"] == 4.25


# --- retention ----------------------------------------------------------------------------


async def test_the_sweep_deletes_samples_older_than_30_days_only(engine: AsyncEngine) -> None:
    old = await insert_sample(engine, Service.WORKER, age=timedelta(days=31))
    await insert_sample(engine, Service.WORKER, age=timedelta(days=29))
    await insert_sample(engine, Service.CORE, age=timedelta(days=45))
    await insert_sample(engine, Service.CORE)
    assert await sweep_samples(engine) == 2
    async with engine.connect() as conn:
        rows = (await conn.execute(select(worker_metrics.c.id, worker_metrics.c.service))).all()
    assert len(rows) == 2
    assert old not in {row.id for row in rows}
    assert {row.service for row in rows} == {"worker", "core"}
    assert await sweep_samples(engine) == 0


async def queue(engine: AsyncEngine, *queues: str) -> None:
    async with engine.begin() as conn:
        await enqueue(await driver_connection(conn), [NewQueueJob(name, b"{}") for name in queues])
