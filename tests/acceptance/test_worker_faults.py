"""The real worker under Postgres faults: a restart, and a storm of killed backends.

Each test runs its own embedded Postgres (never the session's shared one), a `zilean
worker` subprocess against it, a producer queueing about five fast HTTP attempts a
second, and the stalled-attempt reaper as core's leader would run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from zilean.execution.reaper import StalledAttemptReaper

from tests.support.cli import RunningProcess, base_environment, spawn_cli
from tests.support.target import http_target
from zilean.db.embedded import embedded_postgres
from zilean.db.engine import create_engine
from zilean.db.migrate import migrate
from zilean.db.tables import job_attempts, scheduled_jobs
from zilean.db.urls import libpq_url
from zilean.execution.enqueue import enqueue_attempts
from zilean.execution.payload import AttemptArgs

pytestmark = pytest.mark.acceptance

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
PRODUCE_EVERY = 0.2  # seconds: five attempts a second
RECOVERY_BOUND = 15.0  # seconds after the fault ends until attempts are recorded again
SETTLE_BOUND = 20.0  # seconds after producing stops until nothing is `doing`


@contextmanager
def own_postgres(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    pgdata = tmp_path / "pgdata"
    with embedded_postgres(pgdata) as url:
        migrate(url)
        yield url, pgdata


async def _http_job(engine: AsyncEngine, url: str) -> uuid.UUID:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs).values(
                id=job_id, name="steady", job_type="http", url=url, exec_timeout_ms=2_000
            )
        )
    return job_id


async def _produce(engine: AsyncEngine, job_id: uuid.UUID, stop: asyncio.Event) -> None:
    """Queue one attempt every PRODUCE_EVERY; a failed insert (mid-fault) is skipped."""
    args = AttemptArgs(job_id=str(job_id), loop_iteration=0, pool_index=0, max_attempts=1)
    while not stop.is_set():
        with contextlib.suppress(SQLAlchemyError, OSError, TimeoutError):
            async with asyncio.timeout(2.0), engine.begin() as conn:
                await enqueue_attempts(conn, job_id=job_id, job_type="http", members=[args])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=PRODUCE_EVERY)


async def _reap(reaper: StalledAttemptReaper, stop: asyncio.Event) -> None:
    await reaper.run(stop, interval=1.0)


async def _recorded_since(engine: AsyncEngine, since: float) -> int:
    """Attempts recorded after the database clock's epoch second `since`."""
    with contextlib.suppress(SQLAlchemyError, OSError):
        async with engine.connect() as conn:
            count = await conn.scalar(
                select(func.count()).where(job_attempts.c.finalized_at > func.to_timestamp(since))
            )
            return int(count or 0)
    return 0


async def _doing(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('doing', 'todo')")
        )
        return int(count or 0)


async def _within(seconds: float, condition: Callable[[], Awaitable[bool]]) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if await condition():
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"not true within {seconds}s")


@asynccontextmanager
async def steady_stream(url: str) -> AsyncIterator[tuple[AsyncEngine, RunningProcess]]:
    """A worker, a producer and a reaper against `url`, all stopped on the way out."""
    engine = create_engine(url)
    stop = asyncio.Event()
    env = base_environment(DATABASE_URL=url, SETTINGS_ENCRYPTION_KEY=KEY)
    tasks: list[asyncio.Task[None]] = []
    try:
        with http_target() as target, spawn_cli(["worker"], env) as worker:
            worker.wait_for("Starting worker on queues default", timeout=30)
            job_id = await _http_job(engine, f"{target.base_url}/work")
            reaper = StalledAttemptReaper(engine, stalled_after=3.0, overrun_margin=1.0)
            tasks = [
                asyncio.create_task(_produce(engine, job_id, stop)),
                asyncio.create_task(_reap(reaper, stop)),
            ]
            started = time.time()
            await _within(10.0, lambda: _has_recorded(engine, started))
            yield engine, worker
            stop.set()
            await asyncio.gather(*tasks)
            # Every queued attempt runs or is reaped: nothing left waiting or running.
            await _within(SETTLE_BOUND, lambda: _settled(engine))
            assert worker.process.poll() is None, worker.output  # recovered in-process
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.dispose()


async def _has_recorded(engine: AsyncEngine, since: float) -> bool:
    return await _recorded_since(engine, since) > 0


async def _settled(engine: AsyncEngine) -> bool:
    with contextlib.suppress(SQLAlchemyError, OSError):
        return await _doing(engine) == 0
    return False


def _restart(pgdata: Path) -> None:
    """Restart the server with its own pg_ctl, as the user owning its data (not root)."""
    import os

    from embedded_postgres._commands import pg_ctl

    owner = pgdata.stat().st_uid
    pg_ctl(
        ["-w", "-m", "fast", "-l", str(pgdata / "restart.log"), "restart"],
        pgdata=pgdata,
        timeout=30,
        user=owner if owner != os.getuid() else None,
    )


async def test_the_worker_recovers_from_a_postgres_restart(tmp_path: Path) -> None:
    with own_postgres(tmp_path) as (url, pgdata):
        async with steady_stream(url) as (engine, worker):
            await asyncio.sleep(2.0)
            await asyncio.to_thread(_restart, pgdata)
            back = time.time()
            recovery = await _within(RECOVERY_BOUND, lambda: _has_recorded(engine, back))
            print(
                f"restart: attempts recorded again {recovery:.1f}s after Postgres was back;"
                f" engine restarts {worker.output.count('worker.engine_restart')}"
            )


async def test_the_worker_recovers_from_a_backend_termination_storm(tmp_path: Path) -> None:
    with own_postgres(tmp_path) as (url, _):
        async with steady_stream(url) as (engine, worker):
            await asyncio.sleep(2.0)
            await asyncio.to_thread(_storm, url, 5.0)
            back = time.time()
            recovery = await _within(RECOVERY_BOUND, lambda: _has_recorded(engine, back))
            print(
                f"storm: attempts recorded again {recovery:.1f}s after the storm;"
                f" engine restarts {worker.output.count('worker.engine_restart')}"
            )


def _storm(url: str, seconds: float) -> None:
    """Terminate every other backend of the database every 200 ms for `seconds`."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            time.sleep(0.2)
