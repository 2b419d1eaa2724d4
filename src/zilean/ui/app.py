"""The ui service's ASGI app: the admin app, the sign-in, invite and account pages, and
their assets."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.api.app import create_service_app
from zilean.config import Service, UiSettings
from zilean.ui import pages
from zilean.ui.ratelimit import RateLimiter
from zilean.ui.spa_routes import mount_spa

ASSETS = Path(__file__).parent / "assets"


def create_ui_app(settings: UiSettings, engine: AsyncEngine) -> FastAPI:
    app = create_service_app(Service.UI, "Zilean UI", settings, engine)
    # Separate buckets: exhausting sign-in must not block invite acceptance, or the reverse.
    app.state.login_limiter = RateLimiter(settings.login_rate_per_minute, settings.login_rate_burst)
    app.state.invite_limiter = RateLimiter(
        settings.login_rate_per_minute, settings.login_rate_burst
    )
    app.include_router(pages.router)
    app.mount("/admin/assets", StaticFiles(directory=ASSETS), name="assets")
    mount_spa(app)
    return app
