"""Signing in to the admin API, the caller's own account and self-service password changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import PASSWORD, Cast, client_for, sign_in_directly
from tests.support.api import (
    ALL_PERMISSION_KEYS,
    INVALID_TOKEN,
    PASSWORD_CHANGE_REQUIRED,
    READ_ONLY_KEYS,
    audit_rows,
    create_user,
    served_client,
)
from zilean.auth.passwords import verify_password
from zilean.db.tables import users

NEW_PASSWORD = "a brand new password"


async def test_it_sends_an_unauthenticated_caller_to_the_login_page(core_app: FastAPI) -> None:
    async with client_for(core_app) as anonymous:
        response = await anonymous.get("/api/users")
    assert response.status_code == 302
    assert response.headers["location"] == "/login"


async def test_it_refuses_a_session_cookie_it_does_not_know(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, "not-a-session") as stranger:
        response = await stranger.get("/api/users")
    assert (response.status_code, response.headers["location"]) == (302, "/login")


async def test_it_answers_meta_without_a_session(core_app: FastAPI) -> None:
    async with client_for(core_app) as anonymous:
        response = await anonymous.get("/api/meta")
    assert response.status_code == 200
    assert set(response.json()) == {"timezone", "demo_mode"}


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer zat_not-a-real-token",  # well-formed but unknown
        "Bearer nonsense",  # no zat_ prefix at all
        "Bearer ",  # the scheme with no credential
        "Bearer",  # the scheme alone
        "bearer zat_not-a-real-token",  # the scheme is case-insensitive
    ],
)
async def test_it_refuses_a_bad_bearer_token_with_401(
    core_app: FastAPI, cast: Cast, authorization: str
) -> None:
    # Even alongside a valid session cookie: a script that sends a token means it.
    async with client_for(core_app, cast.alice.session) as client:
        response = await client.get("/api/users", headers={"Authorization": authorization})
    assert (response.status_code, response.json()) == (401, INVALID_TOKEN)


@pytest.mark.parametrize(
    "authorization",
    [
        "Basic YWxpY2U6cGFzc3dvcmQ=",  # a reverse proxy's own credentials
        'Digest username="proxy", realm="edge"',  # another proxy scheme
        "zat_not-a-real-token",  # no scheme at all is not a Bearer token either
    ],
)
async def test_a_header_of_another_scheme_leaves_the_session_in_charge(
    core_app: FastAPI, cast: Cast, authorization: str
) -> None:
    headers = {"Authorization": authorization}
    async with client_for(core_app, cast.alice.session) as alice:
        signed_in = await alice.get("/api/account/me", headers=headers)
    async with client_for(core_app, cast.carol.session) as carol:
        read_only = await carol.get("/api/audit-log", headers=headers)  # carol lacks audit:read
    async with client_for(core_app) as anonymous:
        not_signed_in = await anonymous.get("/api/users", headers=headers)
    assert (signed_in.status_code, signed_in.json()["email"]) == (200, "alice@example.com")
    assert read_only.status_code == 403  # the session's own permissions still apply
    assert (not_signed_in.status_code, not_signed_in.headers["location"]) == (302, "/login")


async def test_it_lists_every_permission_for_the_bootstrap_super_admin(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.get("/api/account/me")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(cast.alice.user_id)
    assert body["email"] == "alice@example.com"
    assert body["is_super_admin"] is True
    assert body["must_change_password"] is False
    assert len(body["permissions"]) == 24
    assert set(body["permissions"]) == ALL_PERMISSION_KEYS
    assert body["permissions"] == sorted(body["permissions"])


async def test_it_lists_exactly_the_read_only_keys_for_a_read_only_user(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        body = (await carol.get("/api/account/me")).json()
    assert body["is_super_admin"] is False
    assert body["permissions"] == sorted(READ_ONLY_KEYS)


async def test_a_new_user_must_change_the_temporary_password_before_anything_else(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    erin, temporary = await create_user(
        core_app, cast.alice.session, "erin@example.com", [cast.role_ids["read_only"]]
    )
    session = await sign_in_directly(engine, erin)
    async with client_for(core_app, session) as client:
        refused = await client.get("/api/roles")
        me = await client.get("/api/account/me")
        changed = await client.post(
            "/api/account/change-password",
            json={"current_password": temporary, "new_password": NEW_PASSWORD},
        )
        allowed = await client.get("/api/roles")
        me_after = await client.get("/api/account/me")
    assert (refused.status_code, refused.json()) == (403, PASSWORD_CHANGE_REQUIRED)
    assert me.status_code == 200
    assert me.json()["must_change_password"] is True
    assert changed.status_code == 204
    assert allowed.status_code == 200
    assert me_after.json()["must_change_password"] is False
    async with engine.connect() as conn:
        stored = (
            await conn.execute(select(users.c.password_hash).where(users.c.id == erin))
        ).scalar_one()
    assert verify_password(NEW_PASSWORD, stored)
    assert not verify_password(temporary, stored)


@pytest.mark.parametrize(
    ("current", "new", "status"),
    [
        ("wrong password", NEW_PASSWORD, 400),  # the current password does not match
        (None, "7 chars", 400),  # one character short of the minimum
        (None, "8 chars!", 204),  # exactly the minimum
        (None, "x" * 73, 400),  # one byte over bcrypt's 72
        (None, "x" * 72, 204),  # exactly 72 bytes
        (None, "é" * 37, 400),  # 37 characters but 74 bytes: bytes are what count
        (None, "é" * 36, 204),  # 36 characters, exactly 72 bytes
        (None, None, 400),  # the new password equals the current one
    ],
)
async def test_it_checks_a_password_change(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    current: str | None,
    new: str | None,
    status: int,
) -> None:
    erin, temporary = await create_user(
        core_app, cast.alice.session, "erin@example.com", [cast.role_ids["read_only"]]
    )
    session = await sign_in_directly(engine, erin)
    async with client_for(core_app, session) as client:
        response = await client.post(
            "/api/account/change-password",
            json={"current_password": current or temporary, "new_password": new or temporary},
        )
        pending = (await client.get("/api/account/me")).json()["must_change_password"]
    assert response.status_code == status, response.text
    if status == 400:
        assert set(response.json()) == {"error"}
    assert pending is (status != 204)


async def test_a_password_change_ends_the_callers_other_sessions_only(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    other = await sign_in_directly(engine, cast.carol.user_id)
    async with client_for(core_app, cast.carol.session) as carol:
        changed = await carol.post(
            "/api/account/change-password",
            json={"current_password": PASSWORD, "new_password": NEW_PASSWORD},
        )
        still_here = await carol.get("/api/account/me")
    async with client_for(core_app, other) as elsewhere:
        ended = await elsewhere.get("/api/account/me")
    assert changed.status_code == 204
    assert still_here.status_code == 200
    assert (ended.status_code, ended.headers["location"]) == (302, "/login")


async def test_signing_out_elsewhere_ends_every_other_session_and_is_audited(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    others = [await sign_in_directly(engine, cast.carol.user_id) for _ in range(2)]
    bystander = await sign_in_directly(engine, cast.alice.user_id)
    async with client_for(core_app, cast.carol.session) as carol:
        signed_out = await carol.post("/api/account/sign-out-others")
        still_here = await carol.get("/api/account/me")
        again = await carol.post("/api/account/sign-out-others")
    for session in others:
        async with client_for(core_app, session) as elsewhere:
            ended = await elsewhere.get("/api/account/me")
        assert (ended.status_code, ended.headers["location"]) == (302, "/login")
    async with client_for(core_app, bystander) as alice:
        assert (await alice.get("/api/account/me")).status_code == 200
    assert (signed_out.status_code, signed_out.json()) == (200, {"ended": 2})
    assert still_here.status_code == 200
    assert again.json() == {"ended": 0}
    rows = [row for row in await audit_rows(engine) if row["action"] == "account.sign_out_others"]
    assert [row["after"] for row in rows] == [{"sessions_ended": 2}, {"sessions_ended": 0}]
    assert {str(row["actor_user_id"]) for row in rows} == {str(cast.carol.user_id)}


@pytest.mark.parametrize(
    ("method", "path", "body", "params"),
    [
        # a new user's email
        pytest.param(
            "POST",
            "/api/users",
            {"email": "a\x00b@example.com", "role_ids": ["<ro>"]},
            None,
            id="user-email",
        ),
        # an invitee's email
        pytest.param(
            "POST",
            "/api/invites",
            {"email": "a\x00b@example.com", "role_ids": ["<ro>"]},
            None,
            id="invite-email",
        ),
        # a role's name
        pytest.param("POST", "/api/roles", {"name": "Dep\x00loyers"}, None, id="role-name"),
        # a role's description
        pytest.param(
            "PATCH",
            "/api/roles/<ro>",
            {"description": "Looks\x00only"},
            None,
            id="role-description",
        ),
        # a token's name
        pytest.param(
            "POST", "/api/tokens", {"name": "c\x00i", "role_id": "<ro>"}, None, id="token-name"
        ),
        # an audit log filter
        pytest.param(
            "GET", "/api/audit-log", None, {"action": "user.\x00create"}, id="audit-filter"
        ),
    ],
)
async def test_it_refuses_a_nul_character_in_text_input_with_400(
    core_app: FastAPI,
    cast: Cast,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    params: dict[str, str] | None,
) -> None:
    # Postgres text cannot hold NUL; the request is malformed, not a server failure.
    read_only = str(cast.role_ids["read_only"])
    if body is not None:
        body = json.loads(json.dumps(body).replace("<ro>", read_only))
    async with served_client(core_app, cast.alice.session) as alice:
        response = await alice.request(
            method, path.replace("<ro>", read_only), json=body, params=params
        )
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
