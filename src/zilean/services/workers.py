"""The job-executing services: the HTTP worker and one script worker per runtime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import procrastinate
import structlog
from procrastinate.worker import Worker

from zilean.config import ScriptWorkerSettings, Service, WorkerSettings
from zilean.crypto.secretbox import SecretBox
from zilean.db.engine import create_engine
from zilean.db.migrate import wait_for_schema
from zilean.execution.attempt import AttemptRunner, register_attempt_task
from zilean.execution.queues import SERVICE_QUEUES, create_queue_app
from zilean.jobkinds.http.call import new_client
from zilean.services.signals import stop_on_signals

log = structlog.get_logger(__name__)

SOFT_STOP = 25.0  # seconds in-flight jobs get to finish after SIGINT/SIGTERM
ENGINE_POOL = 10  # connections kept per worker: an attempt holds one only per statement


async def run_worker(service: Service, settings: WorkerSettings | ScriptWorkerSettings) -> None:
    """Consume this service's queue until SIGINT or SIGTERM, then drain for `SOFT_STOP`."""
    queues = sorted(SERVICE_QUEUES[service])
    log.info(
        "starting",
        action="service.starting",
        queues=queues,
        concurrency=settings.max_concurrency,
        timezone=settings.timezone,
    )
    stop = asyncio.Event()
    with stop_on_signals(stop):
        if not await wait_for_schema(settings.database_url, stop=stop):
            return
        app = create_queue_app(settings.database_url, max_connections=settings.max_concurrency + 2)
        async with _attempt_task(app, settings), app.open_async():
            worker = Worker(
                app=app,
                name=str(service),
                queues=queues,
                concurrency=settings.max_concurrency,
                shutdown_graceful_timeout=SOFT_STOP,
                # Our handlers are installed from the first instant; the engine's own
                # arrive only once its loop starts, leaving a window where SIGTERM kills.
                install_signal_handlers=False,
            )
            await _run_until_stopped(worker, stop)
    log.info("stopped", action="service.stopped")


@asynccontextmanager
async def _attempt_task(
    app: procrastinate.App, settings: WorkerSettings | ScriptWorkerSettings
) -> AsyncIterator[None]:
    """Register the attempt task for the HTTP worker, with its engine and shared client.

    Script workers register nothing yet: script attempts arrive with their own runner.
    """
    if not isinstance(settings, WorkerSettings):
        yield
        return
    size = min(settings.max_concurrency, ENGINE_POOL)
    engine = create_engine(settings.database_url, pool_size=size, max_overflow=size)
    # Attempts plus their failure callbacks share one connection pool.
    client = new_client(max_connections=2 * settings.max_concurrency)
    runner = AttemptRunner(
        engine,
        client,
        SecretBox(settings.settings_encryption_key),
        default_failure_url=settings.on_failure_url,
    )
    register_attempt_task(app, runner)
    try:
        yield
    finally:
        await runner.callbacks.settle()
        await client.aclose()
        await engine.dispose()


async def _run_until_stopped(worker: Worker, stop: asyncio.Event) -> None:
    running = asyncio.create_task(worker.run())  # type: ignore[no-untyped-call]
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stopping in done:
        worker.stop()  # type: ignore[no-untyped-call]
        await running
    else:
        stopping.cancel()
        running.result()
