"""The webhook service's ASGI app. It holds no encryption key by construction."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_service_app
from zilean.config import Service, WebhookSettings
from zilean.ui.ratelimit import RateLimiter
from zilean.webhooks import receiver


def create_webhook_app(settings: WebhookSettings, engine: AsyncEngine) -> FastAPI:
    app = create_service_app(Service.WEBHOOK, "Zilean webhooks", settings, engine)
    app.state.webhook_limiter = RateLimiter(settings.rate_per_minute, settings.rate_burst)
    app.include_router(receiver.router)
    return app
