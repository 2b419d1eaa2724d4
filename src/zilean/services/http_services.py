"""The four HTTP services run standalone: core, ui, mcp and webhook."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_core_app
from zilean.config import CoreSettings, McpSettings, Service, UiSettings, WebhookSettings
from zilean.db.engine import create_engine
from zilean.db.schema import wait_for_schema
from zilean.mcp.app import create_mcp_app
from zilean.services.core import prepare_core
from zilean.services.http import serve
from zilean.services.signals import stop_on_signals
from zilean.ui.app import create_ui_app
from zilean.webhooks.app import create_webhook_app

log = structlog.get_logger(__name__)

HttpSettings = CoreSettings | UiSettings | McpSettings | WebhookSettings


async def run_http_service(service: Service, settings: HttpSettings) -> None:
    """Run one HTTP service until SIGINT or SIGTERM."""
    log.info(
        "starting",
        action="service.starting",
        listen=str(settings.listen),
        timezone=settings.timezone,
    )
    engine = create_engine(settings.database_url)
    try:
        if isinstance(settings, CoreSettings):
            await prepare_core(settings, engine)
        else:
            # Only core migrates; everyone else waits for it rather than crash-looping.
            stop = asyncio.Event()
            with stop_on_signals(stop):
                if not await wait_for_schema(settings.database_url, stop=stop):
                    return
        app = build_app(settings, engine)
        await serve(app, settings.listen)
    finally:
        await engine.dispose()
    log.info("stopped", action="service.stopped", service=str(service))


def build_app(settings: HttpSettings, engine: AsyncEngine) -> FastAPI:
    factories: dict[type, Callable[..., FastAPI]] = {
        CoreSettings: create_core_app,
        UiSettings: create_ui_app,
        McpSettings: create_mcp_app,
        WebhookSettings: create_webhook_app,
    }
    return factories[type(settings)](settings, engine)
