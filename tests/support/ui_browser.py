"""Browser-test support: one Chromium (Debian's, driven by Playwright) behind `zilean up`'s
single origin, sign-in, the axe accessibility check and screenshots for docs/ui.md."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, expect
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from tests.support.actors import PASSWORD
from zilean.api.app import create_core_app
from zilean.config import Service, load_settings
from zilean.mcp.app import create_mcp_app
from zilean.services.origin import Origin, OriginApps
from zilean.ui.app import create_ui_app
from zilean.ui.spa_routes import INDEX
from zilean.webhooks.app import create_webhook_app

ROOT = Path(__file__).resolve().parents[2]
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
AXE = ROOT / "web" / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = ROOT / "docs" / "ui"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def require_built_app() -> None:
    """Fail (not skip) when the admin app or axe is missing: `make test` builds both."""
    if not INDEX.is_file() or not AXE.is_file():
        pytest.fail("the admin app is not built: run `make web` (make test does) first")


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


def launch(playwright: Any) -> Browser:
    browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    return browser


def sign_in(page: Page, base: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/")
    expect(page).to_have_url(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def assert_accessible(page: Page, what: str) -> None:
    """Run axe on the page; fail on any serious or critical violation."""
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document)")
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"{what}: {bad}"


def assert_no_horizontal_overflow(page: Page, what: str) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    viewport = page.evaluate("() => window.innerWidth")
    wide = page.evaluate(
        """(limit) => [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > limit + 1)
            .slice(0, 5).map((e) => e.tagName + '.' + e.className)""",
        viewport,
    )
    assert width <= viewport, f"{what}: the page is {width}px wide in a {viewport}px window: {wide}"


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
