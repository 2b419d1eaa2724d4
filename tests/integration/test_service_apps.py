"""Each HTTP service's app, in process, alone and behind `zilean up`'s single origin."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.servers import live_server
from zilean.api.app import create_core_app
from zilean.config import Service, load_settings
from zilean.mcp.app import create_mcp_app
from zilean.services.origin import Origin, OriginApps
from zilean.ui.app import create_ui_app
from zilean.webhooks.app import create_webhook_app

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def build_apps(database_url: str, engine: AsyncEngine) -> OriginApps:
    env = {"DATABASE_URL": database_url, "TZ": "Australia/Sydney"}
    core = load_settings(Service.CORE, {**env, "SETTINGS_ENCRYPTION_KEY": KEY})
    return OriginApps(
        core=create_core_app(core, engine),  # type: ignore[arg-type]
        ui=create_ui_app(load_settings(Service.UI, env), engine),  # type: ignore[arg-type]
        mcp=create_mcp_app(load_settings(Service.MCP, env), engine),  # type: ignore[arg-type]
        webhook=create_webhook_app(load_settings(Service.WEBHOOK, env), engine),  # type: ignore[arg-type]
    )


@pytest.fixture
def apps(database_url: str, engine: AsyncEngine) -> OriginApps:
    return build_apps(database_url, engine)


@pytest.mark.parametrize("name", ["core", "ui", "mcp", "webhook"])
async def test_every_service_answers_healthz(apps: OriginApps, name: str) -> None:
    app: FastAPI = getattr(apps, name)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://svc") as client,
    ):
        response = await client.get("/healthz")
    assert response.status_code == 200


async def test_mcp_is_unhealthy_until_its_session_manager_runs(apps: OriginApps) -> None:
    transport = httpx.ASGITransport(app=apps.mcp)
    async with httpx.AsyncClient(transport=transport, base_url="http://mcp") as client:
        before = await client.get("/healthz")
        async with apps.mcp.router.lifespan_context(apps.mcp):
            during = await client.get("/healthz")
        after = await client.get("/healthz")
    assert (before.status_code, during.status_code, after.status_code) == (503, 200, 503)
    assert before.json() == {"error": "the MCP session manager is not running"}


def test_the_single_origin_serves_every_service_over_a_real_socket(apps: OriginApps) -> None:
    with live_server(Origin(apps)) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200
        meta = httpx.get(f"{base}/api/meta")
        assert meta.json()["timezone"] == "Australia/Sydney"
        schema = httpx.get(f"{base}/api/openapi.json")
        assert schema.json()["info"]["title"] == "Zilean admin API"
        assert httpx.get(f"{base}/openapi.json").status_code == 404  # ui publishes no schema


async def test_core_sweeps_old_audit_entries_and_stale_sessions_while_it_serves(
    apps: OriginApps, engine: AsyncEngine
) -> None:
    import asyncio
    import uuid
    from datetime import timedelta

    from sqlalchemy import func, insert, select

    from zilean.db.tables import audit_log, sessions, users

    async with engine.begin() as conn:
        user_id = uuid.uuid4()
        await conn.execute(insert(users).values(id=user_id, email="old@example.com"))
        await conn.execute(
            insert(audit_log).values(
                action="user.create",
                resource_type="user",
                occurred_at=func.now() - timedelta(days=400),
            )
        )
        await conn.execute(
            insert(sessions).values(
                token_hash=b"x" * 32, user_id=user_id, expires_at=func.now() - timedelta(days=3)
            )
        )

    async def leftovers() -> int:
        async with engine.connect() as conn:
            old_audit = (await conn.execute(select(func.count()).select_from(audit_log))).scalar()
            old_sessions = (await conn.execute(select(func.count()).select_from(sessions))).scalar()
        return int(old_audit or 0) + int(old_sessions or 0)

    with live_server(apps.core):  # the lifespan starts the daily sweep at once
        for _ in range(200):
            if await leftovers() == 0:
                break
            await asyncio.sleep(0.025)
    assert await leftovers() == 0
