"""The running scheduler: NOTIFY-driven reconciles, leadership between two schedulers,
and core's lifespan firing an `@every` job on a live server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from tests.support.actors import Cast, client_for
from tests.support.attempts import queued_args
from tests.support.jobs import create, put
from tests.support.servers import live_server
from zilean.api.app import create_core_app
from zilean.db.tables import disabled_groups, job_firings, scheduled_jobs
from zilean.db.urls import libpq_url
from zilean.scheduler import RECONCILE_INTERVAL, SchedulerService
from zilean.scheduler.leader import APPLICATION_NAME

NOTIFY_BOUND = 5.0  # seconds: far below the 30-second reconcile tick


async def eventually(condition: Callable[[], Any], within: float) -> float:
    """Wait until `condition()` (sync or async) is true; return the seconds it took."""
    started = time.monotonic()
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return time.monotonic() - started
        assert time.monotonic() - started < within, f"not true within {within}s"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def running(service: SchedulerService) -> AsyncIterator[SchedulerService]:
    """Run `service` for the block; on the way out it must stop within a second."""
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        yield service
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=1.0)


def expression_of(service: SchedulerService, job_id: uuid.UUID) -> str | None:
    scheduler = service.scheduler
    entry = None if scheduler is None else scheduler.entries.get(job_id)
    return None if entry is None else entry.key.expression


async def terminate(engine: AsyncEngine, pid: int | None) -> None:
    assert pid is not None
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


async def test_the_registry_triggers_notify_only_changes_the_scheduler_reads(
    engine: AsyncEngine, database_url: str
) -> None:
    job_id = uuid.uuid4()
    jobs = scheduled_jobs.c
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as listener:
        await listener.execute("LISTEN zilean_jobs")

        async def payloads_after(*statements: Any) -> list[str]:
            async with engine.begin() as conn:
                for statement in statements:
                    await conn.execute(statement)
            return [n.payload async for n in listener.notifies(timeout=0.1)]

        one = str(job_id)
        assert await payloads_after(
            insert(scheduled_jobs).values(id=job_id, name="j", cron_expression="1 * * * *")
        ) == [one]
        assert (
            await payloads_after(
                update(scheduled_jobs)
                .where(jobs.id == job_id)
                .values(url="https://x", pool_count=3),
                update(scheduled_jobs).where(jobs.id == job_id).values(cron_expression="1 * * * *"),
            )
            == []
        )  # unread columns, and a scheduler column set to its current value
        for column, value in (
            ("enabled", False),
            ("schedule_type", "rate"),
            ("cron_expression", "@every 1m"),
            ("timezone", "Europe/Paris"),
            ("group_name", "Ops"),
        ):
            edit = update(scheduled_jobs).where(jobs.id == job_id).values({column: value})
            assert await payloads_after(edit) == [one], column
        assert await payloads_after(insert(disabled_groups).values(group_name="Ops")) == [""]
        assert await payloads_after(disabled_groups.delete()) == [""]
        assert await payloads_after(scheduled_jobs.delete()) == [one]


async def test_an_edit_through_the_api_reaches_the_scheduler_without_waiting_for_the_tick(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    assert RECONCILE_INTERVAL == 30.0
    job = await create(core_app, cast.alice.session, cron_expression="0 3 * * *", group_name="Ops")
    job_id = uuid.UUID(job["id"])
    async with running(SchedulerService(engine, database_url, "UTC")) as service:
        await eventually(lambda: expression_of(service, job_id) == "0 3 * * *", 10)

        response = await put(core_app, cast.alice.session, job, cron_expression="15 4 * * *")
        assert response.status_code == 200, response.text
        await eventually(lambda: expression_of(service, job_id) == "15 4 * * *", NOTIFY_BOUND)

        # Disabling a group notifies with no job id: everything is re-read.
        async with client_for(core_app, cast.alice.session) as alice:
            disabled = await alice.post("/api/groups/disable", json={"group_name": "Ops"})
        assert disabled.status_code == 200, disabled.text
        await eventually(lambda: expression_of(service, job_id) is None, NOTIFY_BOUND)


async def test_only_one_of_two_schedulers_leads_and_the_standby_takes_over_when_it_dies(
    engine: AsyncEngine, database_url: str
) -> None:
    def service() -> SchedulerService:
        return SchedulerService(
            engine, database_url, "UTC", retry_interval=0.2, lost_leader_backoff=2.0
        )

    async with running(service()) as first:
        await eventually(first.leading.is_set, 5)
        async with running(service()) as second:
            await asyncio.sleep(0.7)  # several retries of the standby
            assert not second.leading.is_set()
            assert second.scheduler is None

            # The leader's connection dies: it stops scheduling and the standby takes over.
            await terminate(engine, first.leadership.backend_pid)
            took = await eventually(second.leading.is_set, 3)
            assert not first.leading.is_set()
            assert took < 3

            # The former leader stands by; it takes over when the new leader shuts down.
            await asyncio.sleep(0.5)
            assert not first.leading.is_set()
        await eventually(first.leading.is_set, 3)


async def test_a_leader_whose_connection_broke_listens_again_once_it_leads_again(
    engine: AsyncEngine, database_url: str
) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs).values(id=job_id, name="j", cron_expression="1 * * * *")
        )
    service = SchedulerService(
        engine, database_url, "UTC", retry_interval=0.2, lost_leader_backoff=0.2
    )
    async with running(service):
        await eventually(lambda: expression_of(service, job_id) == "1 * * * *", 5)
        lost_pid = service.leadership.backend_pid
        await terminate(engine, lost_pid)
        await eventually(
            lambda: service.leading.is_set() and service.leadership.backend_pid != lost_pid, 5
        )
        async with engine.begin() as conn:
            await conn.execute(
                update(scheduled_jobs)
                .where(scheduled_jobs.c.id == job_id)
                .values(cron_expression="2 * * * *")
            )
        await eventually(lambda: expression_of(service, job_id) == "2 * * * *", NOTIFY_BOUND)


@pytest.mark.parametrize(
    "schedule_type",
    [
        "rate",
        "cron",  # the @every descriptor on a cron job is the same interval
    ],
)
async def test_core_fires_an_every_job_repeatedly_while_it_serves_and_lets_go_on_shutdown(
    database_url: str, engine: AsyncEngine, schedule_type: str
) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs).values(
                id=job_id,
                name="every second",
                schedule_type=schedule_type,
                cron_expression="@every 1s",
                overlap_policy="allow",  # no worker runs here to release overlap locks
            )
        )

    async def fired_twice() -> bool:
        async with engine.connect() as conn:
            count = await conn.execute(
                select(func.count()).select_from(job_firings).where(job_firings.c.job_id == job_id)
            )
            return int(count.scalar_one()) >= 2

    async def scheduler_gone() -> bool:
        async with engine.connect() as conn:
            count = await conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                     "AND datname = current_database()"),
                {"name": APPLICATION_NAME},
            )  # fmt: skip
            return count.scalar_one() == 0

    app = create_core_app(core_settings(database_url), engine)
    with live_server(app):
        await eventually(fired_twice, 8)
    queued = [args for args in await queued_args(engine) if args.job_id == str(job_id)]
    assert len(queued) >= 2
    # Shutdown closed the leader's connection, and the advisory lock went with it.
    await eventually(scheduler_gone, 5)
