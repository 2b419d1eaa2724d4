"""ASGI apps: the shared base every HTTP service starts from, and core's admin API."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean import __version__
from zilean.api import health
from zilean.api.errors import install_error_handlers
from zilean.api.routes import account, audit, invites, meta, roles, tokens, users
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


def create_core_app(settings: CoreSettings, engine: AsyncEngine) -> FastAPI:
    app = create_service_app("Zilean admin API", settings, engine, openapi_url="/api/openapi.json")
    for module in (meta, account, users, roles, invites, tokens, audit):
        app.include_router(module.router)
    return app
