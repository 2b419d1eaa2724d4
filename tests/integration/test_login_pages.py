"""The ui service's sign-in and sign-out pages, through HTTP."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx
from fastapi import FastAPI
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import PASSWORD, Cast, client_for
from tests.support.browser_forms import browser, csrf_from, sign_in
from zilean.auth.sessions import SESSION_COOKIE
from zilean.db.tables import audit_log, sessions

ClientFactory = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


async def test_signing_in_sets_a_strict_session_cookie_and_lands_on_the_account_page(
    ui_app: FastAPI, cast: Cast
) -> None:
    async with browser(ui_app) as client:
        response = await sign_in(client, "bob@example.com", PASSWORD)
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        cookie = next(
            h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE)
        )
        lowered = cookie.lower()
        assert "httponly" in lowered
        assert "samesite=lax" in lowered
        assert "path=/" in lowered
        assert "max-age=86400" in lowered
        assert "secure" not in lowered  # plain HTTP on loopback
        account = await client.get("/account")
        assert account.status_code == 200
        assert "bob@example.com" in account.text


async def test_the_session_cookie_is_secure_for_a_remote_client(
    ui_app: FastAPI, cast: Cast
) -> None:
    async with browser(ui_app, peer="203.0.113.9") as client:
        token = await csrf_from(client, "/login")
        response = await client.post(
            "/login",
            data={"csrf_token": token, "email": "bob@example.com", "password": PASSWORD},
            # The CSRF cookie is Secure too, so the client will not send it over plain HTTP.
            headers={"cookie": f"zilean_csrf={token}"},
        )
    session_cookie = next(
        h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE)
    )
    assert "secure" in session_cookie.lower()


async def test_unknown_email_and_wrong_password_look_exactly_the_same(
    ui_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    async with browser(ui_app) as client:
        unknown = await sign_in(client, "nobody@example.com", PASSWORD)
        wrong = await sign_in(client, "nobody@example.com", "wrong password")
        real_wrong = await sign_in(client, "bob@example.com", "wrong password")
    assert unknown.status_code == wrong.status_code == real_wrong.status_code == 401
    assert "Invalid email or password." in unknown.text
    assert unknown.text.replace("nobody@example.com", "X") == real_wrong.text.replace(
        "bob@example.com", "X"
    )
    async with engine.connect() as conn:
        failures = (
            (
                await conn.execute(
                    select(audit_log.c.actor_email).where(audit_log.c.action == "auth.login_failed")
                )
            )
            .scalars()
            .all()
        )
    assert failures == ["bob@example.com"]  # only real users are recorded


async def test_a_disabled_user_cannot_sign_in(
    ui_app: FastAPI, cast: Cast, core_app: FastAPI
) -> None:
    async with client_for(core_app, cast.alice.session) as admin:
        await admin.patch(f"/api/users/{cast.bob.user_id}", json={"status": "disabled"})
    async with browser(ui_app) as client:
        assert (await sign_in(client, "bob@example.com", PASSWORD)).status_code == 401


async def test_a_post_without_a_valid_csrf_token_is_refused_and_spends_nothing(
    ui_factory: Callable[..., FastAPI], cast: Cast
) -> None:
    app = ui_factory(UI_LOGIN_RATE_BURST="1")
    async with browser(app) as client:
        await csrf_from(client, "/login")
        for _ in range(3):
            forged = await client.post(
                "/login",
                data={"csrf_token": "forged", "email": "bob@example.com", "password": PASSWORD},
            )
            assert forged.status_code == 403
        assert (await sign_in(client, "bob@example.com", PASSWORD)).status_code == 303


async def test_the_limiter_answers_429_after_the_burst_and_get_never_counts(
    ui_factory: Callable[..., FastAPI], cast: Cast
) -> None:
    app = ui_factory(UI_LOGIN_RATE_BURST="3", UI_LOGIN_RATE_PER_MINUTE="1")
    async with browser(app) as client:
        for _ in range(10):
            assert (await client.get("/login")).status_code == 200
        statuses = [
            (await sign_in(client, "bob@example.com", "nope")).status_code for _ in range(4)
        ]
        assert statuses == [401, 401, 401, 429]
        limited = await sign_in(client, "bob@example.com", PASSWORD)
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "60"
        assert "Too many sign-in attempts. Try again in a minute." in limited.text
        # The invite form has its own bucket.
        token = await csrf_from(client, "/login")
        invite = await client.post(
            "/admin/accept-invite", data={"csrf_token": token, "token": "x", "password": "y"}
        )
        assert invite.status_code == 400
    async with browser(app, peer="127.0.0.2") as other:  # another address, another bucket
        assert (await sign_in(other, "bob@example.com", PASSWORD)).status_code == 303


async def test_forwarded_addresses_key_the_limiter_only_when_trusted(
    ui_factory: Callable[..., FastAPI], cast: Cast
) -> None:
    trusting = ui_factory(UI_LOGIN_RATE_BURST="1", UI_TRUST_PROXY_HEADERS="true")
    async with browser(trusting, **{"X-Forwarded-For": "198.51.100.1"}) as first:
        assert (await sign_in(first, "bob@example.com", "nope")).status_code == 401
        assert (await sign_in(first, "bob@example.com", "nope")).status_code == 429
    async with browser(trusting, **{"X-Forwarded-For": "198.51.100.2"}) as second:
        assert (await sign_in(second, "bob@example.com", "nope")).status_code == 401
    untrusting = ui_factory(UI_LOGIN_RATE_BURST="1")
    async with browser(untrusting, **{"X-Forwarded-For": "198.51.100.1"}) as third:
        assert (await sign_in(third, "bob@example.com", "nope")).status_code == 401
    async with browser(untrusting, **{"X-Forwarded-For": "198.51.100.2"}) as fourth:
        assert (await sign_in(fourth, "bob@example.com", "nope")).status_code == 429


async def test_oversized_and_malformed_submissions_get_their_own_pages(
    ui_app: FastAPI, cast: Cast
) -> None:
    async with browser(ui_app) as client:
        token = await csrf_from(client, "/login")
        huge = await client.post(
            "/login", data={"csrf_token": token, "email": "a" * (65 * 1024), "password": "x"}
        )
        assert huge.status_code == 413
        assert "Form submission too large." in huge.text
        garbled = await client.post(
            "/login",
            content=b'{"email": "bob@example.com"}',
            headers={"content-type": "application/json"},
        )
        assert garbled.status_code == 400
        assert "Could not read form submission." in garbled.text
        broken = await client.post(
            "/login",
            content=b"\xff\xfe=%%%",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert broken.status_code == 400


async def test_logout_needs_a_post_and_ends_the_session_row(
    ui_app: FastAPI, cast: Cast, engine: AsyncEngine, core_app: FastAPI
) -> None:
    async with browser(ui_app) as client:
        await sign_in(client, "carol@example.com", PASSWORD)
        session = client.cookies[SESSION_COOKIE]
        assert (await client.get("/logout")).status_code == 405
        async with client_for(core_app, session) as api:
            assert (await api.get("/api/account/me")).status_code == 200
        token = await csrf_from(client, "/account")
        out = await client.post("/logout", data={"csrf_token": token})
        assert out.status_code == 303
        assert out.headers["location"] == "/login"
        async with client_for(core_app, session) as api:
            assert (await api.get("/api/account/me")).status_code == 302
    async with engine.connect() as conn:
        actions = (
            (
                await conn.execute(
                    select(audit_log.c.action)
                    .where(audit_log.c.actor_email == "carol@example.com")
                    .order_by(audit_log.c.id)
                )
            )
            .scalars()
            .all()
        )
    assert actions == ["auth.login", "auth.logout"]


async def test_sessions_last_24_hours_from_login_and_expire(
    ui_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    async with browser(ui_app) as client:
        await sign_in(client, "carol@example.com", PASSWORD)
        async with engine.begin() as conn:
            lifetime = (
                (
                    await conn.execute(
                        select(sessions.c.expires_at - sessions.c.created_at)
                        .where(sessions.c.user_id == cast.carol.user_id)
                        .order_by(sessions.c.created_at.desc())
                    )
                )
                .scalars()
                .first()
            )
            assert lifetime is not None
            assert abs(lifetime.total_seconds() - 86400) < 5
            await conn.execute(
                update(sessions)
                .where(sessions.c.user_id == cast.carol.user_id)
                .values(expires_at=func.now() - func.make_interval(0, 0, 0, 0, 0, 0, 1))
            )
        page = await client.get("/")
        assert page.status_code == 302
        assert page.headers["location"] == "/login"


async def test_next_only_accepts_local_paths(ui_app: FastAPI, cast: Cast) -> None:
    async with browser(ui_app) as client:
        token = await csrf_from(client, "/login")
        for target, expected in [("/queue", "/queue"), ("//evil.example", "/"), ("https://x", "/")]:
            client.cookies.delete(SESSION_COOKIE)
            response = await client.post(
                "/login",
                data={
                    "csrf_token": token,
                    "email": "bob@example.com",
                    "password": PASSWORD,
                    "next": target,
                },
            )
            assert response.headers["location"] == expected
