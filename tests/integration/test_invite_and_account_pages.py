"""Accepting an invite and changing a password through the ui service's pages."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import PASSWORD, Cast, add_user, client_for
from tests.support.browser_forms import browser, csrf_from, sign_in
from zilean.db.tables import users

NEW_PASSWORD = "a brand new passphrase"


async def invite(core_app: FastAPI, cast: Cast, email: str, role: str) -> str:
    async with client_for(core_app, cast.alice.session) as admin:
        response = await admin.post(
            "/api/invites", json={"email": email, "role_ids": [str(cast.role_ids[role])]}
        )
    assert response.status_code == 201
    return parse_qs(urlsplit(response.json()["link"]).query)["token"][0]


async def test_an_invitee_sets_a_password_and_can_then_sign_in(
    ui_app: FastAPI, core_app: FastAPI, cast: Cast
) -> None:
    token = await invite(core_app, cast, "erin@example.com", "read_only")
    async with browser(ui_app) as client:
        form = await client.get(f"/admin/accept-invite?token={token}")
        assert form.status_code == 200
        assert "erin@example.com" in form.text
        csrf = await csrf_from(client, f"/admin/accept-invite?token={token}")
        base = {"csrf_token": csrf, "token": token}
        mismatch = await client.post(
            "/admin/accept-invite",
            data={**base, "password": NEW_PASSWORD, "password_confirm": "other"},
        )
        assert mismatch.status_code == 400
        short = await client.post(
            "/admin/accept-invite", data={**base, "password": "short", "password_confirm": "short"}
        )
        assert short.status_code == 400
        assert "at least 8 characters" in short.text
        accepted = await client.post(
            "/admin/accept-invite",
            data={**base, "password": NEW_PASSWORD, "password_confirm": NEW_PASSWORD},
        )
        assert accepted.status_code == 303
        assert accepted.headers["location"] == "/login?welcome=1"
        again = await client.get(f"/admin/accept-invite?token={token}")
        assert again.status_code == 400  # single use
        assert (await sign_in(client, "erin@example.com", NEW_PASSWORD)).status_code == 303


async def test_a_dead_invite_link_says_so_before_any_password_is_typed(ui_app: FastAPI) -> None:
    async with browser(ui_app) as client:
        for path in ("/admin/accept-invite?token=nonsense", "/admin/accept-invite"):
            page = await client.get(path)
            assert page.status_code == 400
            assert "invalid or has expired" in page.text
            assert 'name="password"' not in page.text


async def test_accepting_an_invite_into_super_admin_grants_the_flag(
    ui_app: FastAPI, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    token = await invite(core_app, cast, "frank@example.com", "super_admin")
    async with browser(ui_app) as client:
        csrf = await csrf_from(client, f"/admin/accept-invite?token={token}")
        await client.post(
            "/admin/accept-invite",
            data={
                "csrf_token": csrf,
                "token": token,
                "password": NEW_PASSWORD,
                "password_confirm": NEW_PASSWORD,
            },
        )
    async with engine.connect() as conn:
        flags = (
            await conn.execute(
                select(users.c.status, users.c.is_super_admin, users.c.is_bootstrap).where(
                    users.c.email == "frank@example.com"
                )
            )
        ).one()
    assert tuple(flags) == ("active", True, False)


async def test_a_temporary_password_must_be_changed_before_anything_else(
    ui_app: FastAPI, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    await add_user(engine, "gina@example.com", [cast.role_ids["admin"]], must_change_password=True)
    async with browser(ui_app) as client:
        await sign_in(client, "gina@example.com", PASSWORD)
        page = await client.get("/account")
        assert "temporary password" in page.text
        session = client.cookies["zilean_session"]
        async with client_for(core_app, session) as api:
            blocked = await api.get("/api/roles")
            assert blocked.status_code == 403
            assert blocked.json() == {"error": "password change required"}
        csrf = await csrf_from(client, "/account")
        changed = await client.post(
            "/account/password",
            data={
                "csrf_token": csrf,
                "current_password": PASSWORD,
                "new_password": NEW_PASSWORD,
                "new_password_confirm": NEW_PASSWORD,
            },
        )
        assert changed.status_code == 303
        async with client_for(core_app, session) as api:  # this session survives the change
            me = await api.get("/api/account/me")
            assert me.json()["must_change_password"] is False
        wrong = await client.post(
            "/account/password",
            data={
                "csrf_token": csrf,
                "current_password": "not it",
                "new_password": "whatever123",
                "new_password_confirm": "whatever123",
            },
        )
        assert wrong.status_code == 400
        assert "current_password is incorrect" in wrong.text


async def test_pages_behind_sign_in_redirect_to_the_login_page(ui_app: FastAPI) -> None:
    async with browser(ui_app) as client:
        page = await client.get("/")
        assert page.status_code == 302
        assert page.headers["location"] == "/login"
        assert (await client.get("/admin/assets/style.css")).status_code == 200
