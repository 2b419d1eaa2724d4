"""The supervised queue engine: restarts on any end we did not ask for; the watchdog."""

from __future__ import annotations

import asyncio
import time
import uuid

import procrastinate
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import scheduled_jobs
from zilean.execution.enqueue import AttemptArgs, enqueue_attempts
from zilean.services.engine import NoProgressWatchdog, Progress, WatchedWorker, supervise


async def test_an_engine_that_returns_on_its_own_is_restarted(database_url: str) -> None:
    stop = asyncio.Event()
    runs: list[WatchedWorker] = []

    def make_worker(app: procrastinate.App) -> WatchedWorker:
        # wait=False: the run returns (exit without error) once the queue is empty.
        worker = WatchedWorker(app=app, wait=False, install_signal_handlers=False)
        runs.append(worker)
        if len(runs) == 3:
            stop.set()
        return worker

    restarts = await asyncio.wait_for(
        supervise(
            database_url=database_url,
            max_connections=3,
            register=lambda app: None,
            make_worker=make_worker,
            stop=stop,
            backoff=0.01,
        ),
        timeout=20,
    )
    assert len(runs) == 3
    assert restarts == 2  # the third run ended because we asked


async def test_a_dead_listener_stops_the_run_for_a_restart(database_url: str) -> None:
    stop = asyncio.Event()
    runs: list[WatchedWorker] = []

    def make_worker(app: procrastinate.App) -> WatchedWorker:
        worker = WatchedWorker(app=app, install_signal_handlers=False)
        runs.append(worker)
        if len(runs) == 2:
            stop.set()
        return worker

    async def kill_first_listener() -> None:
        for _ in range(200):
            if runs and runs[0].side_tasks:
                break
            await asyncio.sleep(0.05)
        [listener] = [t for t in runs[0].side_tasks if t.get_name() == "listener"]
        listener.cancel()

    killer = asyncio.create_task(kill_first_listener())
    restarts = await asyncio.wait_for(
        supervise(
            database_url=database_url,
            max_connections=3,
            register=lambda app: None,
            make_worker=make_worker,
            stop=stop,
            backoff=0.01,
        ),
        timeout=20,
    )
    await killer
    assert (len(runs), restarts) == (2, 1)


async def _queue_one(engine: AsyncEngine) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(insert(scheduled_jobs).values(id=job_id, name="j", job_type="http"))
        args = AttemptArgs(job_id=str(job_id), loop_iteration=0, pool_index=0, max_attempts=1)
        await enqueue_attempts(conn, job_id=job_id, job_type="http", members=[args])


async def test_the_watchdog_fires_only_after_a_sustained_stall(engine: AsyncEngine) -> None:
    progress = Progress()
    watchdog = NoProgressWatchdog(engine, ["default"], progress, concurrency=2, after=0.3)
    assert await watchdog.run_once() is False  # nothing waits
    await _queue_one(engine)
    await asyncio.sleep(0.4)
    assert await watchdog.run_once() is False  # stalled, but only just noticed
    await asyncio.sleep(0.4)
    assert await watchdog.run_once() is True
    progress.touch()  # a job started: the stall is over
    assert await watchdog.run_once() is False


async def test_the_watchdog_leaves_a_busy_engine_alone(engine: AsyncEngine) -> None:
    progress = Progress()
    progress.last = time.monotonic() - 60
    progress.running = 2  # every slot holds a long attempt
    watchdog = NoProgressWatchdog(engine, ["default"], progress, concurrency=2, after=0.1)
    await _queue_one(engine)
    await asyncio.sleep(0.3)
    for _ in range(3):
        assert await watchdog.run_once() is False
        await asyncio.sleep(0.15)
