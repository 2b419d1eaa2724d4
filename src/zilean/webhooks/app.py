"""The webhook service's ASGI app. It holds no encryption key by construction."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_service_app
from zilean.config import Service, WebhookSettings


def create_webhook_app(settings: WebhookSettings, engine: AsyncEngine) -> FastAPI:
    return create_service_app(Service.WEBHOOK, "Zilean webhooks", settings, engine)
