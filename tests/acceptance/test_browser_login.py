"""A real browser (Debian's Chromium, driven by Playwright) signs in, changes a temporary
password and signs out through `zilean up`'s single origin."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, expect, sync_playwright
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from tests.support.actors import PASSWORD, add_user
from tests.support.servers import live_server
from zilean.api.app import create_core_app
from zilean.auth.permissions import SystemRole
from zilean.auth.roles import system_role_id
from zilean.config import Service, load_settings
from zilean.mcp.app import create_mcp_app
from zilean.services.origin import Origin, OriginApps
from zilean.ui.app import create_ui_app
from zilean.webhooks.app import create_webhook_app

pytestmark = pytest.mark.acceptance

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Closed network: keep Chromium from calling home at start-up.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def origin_apps(database_url: str, engine: AsyncEngine) -> FastAPI | Origin:
    env = {"DATABASE_URL": database_url}
    return Origin(
        OriginApps(
            core=create_core_app(core_settings(database_url), engine),
            ui=create_ui_app(load_settings(Service.UI, env), engine),  # type: ignore[arg-type]
            mcp=create_mcp_app(load_settings(Service.MCP, env), engine),  # type: ignore[arg-type]
            webhook=create_webhook_app(load_settings(Service.WEBHOOK, env), engine),  # type: ignore[arg-type]
        )
    )


async def test_a_user_signs_in_changes_a_temporary_password_and_signs_out(
    database_url: str, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        admin_role = await system_role_id(conn, SystemRole.ADMIN)
    await add_user(engine, "hana@example.com", [admin_role], must_change_password=True)

    def drive(base: str) -> None:
        # Playwright's sync API needs a thread without a running event loop.
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                walk_through(chromium, base)
            finally:
                chromium.close()

    def walk_through(chromium: Browser, base: str) -> None:
        page = chromium.new_page()
        page.goto(f"{base}/")
        expect(page).to_have_url(f"{base}/login")
        page.get_by_label("Email").fill("hana@example.com")
        page.get_by_label("Password").fill("wrong password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("Invalid email or password.")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_text("You are using a temporary password.")).to_be_visible()
        page.get_by_label("Current password").fill(PASSWORD)
        page.get_by_label("New password", exact=True).fill("a fresh passphrase")
        page.get_by_label("Repeat new password").fill("a fresh passphrase")
        page.get_by_role("button", name="Change password").click()
        expect(page.get_by_text("Password changed.")).to_be_visible()
        expect(page.get_by_text("jobs:write")).to_be_visible()
        me = page.request.get(f"{base}/api/account/me").json()
        assert me["email"] == "hana@example.com"
        assert me["must_change_password"] is False
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(f"{base}/login")
        page.goto(f"{base}/")
        expect(page).to_have_url(f"{base}/login")
        page.close()

    with live_server(origin_apps(database_url, engine)) as base:
        await asyncio.to_thread(drive, base)
