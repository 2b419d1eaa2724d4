from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from zilean.api.app import create_core_app
from zilean.auth.bootstrap import seed_super_admin
from zilean.auth.passwords import hash_password, verify_password
from zilean.config import machine_zone
from zilean.db.tables import app_settings, users
from zilean.errors import ConfigError
from zilean.services.core import prepare_core


@pytest.fixture
async def client(database_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_core_app(core_settings(database_url, TZ="America/Los_Angeles"), engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://core") as client:
        yield client


async def test_meta_reports_the_configured_timezone(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/meta")
    assert response.status_code == 200
    assert response.json() == {"timezone": "America/Los_Angeles", "demo_mode": False}


async def test_meta_reports_the_machine_zone_when_tz_is_unset(
    database_url: str, engine: AsyncEngine
) -> None:
    app = create_core_app(core_settings(database_url, TZ=""), engine)  # empty counts as unset
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://core"
    ) as client:
        response = await client.get("/api/meta")
    assert response.json() == {"timezone": machine_zone(), "demo_mode": False}


async def test_meta_declares_its_response_model(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/api/openapi.json")).json()
    ok = schema["paths"]["/api/meta"]["get"]["responses"]["200"]["content"]["application/json"]
    model = schema["components"]["schemas"][ok["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert set(model["properties"]) == set(model["required"]) == {"timezone", "demo_mode"}


async def test_healthz_answers(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_unknown_routes_answer_with_the_error_body(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found"}


async def test_the_super_admin_is_seeded_once_and_env_changes_are_ignored(
    database_url: str, engine: AsyncEngine
) -> None:
    first = core_settings(
        database_url,
        ADMIN_USERNAME="first@example.com",
        ADMIN_PASSWORD_HASH=hash_password("first-password"),
    )
    assert await prepare_core(first, engine)
    second = core_settings(
        database_url,
        ADMIN_USERNAME="second@example.com",
        ADMIN_PASSWORD_HASH=hash_password("second-password"),
    )
    assert not await prepare_core(second, engine)
    async with engine.connect() as conn:
        rows = (await conn.execute(select(users))).mappings().all()
    assert len(rows) == 1
    assert rows[0]["email"] == "first@example.com"
    assert rows[0]["is_super_admin"]
    assert rows[0]["is_bootstrap"]
    assert rows[0]["status"] == "active"
    assert verify_password("first-password", rows[0]["password_hash"])


async def test_first_boot_without_admin_credentials_refuses_to_start(
    database_url: str, engine: AsyncEngine
) -> None:
    with pytest.raises(ConfigError, match="ADMIN_USERNAME and ADMIN_PASSWORD_HASH are required"):
        await prepare_core(core_settings(database_url), engine)
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(users))).scalar_one() == 0


async def test_audit_retention_is_seeded_once_from_the_environment(
    database_url: str, engine: AsyncEngine
) -> None:
    admin = {"ADMIN_USERNAME": "a@example.com", "ADMIN_PASSWORD_HASH": hash_password("pw")}
    await prepare_core(
        core_settings(database_url, DEFAULT_AUDIT_RETENTION_DAYS="30", **admin), engine
    )
    await prepare_core(
        core_settings(database_url, DEFAULT_AUDIT_RETENTION_DAYS="90", **admin), engine
    )
    async with engine.connect() as conn:
        value = (
            await conn.execute(
                select(app_settings.c.value).where(app_settings.c.key == "audit_retention_days")
            )
        ).scalar_one()
    assert value == 30


async def test_racing_first_boots_create_one_super_admin_and_neither_fails(
    engine: AsyncEngine,
) -> None:
    async def seed(email: str) -> bool:
        async with engine.begin() as conn:
            return await seed_super_admin(conn, email, hash_password("a password"))

    created = await asyncio.gather(seed("one@example.com"), seed("two@example.com"))

    assert sorted(created) == [False, True]
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(users))).scalar_one() == 1
