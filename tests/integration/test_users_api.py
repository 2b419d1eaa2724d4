"""User management through the admin API: creation, the grant rule, the protected
bootstrap Super Admin, status changes, resets and deletion."""

from __future__ import annotations

import uuid

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for, sign_in_directly
from tests.support.api import PASSWORD_CHANGE_REQUIRED, UNKNOWN_ID, create_user
from zilean.auth.passwords import verify_password
from zilean.db.tables import users

# The spec's alphabet for temporary passwords: readable aloud, so no i, l, 1, O or 0.
TEMP_ALPHABET = set("abcdefghjkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")


async def stored_hash(engine: AsyncEngine, user_id: uuid.UUID) -> str:
    async with engine.connect() as conn:
        found: str = (
            await conn.execute(select(users.c.password_hash).where(users.c.id == user_id))
        ).scalar_one()
    return found


async def session_works(app: FastAPI, session: str) -> bool:
    async with client_for(app, session) as client:
        response = await client.get("/api/account/me")
    assert response.status_code in (200, 302)
    return response.status_code == 200


async def test_it_creates_a_user_with_a_temporary_password(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post(
            "/api/users",
            json={"email": "erin@example.com", "role_ids": [str(cast.role_ids["read_only"])]},
        )
        listed = (await alice.get("/api/users")).json()
    assert response.status_code == 201
    body = response.json()
    password = body["temp_password"]
    assert len(password) == 20
    assert set(password) <= TEMP_ALPHABET
    assert not set(password) & set("il1O0")
    user = body["user"]
    assert user["email"] == "erin@example.com"
    assert user["status"] == "active"
    assert user["must_change_password"] is True
    assert user["is_super_admin"] is False
    assert user["protected"] is False
    assert [role["name"] for role in user["roles"]] == ["Read-Only"]
    assert "password_hash" not in user
    assert verify_password(password, await stored_hash(engine, uuid.UUID(user["id"])))
    assert user["id"] in {entry["id"] for entry in listed}


@pytest.mark.parametrize("requester", ["alice", "dave"])
@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("PATCH", "", {"role_ids": ["<read_only>"]}),  # a role change
        ("PATCH", "", {"status": "disabled"}),  # a status change
        ("DELETE", "", None),  # deletion
        ("POST", "/reset-password", None),  # an admin password reset
    ],
)
async def test_it_refuses_every_lock_out_operation_on_the_bootstrap_super_admin(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    requester: str,
    method: str,
    suffix: str,
    body: dict[str, object] | None,
) -> None:
    if body and "role_ids" in body:
        body = {"role_ids": [str(cast.role_ids["read_only"])]}
    session = getattr(cast, requester).session
    hash_before = await stored_hash(engine, cast.alice.user_id)
    async with client_for(core_app, session) as client:
        response = await client.request(
            method, f"/api/users/{cast.alice.user_id}{suffix}", json=body
        )
    assert response.status_code == 409, response.text
    assert "bootstrap Super Admin" in response.json()["error"]
    async with client_for(core_app, cast.alice.session) as alice:
        me = (await alice.get("/api/account/me")).json()
    assert me["is_super_admin"] is True
    assert me["must_change_password"] is False
    assert await stored_hash(engine, cast.alice.user_id) == hash_before


async def test_a_later_super_admin_is_not_protected(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    frank, _ = await create_user(
        core_app, cast.alice.session, "frank@example.com", [cast.role_ids["super_admin"]]
    )
    frank_session = await sign_in_directly(engine, frank)
    async with client_for(core_app, frank_session) as client:
        me = (await client.get("/api/account/me")).json()
    async with client_for(core_app, cast.alice.session) as alice:
        disabled = await alice.patch(f"/api/users/{frank}", json={"status": "disabled"})
        deleted = await alice.delete(f"/api/users/{frank}")
        listed = (await alice.get("/api/users")).json()
    assert me["is_super_admin"] is True
    assert disabled.status_code == 200
    assert disabled.json()["status"] == "disabled"
    assert disabled.json()["protected"] is False
    assert deleted.status_code == 204
    assert str(frank) not in {entry["id"] for entry in listed}


@pytest.mark.parametrize(
    ("role", "status"),
    [
        ("admin", 403),  # Admin holds jobs:write and more that dave lacks
        ("super_admin", 403),  # only a Super Admin hands out Super Admin
        ("read_only", 403),  # Read-Only holds jobs:read, which dave lacks
        ("dave", 201),  # his own role never exceeds his permissions
    ],
)
async def test_a_user_manager_can_only_grant_roles_within_his_permissions(
    core_app: FastAPI, cast: Cast, role: str, status: int
) -> None:
    async with client_for(core_app, cast.dave.session) as dave:
        response = await dave.post(
            "/api/users",
            json={"email": "erin@example.com", "role_ids": [str(cast.role_ids[role])]},
        )
        listed = {entry["email"] for entry in (await dave.get("/api/users")).json()}
    assert response.status_code == status, response.text
    assert ("erin@example.com" in listed) is (status == 201)


@pytest.mark.parametrize(
    ("email", "role_ids", "status"),
    [
        ("erin@example.com", [], 400),  # a user needs at least one role
        ("erin@example.com", [UNKNOWN_ID], 400),  # a role that does not exist
        ("erin@example.com", ["not-a-uuid"], 400),  # not even an id
        ("not-an-email", ["<read_only>"], 400),  # no @ in the address
        ("bob@example.com", ["<read_only>"], 409),  # bob already has this email
        ("  BOB@Example.com ", ["<read_only>"], 409),  # the same email, case and spaces aside
    ],
)
async def test_it_refuses_an_invalid_new_user(
    core_app: FastAPI, cast: Cast, email: str, role_ids: list[str], status: int
) -> None:
    ids = [str(cast.role_ids["read_only"]) if r == "<read_only>" else r for r in role_ids]
    async with client_for(core_app, cast.alice.session) as alice:
        before = (await alice.get("/api/users")).json()
        response = await alice.post("/api/users", json={"email": email, "role_ids": ids})
        after = (await alice.get("/api/users")).json()
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"}
    assert after == before


async def test_disabling_a_user_ends_their_session_at_once(core_app: FastAPI, cast: Cast) -> None:
    assert await session_works(core_app, cast.bob.session)
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(f"/api/users/{cast.bob.user_id}", json={"status": "disabled"})
    assert response.status_code == 200
    assert response.json()["status"] == "disabled"
    async with client_for(core_app, cast.bob.session) as bob:
        refused = await bob.get("/api/audit-log")
    assert (refused.status_code, refused.headers["location"]) == (302, "/login")


@pytest.mark.parametrize(
    "status",
    [
        "invited",  # only accepting an invite makes a user invited-then-active
        "frozen",  # not a status at all
        "Disabled",  # statuses are exact
    ],
)
async def test_it_refuses_a_status_other_than_active_or_disabled(
    core_app: FastAPI, cast: Cast, status: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(f"/api/users/{cast.bob.user_id}", json={"status": status})
    assert response.status_code == 400
    assert await session_works(core_app, cast.bob.session)


async def test_a_user_cannot_disable_or_delete_themselves(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.dave.session) as dave:
        disabled = await dave.patch(f"/api/users/{cast.dave.user_id}", json={"status": "disabled"})
        deleted = await dave.delete(f"/api/users/{cast.dave.user_id}")
    assert (disabled.status_code, deleted.status_code) == (409, 409)
    assert await session_works(core_app, cast.dave.session)


async def test_changing_roles_takes_effect_on_the_next_request(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/users/{cast.carol.user_id}", json={"role_ids": [str(cast.role_ids["admin"])]}
        )
    async with client_for(core_app, cast.carol.session) as carol:
        users_list = await carol.get("/api/users")
        audit = await carol.get("/api/audit-log")
    assert response.status_code == 200
    assert [role["name"] for role in response.json()["roles"]] == ["Admin"]
    assert users_list.status_code == 403  # Admin has no users:read
    assert audit.status_code == 200  # but it has audit:read


async def test_deleting_a_user_removes_them_and_ends_their_session(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        deleted = await alice.delete(f"/api/users/{cast.carol.user_id}")
        again = await alice.delete(f"/api/users/{cast.carol.user_id}")
        listed = {entry["email"] for entry in (await alice.get("/api/users")).json()}
    assert deleted.status_code == 204
    assert again.status_code == 404
    assert "carol@example.com" not in listed
    assert not await session_works(core_app, cast.carol.session)


async def test_an_unknown_user_is_not_found(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        patched = await alice.patch(f"/api/users/{UNKNOWN_ID}", json={"status": "disabled"})
        reset = await alice.post(f"/api/users/{UNKNOWN_ID}/reset-password")
    assert (patched.status_code, reset.status_code) == (404, 404)


async def test_a_password_reset_issues_a_new_temporary_password_and_ends_sessions(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        first = await alice.post(f"/api/users/{cast.carol.user_id}/reset-password")
        second = await alice.post(f"/api/users/{cast.carol.user_id}/reset-password")
    assert (first.status_code, second.status_code) == (200, 200)
    password = second.json()["temp_password"]
    assert len(password) == 20
    assert set(password) <= TEMP_ALPHABET
    assert password != first.json()["temp_password"]
    assert verify_password(password, await stored_hash(engine, cast.carol.user_id))
    assert not await session_works(core_app, cast.carol.session)
    fresh = await sign_in_directly(engine, cast.carol.user_id)
    async with client_for(core_app, fresh) as carol:
        refused = await carol.get("/api/users")
    assert (refused.status_code, refused.json()) == (403, PASSWORD_CHANGE_REQUIRED)


@pytest.mark.parametrize(
    "target",
    [
        "super_admin",  # a later Super Admin: dave would sign in with every permission
        "admin",  # bob's Admin role holds jobs:write and more that dave lacks
    ],
)
async def test_it_refuses_a_password_reset_that_would_hand_over_more_than_the_caller_holds(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, target: str
) -> None:
    # The grant rule stops dave from creating such a user; a reset returns the new
    # password to dave, who could then sign in as the target.
    victim, _ = await create_user(
        core_app, cast.alice.session, "victim@example.com", [cast.role_ids[target]]
    )
    hash_before = await stored_hash(engine, victim)
    async with client_for(core_app, cast.dave.session) as dave:
        response = await dave.post(f"/api/users/{victim}/reset-password")
    assert response.status_code == 403, response.text
    assert "temp_password" not in response.json()
    assert await stored_hash(engine, victim) == hash_before
