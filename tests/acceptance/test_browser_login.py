"""A real browser (Debian's Chromium, driven by Playwright) signs in with a temporary
password, is held on the admin app's password-change screen until it picks its own, and
signs out from the server-rendered account page, through `zilean up`'s single origin."""

from __future__ import annotations

import asyncio

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import PASSWORD, add_user
from tests.support.servers import live_server
from tests.support.ui_browser import (
    DESKTOP,
    assert_accessible,
    launch,
    origin_apps,
    require_built_app,
    screenshot,
)
from zilean.auth.permissions import SystemRole
from zilean.auth.roles import system_role_id

pytestmark = pytest.mark.acceptance


def walk_through(page: Page, base: str) -> None:
    page.goto(f"{base}/")
    expect(page).to_have_url(f"{base}/login")
    page.get_by_label("Email").fill("hana@example.com")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Invalid email or password.")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("hana@example.com is using a temporary password.")).to_be_visible()
    # The API refuses everything else until the password changes; the app says why.
    blocked = page.request.get(f"{base}/api/jobs")
    assert (blocked.status, blocked.json()) == (403, {"error": "password change required"})
    assert_accessible(page, "password change")
    screenshot(page, "password-change")
    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password", exact=True).fill("a fresh passphrase")
    page.get_by_label("Repeat new password").fill("not the same")
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_text("The new passwords do not match.")).to_be_visible()
    page.get_by_label("Repeat new password").fill("a fresh passphrase")
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    me = page.request.get(f"{base}/api/account/me").json()
    assert me["email"] == "hana@example.com"
    assert me["must_change_password"] is False
    page.get_by_role("link", name="Account").click()
    expect(page.get_by_text("jobs:write")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{base}/login")
    page.goto(f"{base}/jobs/new")
    expect(page).to_have_url(f"{base}/login")


async def test_a_user_with_a_temporary_password_must_change_it_then_signs_out(
    database_url: str, engine: AsyncEngine
) -> None:
    require_built_app()
    async with engine.begin() as conn:
        admin_role = await system_role_id(conn, SystemRole.ADMIN)
    await add_user(engine, "hana@example.com", [admin_role], must_change_password=True)

    def drive(base: str) -> None:
        # Playwright's sync API needs a thread without a running event loop.
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                walk_through(browser.new_page(viewport=DESKTOP), base)  # type: ignore[arg-type]
            finally:
                browser.close()

    with live_server(origin_apps(database_url, engine)) as base:
        await asyncio.to_thread(drive, base)
