from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, build_cast
from tests.support.target import HttpTarget, http_target
from zilean.api.app import create_core_app
from zilean.config import CoreSettings, Service, UiSettings, load_settings
from zilean.jobkinds.http.call import new_client
from zilean.ui.app import create_ui_app

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def core_settings(database_url: str, **env: str) -> CoreSettings:
    """Core's settings for a test; TZ is UTC unless given (empty: the machine's zone)."""
    settings = load_settings(
        Service.CORE,
        {"DATABASE_URL": database_url, "SETTINGS_ENCRYPTION_KEY": KEY, "TZ": "UTC", **env},
    )
    assert isinstance(settings, CoreSettings)
    return settings


@pytest.fixture
def core_app(database_url: str, engine: AsyncEngine) -> FastAPI:
    """Core's app in process (no lifespan: background loops stay off)."""
    return create_core_app(
        core_settings(database_url, PUBLIC_BASE_URL="https://zilean.example.com"), engine
    )


@pytest.fixture
async def cast(engine: AsyncEngine) -> Cast:
    return await build_cast(engine)


@pytest.fixture
def ui_factory(database_url: str, engine: AsyncEngine) -> Callable[..., FastAPI]:
    """Build the ui service's app with extra environment variables."""

    def make(**env: str) -> FastAPI:
        settings = load_settings(Service.UI, {"DATABASE_URL": database_url, **env})
        assert isinstance(settings, UiSettings)
        return create_ui_app(settings, engine)

    return make


@pytest.fixture
def ui_app(ui_factory: Callable[..., FastAPI]) -> FastAPI:
    return ui_factory()


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    """A recording HTTP target on loopback."""
    with http_target() as target:
        yield target


@pytest.fixture
async def http_session() -> AsyncIterator[aiohttp.ClientSession]:
    """The HTTP worker's session (`new_client`), for calls made by hand."""
    async with new_client(10) as session:
        yield session
