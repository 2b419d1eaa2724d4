"""ASGI apps: the shared base every HTTP service starts from, and core's admin API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean import __version__
from zilean.api import health
from zilean.api.errors import install_error_handlers
from zilean.api.routes import (
    account,
    audit,
    global_variables,
    groups,
    invites,
    job_csv,
    jobs,
    meta,
    roles,
    schedules,
    script_volumes,
    tokens,
    users,
)
from zilean.audit.retention import run_sweeps
from zilean.config import CoreSettings, Settings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_service_app(
    title: str,
    settings: Settings,
    engine: AsyncEngine,
    *,
    openapi_url: str | None = None,
    lifespan: Lifespan | None = None,
) -> FastAPI:
    """Return an app with the settings and engine on `app.state`, `/healthz` and JSON errors."""
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
    install_error_handlers(app)
    app.include_router(health.router)
    return app


@asynccontextmanager
async def _core_background(app: FastAPI) -> AsyncIterator[None]:
    """Run core's background loops for as long as the app serves."""
    stop = asyncio.Event()
    sweeps = asyncio.create_task(run_sweeps(app.state.engine, stop))
    try:
        yield
    finally:
        stop.set()
        await sweeps


def create_core_app(settings: CoreSettings, engine: AsyncEngine) -> FastAPI:
    app = create_service_app(
        "Zilean admin API",
        settings,
        engine,
        openapi_url="/api/openapi.json",
        lifespan=_core_background,
    )
    for module in (
        job_csv,  # before jobs: /api/jobs/{job_id} would claim /api/jobs/import
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
    ):
        app.include_router(module.router)
    return app
