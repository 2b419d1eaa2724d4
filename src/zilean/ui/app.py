"""The ui service's ASGI app."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_service_app
from zilean.config import UiSettings


def create_ui_app(settings: UiSettings, engine: AsyncEngine) -> FastAPI:
    return create_service_app("Zilean UI", settings, engine)
