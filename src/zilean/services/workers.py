"""The job-executing services: the HTTP worker and one script worker per runtime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import procrastinate
import structlog

from zilean.config import ScriptWorkerSettings, Service, WorkerSettings
from zilean.db.engine import create_engine
from zilean.db.schema import wait_for_schema
from zilean.execution.queues import SERVICE_QUEUES
from zilean.monitoring.sampling import run_sampling
from zilean.monitoring.script_workers import run_status_reports
from zilean.services.engine import (
    WORKER_HEARTBEAT_INTERVAL,
    NoProgressWatchdog,
    Progress,
    WatchedWorker,
    supervise,
)
from zilean.services.signals import stop_on_signals

log = structlog.get_logger(__name__)

SOFT_STOP = 25.0  # seconds in-flight jobs get to finish after SIGINT/SIGTERM
ENGINE_POOL = 10  # connections kept per worker: an attempt holds one only per statement


async def run_worker(service: Service, settings: WorkerSettings | ScriptWorkerSettings) -> None:
    """Consume this service's queue until SIGINT or SIGTERM, then drain for `SOFT_STOP`.

    The queue engine runs supervised (`services/engine.py`): restarted on any end we did
    not ask for, and the process exits non-zero when it makes no progress.
    """
    await run_workers([(service, settings)])


async def run_workers(
    services: Sequence[tuple[Service, WorkerSettings | ScriptWorkerSettings]],
) -> None:
    """Run several workers in this process, each with its own queue, engine and samples.

    `zilean up` runs every installed script runtime in one process this way (they share
    one trust tier: the script key, one user); a deployment runs one per process.
    """
    stop = asyncio.Event()
    with stop_on_signals(stop):
        if not await wait_for_schema(services[0][1].database_url, stop=stop):
            return
        await asyncio.gather(*(_consume(service, settings, stop) for service, settings in services))


async def _consume(
    service: Service, settings: WorkerSettings | ScriptWorkerSettings, stop: asyncio.Event
) -> None:
    structlog.contextvars.bind_contextvars(service=str(service))  # this task's lines only
    queues = sorted(SERVICE_QUEUES[service])
    log.info(
        "starting",
        action="service.starting",
        queues=queues,
        concurrency=settings.max_concurrency,
        timezone=settings.timezone,
    )
    progress = Progress()

    def make_worker(app: procrastinate.App) -> WatchedWorker:
        return WatchedWorker(
            app=app,
            name=str(service),
            queues=queues,
            concurrency=settings.max_concurrency,
            shutdown_graceful_timeout=SOFT_STOP,
            # Our handlers are installed from the first instant; the engine's own
            # arrive only once its loop starts, leaving a window where SIGTERM kills.
            install_signal_handlers=False,
            update_heartbeat_interval=WORKER_HEARTBEAT_INTERVAL,
            worker_middleware=[progress.middleware],
        )

    # One small pool for the watchdog's probes, the metrics samples and status reports.
    probe = create_engine(settings.database_url, pool_size=1, max_overflow=1)
    watchdog = NoProgressWatchdog(probe, queues, progress, settings.max_concurrency)
    monitors = [
        asyncio.create_task(watchdog.run(stop), name="zilean-no-progress"),
        asyncio.create_task(run_sampling(probe, service, stop), name="zilean-sampling"),
    ]
    if isinstance(settings, ScriptWorkerSettings):
        monitors.append(
            asyncio.create_task(
                run_status_reports(probe, settings, stop), name="zilean-script-status"
            )
        )
    try:
        async with _attempt_task(settings) as register:
            await supervise(
                database_url=settings.database_url,
                max_connections=settings.max_concurrency + 2,
                register=register,
                make_worker=make_worker,
                stop=stop,
                progress=progress,
            )
    finally:
        stop.set()
        await asyncio.gather(*monitors)
        await probe.dispose()
    log.info("stopped", action="service.stopped")


@asynccontextmanager
async def _attempt_task(
    settings: WorkerSettings | ScriptWorkerSettings,
) -> AsyncIterator[Callable[[procrastinate.App], None]]:
    """Yield how each engine run registers the attempt task (HTTP worker only).

    The attempt engine and HTTP client outlive engine restarts. Script workers register
    nothing yet: script attempts arrive with their own runner.
    """
    if not isinstance(settings, WorkerSettings):
        yield lambda app: None
        return
    # The HTTP attempt path (httpx, the request builder) loads only in the HTTP worker.
    from zilean.crypto.secretbox import SecretBox
    from zilean.execution.attempt import AttemptRunner, register_attempt_task
    from zilean.jobkinds.http.call import new_client

    size = min(settings.max_concurrency, ENGINE_POOL)
    # The attempts' own statements use the runner's psycopg pool (`hot_pool_size`); this
    # engine only serves the rare paths (a failed recording's fallback, a cancellation).
    engine = create_engine(settings.database_url, pool_size=1, max_overflow=2)
    # Attempts plus their failure callbacks share one connection pool.
    client = new_client(max_connections=2 * settings.max_concurrency)
    runner = AttemptRunner(
        engine,
        client,
        SecretBox(settings.settings_encryption_key),
        default_failure_url=settings.on_failure_url,
        hot_pool_size=2 * size,
    )
    try:
        yield lambda app: register_attempt_task(app, runner)
    finally:
        await runner.callbacks.settle()
        await runner.close()
        await client.aclose()
        await engine.dispose()
