"""The job-executing services: the HTTP worker and one script worker per runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import structlog

from zilean.config import ScriptWorkerSettings, Service, WorkerSettings
from zilean.db.schema import wait_for_schema
from zilean.db.urls import libpq_url
from zilean.execution.queues import SERVICE_QUEUES
from zilean.monitoring.sampling import sampling
from zilean.monitoring.script_workers import HostChecks, host_checks, run_status_reports
from zilean.services.heap import freeze_startup_heap
from zilean.services.signals import SOFT_STOP, stop_on_signals

if TYPE_CHECKING:
    import aiohttp

    from zilean.jobkinds.caller import Caller
    from zilean.registry.kinds import JobType

log = structlog.get_logger(__name__)


def run_worker(service: Service, settings: WorkerSettings | ScriptWorkerSettings) -> None:
    """Consume this service's queue until SIGINT or SIGTERM, then drain for `SOFT_STOP`.

    Workers run on uvloop where it is installed: the attempt path is mostly event-loop
    work (sockets to Postgres and to the targets), which uvloop does at a fraction of
    the CPU.
    """
    run_workers([(service, settings)])


def run_workers(
    services: Sequence[tuple[Service, WorkerSettings | ScriptWorkerSettings]],
) -> None:
    """Run several workers in this process, each with its own queue and engine.

    `zilean up` runs every installed script runtime in one process this way (they share
    one trust tier: the script key, one user); a deployment runs one per process. The
    process is sampled once, under every service it runs.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we run
        asyncio.run(_run_workers(services))
    else:
        uvloop.run(_run_workers(services))


async def _run_workers(
    services: Sequence[tuple[Service, WorkerSettings | ScriptWorkerSettings]],
) -> None:
    stop = asyncio.Event()
    with stop_on_signals(stop):
        database_url = services[0][1].database_url
        if not await wait_for_schema(database_url, stop=stop):
            return
        async with sampling(database_url, *(service for service, _ in services)):
            await asyncio.gather(
                *(_serve(service, settings, stop) for service, settings in services)
            )


async def _serve(
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
    monitors = []
    try:
        if isinstance(settings, WorkerSettings):
            await _consume_http_attempts(service, settings, stop)
        else:
            checks = await host_checks(settings)
            monitors.append(
                asyncio.create_task(
                    run_status_reports(settings.database_url, settings, checks, stop),
                    name="zilean-script-status",
                )
            )
            await _consume_script_attempts(service, settings, checks, stop)
    finally:
        stop.set()
        await asyncio.gather(*monitors)
    log.info("stopped", action="service.stopped")


async def _consume_http_attempts(
    service: Service, settings: WorkerSettings, stop: asyncio.Event
) -> None:
    # The HTTP attempt path (aiohttp, the request builder, the key) loads only here.
    from zilean.crypto.secretbox import SecretBox
    from zilean.jobkinds.http.call import new_client
    from zilean.jobkinds.http.caller import http_callers

    # Attempts plus their failure callbacks share one connection pool.
    client = new_client(max_connections=2 * settings.max_concurrency)
    callers = http_callers(client, SecretBox(settings.settings_encryption_key))
    await _consume(service, settings, callers, client, stop)


async def _consume_script_attempts(
    service: Service, settings: ScriptWorkerSettings, checks: HostChecks, stop: asyncio.Event
) -> None:
    import os

    from zilean.crypto.secretbox import SecretBox
    from zilean.jobkinds.http.call import new_client
    from zilean.jobkinds.script.caller import ScriptHost, script_callers
    from zilean.jobkinds.script.runtimes import runtime_interpreters

    # What this runtime lacks was reported at start-up (`zilean script-worker`); its
    # job types' attempts are cancelled naming it.
    host = ScriptHost(
        path=os.environ.get("PATH", ""),
        timezone=os.environ.get("TZ") or None,
        volumes_root=settings.volumes_root if checks.volumes_root_mounted else None,
        sandbox=checks.sandbox_enforced,
    )
    callers = script_callers(
        runtime_interpreters(settings.runtime), host, SecretBox(settings.script_secrets_key)
    )
    # Scripts make no HTTP calls of ours but the failure callback.
    client = new_client(max_connections=settings.max_concurrency)
    await _consume(service, settings, callers, client, stop)


async def _consume(
    service: Service,
    settings: WorkerSettings | ScriptWorkerSettings,
    callers: Mapping[JobType, Caller],
    client: aiohttp.ClientSession,
    stop: asyncio.Event,
) -> None:
    """Run this service's queue through an attempt runner with `callers`, until `stop`."""
    from zilean.execution.attempt import AttemptRunner, attempt_handler, interrupt_overrun
    from zilean.queue_engine.consumer import QueueConsumer

    [queue] = SERVICE_QUEUES[service]
    runner = AttemptRunner(
        settings.database_url, callers, client, default_failure_url=settings.on_failure_url
    )
    consumer = QueueConsumer(
        libpq_url(settings.database_url),
        str(queue),
        attempt_handler(runner),
        concurrency=settings.max_concurrency,
        application_name=f"zilean-{service}",
        on_overrun=lambda deliveries: interrupt_overrun(runner, deliveries),
        soft_stop=SOFT_STOP,
    )
    runner.run_continuations_on(consumer)
    freeze_startup_heap()
    try:
        await consumer.run(stop)
    finally:
        await runner.callbacks.settle()
        await runner.outbox.settle()
        await runner.close()
        await client.close()
