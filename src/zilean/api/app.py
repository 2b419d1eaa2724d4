"""ASGI apps: the shared base every HTTP service starts from, and core's admin API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean import __version__
from zilean.api import health
from zilean.api.body_limit import BodyLimitMiddleware
from zilean.api.errors import install_error_handlers
from zilean.api.openapi import complete_openapi
from zilean.api.routes import (
    account,
    activity,
    alarms,
    audit,
    global_variables,
    groups,
    invites,
    job_csv,
    jobs,
    mcp_admin,
    meta,
    monitoring,
    notify,
    prometheus,
    queue_jobs,
    queue_settings,
    roles,
    runs,
    schedules,
    script_volumes,
    smtp,
    tokens,
    users,
)
from zilean.config import CoreSettings, Service, Settings
from zilean.crypto.secretbox import SecretBox
from zilean.maintenance.sweeps import run_sweeps
from zilean.monitoring.activity import HeartbeatCache
from zilean.monitoring.prometheus import MetricsExporter
from zilean.monitoring.sampling import sampling
from zilean.notify.dispatcher import Notifier
from zilean.scheduler import SchedulerService

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]

# Any request body: a job with a long script fits easily. The CSV import has a larger cap.
MAX_BODY_BYTES = 1024 * 1024


def create_service_app(
    service: Service,
    title: str,
    settings: Settings,
    engine: AsyncEngine,
    *,
    openapi_url: str | None = None,
    background: Lifespan | None = None,
) -> FastAPI:
    """Return an app with the settings and engine on `app.state`, `/healthz` and JSON errors.

    While it serves, the app samples its process under `service`'s label (unless the
    host that runs it already samples the process for it) and runs `background`, if any.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        probes = {service: health.answers_healthz(app)}
        async with sampling(settings.database_url, service, probes=probes) as serving:
            if background is None:
                serving.set()
                yield
            else:
                async with background(app):
                    serving.set()
                    yield

    app = FastAPI(
        title=title,
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=openapi_url,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.health_checks = [health.database_reachable]  # a service appends its own
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, limit_for=_body_limit)
    app.include_router(health.router)
    return app


def _body_limit(path: str) -> int | None:
    return None if path == job_csv.IMPORT_PATH else MAX_BODY_BYTES


@asynccontextmanager
async def _core_background(app: FastAPI) -> AsyncIterator[None]:
    """Run core's background loops (sweeps, scheduler, metrics export) while the app serves."""
    settings: CoreSettings = app.state.settings
    stop = asyncio.Event()
    scheduler = SchedulerService(app.state.engine, settings.database_url, settings.timezone)
    app.state.scheduler = scheduler
    notifier = Notifier(
        app.state.engine,
        SecretBox(settings.settings_encryption_key),
        leading=scheduler.leading.is_set,
    )
    app.state.notifier = notifier
    tasks = [
        asyncio.create_task(notifier.run(stop), name="zilean-notifier"),
        asyncio.create_task(run_sweeps(app.state.engine, stop), name="zilean-sweeps"),
        asyncio.create_task(scheduler.run(stop), name="zilean-scheduler"),
        asyncio.create_task(app.state.metrics_exporter.run(stop), name="zilean-prometheus"),
    ]
    try:
        yield
    finally:
        stop.set()
        # The loops return within a second of `stop`; a hung database call is cancelled.
        _, pending = await asyncio.wait(tasks, timeout=2.0)  # seconds
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def create_core_app(settings: CoreSettings, engine: AsyncEngine) -> FastAPI:
    app = create_service_app(
        Service.CORE,
        "Zilean admin API",
        settings,
        engine,
        openapi_url="/api/openapi.json",
        background=_core_background,
    )
    app.state.metrics_exporter = MetricsExporter(engine)
    app.state.heartbeat_cache = HeartbeatCache()
    for module in (
        # Before jobs: /api/jobs/{job_id} would claim /api/jobs/import and /heartbeats.
        job_csv,
        activity,
        runs,
        meta,
        jobs,
        groups,
        schedules,
        account,
        users,
        roles,
        invites,
        tokens,
        audit,
        global_variables,
        script_volumes,
        queue_settings,
        queue_jobs,
        mcp_admin,
        monitoring,
        prometheus,
        notify,
        smtp,
        alarms,
    ):
        app.include_router(module.router)
    app.openapi = lambda: complete_openapi(app)  # type: ignore[method-assign]
    return app
