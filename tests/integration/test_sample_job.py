"""SEED_JOB's sample job: its target, its one insertion per database, its audit entry."""

from __future__ import annotations

import asyncio
import socket

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from tests.support.servers import free_port
from zilean.db.tables import audit_log, scheduled_jobs
from zilean.registry.sample_job import (
    LOCAL_NAME,
    PUBLIC_NAME,
    PUBLIC_URL,
    sample_target,
    seed_sample_job,
)
from zilean.services.core import prepare_core

LOCAL = "http://127.0.0.1:8090/healthz"
UNREACHABLE = ("127.0.0.1", free_port())  # nothing listens there


async def test_the_public_target_is_used_when_it_answers() -> None:
    with socket.socket() as stand_in:  # a listening port stands in for httpbin.org
        stand_in.bind(("127.0.0.1", 0))
        stand_in.listen()
        reachable_host = ("127.0.0.1", stand_in.getsockname()[1])
        assert await sample_target(LOCAL, reachable_host) == (PUBLIC_NAME, PUBLIC_URL)


async def test_the_local_url_is_used_when_the_public_target_is_unreachable() -> None:
    assert await sample_target(LOCAL, UNREACHABLE) == (LOCAL_NAME, LOCAL)


async def test_without_a_local_url_the_public_target_is_kept_even_offline() -> None:
    assert await sample_target(None, UNREACHABLE) == (PUBLIC_NAME, PUBLIC_URL)


async def test_the_sample_job_is_inserted_once_even_by_racing_cores(
    database_url: str, engine: AsyncEngine
) -> None:
    settings = core_settings(database_url, SEED_JOB="1")
    seeded = await asyncio.gather(
        *(
            seed_sample_job(engine, settings, local_url=LOCAL, public_host=UNREACHABLE)
            for _ in "abc"
        )
    )
    again = await seed_sample_job(engine, settings, local_url=LOCAL, public_host=UNREACHABLE)

    assert len([job for job in seeded if job is not None]) == 1
    assert again is None
    async with engine.connect() as conn:
        rows = (await conn.execute(select(scheduled_jobs))).mappings().all()
        audited = (await conn.execute(select(audit_log))).mappings().all()
    assert [(r["name"], r["url"], r["cron_expression"]) for r in rows] == [
        (LOCAL_NAME, LOCAL, "*/5 * * * *")
    ]
    assert [(a["action"], a["actor_user_id"], a["actor_email"]) for a in audited] == [
        ("job.create", None, None)
    ]


async def test_a_deleted_sample_job_is_not_inserted_again(
    database_url: str, engine: AsyncEngine
) -> None:
    settings = core_settings(database_url, SEED_JOB="1")
    assert await seed_sample_job(engine, settings, public_host=UNREACHABLE) is not None
    async with engine.begin() as conn:
        await conn.execute(scheduled_jobs.delete())
    assert await seed_sample_job(engine, settings, public_host=UNREACHABLE) is None


async def test_core_inserts_no_sample_job_unless_seed_job_is_set(
    database_url: str, engine: AsyncEngine
) -> None:
    admin = {"ADMIN_USERNAME": "a@example.com", "ADMIN_PASSWORD_HASH": "$2b$10$" + "a" * 53}
    await prepare_core(core_settings(database_url, SEED_JOB="yes", **admin), engine)
    async with engine.connect() as conn:
        assert (await conn.execute(select(scheduled_jobs))).first() is None
