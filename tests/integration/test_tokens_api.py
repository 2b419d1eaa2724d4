"""Personal API tokens: creation under the grant rule, use as a bearer, listing, revocation
and how a token follows its owner's fate.

Note: the seeded Admin role holds neither users:read nor roles:read, while Read-Only
holds both, so an Admin such as bob cannot bind a token to Read-Only. Bob's tokens are
bound to Admin here, and carol's to Read-Only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.actors import Cast, client_for
from tests.support.api import (
    FORBIDDEN,
    INVALID_TOKEN,
    READ_ONLY_KEYS,
    UNKNOWN_ID,
    bearer,
    create_role,
)


async def create_token(
    app: FastAPI, session: str, role_id: object, *, name: str = "ci", expires_in: str | None = None
) -> Any:
    body: dict[str, object] = {"name": name, "role_id": str(role_id)}
    if expires_in is not None:
        body["expires_in"] = expires_in
    async with client_for(app, session) as client:
        return await client.post("/api/tokens", json=body)


async def as_bearer(app: FastAPI, secret: str, method: str, path: str, body: object = None) -> Any:
    async with client_for(app) as client:
        return await client.request(method, path, json=body, headers=bearer(secret))


async def test_an_admin_creates_a_token_bound_to_his_role(core_app: FastAPI, cast: Cast) -> None:
    response = await create_token(core_app, cast.bob.session, cast.role_ids["admin"])
    assert response.status_code == 201
    secret = response.json()["secret"]
    token = response.json()["token"]
    assert secret.startswith("zat_")
    assert token["token_hint"] == secret[-4:]
    assert token["role_name"] == "Admin"
    assert token["user_email"] == "bob@example.com"
    assert token["revoked_at"] is None
    created = datetime.fromisoformat(token["created_at"])
    expires = datetime.fromisoformat(token["expires_at"])
    assert expires - created == timedelta(days=90)  # the default
    assert "secret" not in token
    assert secret not in str(token)


async def test_a_token_acts_with_its_roles_permissions(core_app: FastAPI, cast: Cast) -> None:
    secret = (await create_token(core_app, cast.bob.session, cast.role_ids["admin"])).json()[
        "secret"
    ]
    audit = await as_bearer(core_app, secret, "GET", "/api/audit-log")
    users = await as_bearer(core_app, secret, "GET", "/api/users")
    settings = await as_bearer(
        core_app, secret, "PUT", "/api/settings/audit", {"audit_retention_days": 30}
    )
    assert audit.status_code == 200  # Admin holds audit:read
    assert (users.status_code, users.json()) == (403, FORBIDDEN)  # but not users:read
    assert (settings.status_code, settings.json()) == (403, FORBIDDEN)  # nor audit:write


async def test_a_read_only_token_reads_users_but_cannot_write_roles(
    core_app: FastAPI, cast: Cast
) -> None:
    response = await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])
    assert response.status_code == 201
    secret = response.json()["secret"]
    users = await as_bearer(core_app, secret, "GET", "/api/users")
    roles = await as_bearer(core_app, secret, "POST", "/api/roles", {"name": "Sneaky"})
    me = await as_bearer(core_app, secret, "GET", "/api/account/me")
    assert users.status_code == 200
    assert (roles.status_code, roles.json()) == (403, FORBIDDEN)
    assert me.json()["email"] == "carol@example.com"
    assert me.json()["permissions"] == sorted(READ_ONLY_KEYS)


@pytest.mark.parametrize(
    ("owner", "role", "status"),
    [
        ("bob", "super_admin", 403),  # a token is never bound to Super Admin
        ("alice", "super_admin", 403),  # not even a Super Admin's own
        ("bob", "dave", 403),  # dave's role holds users:write, which bob lacks
        ("bob", "read_only", 403),  # Read-Only holds users:read, which bob lacks
        ("alice", "admin", 201),  # a Super Admin may bind any other role
        ("dave", "dave", 201),  # one's own role
    ],
)
async def test_a_token_is_bound_only_to_a_role_its_owner_could_grant(
    core_app: FastAPI, cast: Cast, owner: str, role: str, status: int
) -> None:
    response = await create_token(core_app, getattr(cast, owner).session, cast.role_ids[role])
    assert response.status_code == status, response.text
    if status == 403:
        assert "secret" not in response.json()


@pytest.mark.parametrize(
    ("expires_in", "status", "days"),
    [
        ("7d", 400, None),  # not one of the offered lifetimes
        ("90", 400, None),  # a unit is required
        ("30d", 201, 30),  # a month
        ("365d", 201, 365),  # a year
        ("never", 201, None),  # no expiry at all
    ],
)
async def test_it_offers_fixed_token_lifetimes(
    core_app: FastAPI, cast: Cast, expires_in: str, status: int, days: int | None
) -> None:
    response = await create_token(
        core_app, cast.carol.session, cast.role_ids["read_only"], expires_in=expires_in
    )
    assert response.status_code == status, response.text
    if status != 201:
        return
    token = response.json()["token"]
    if days is None:
        assert token["expires_at"] is None
    else:
        lifetime = datetime.fromisoformat(token["expires_at"]) - datetime.fromisoformat(
            token["created_at"]
        )
        assert lifetime == timedelta(days=days)


@pytest.mark.parametrize(
    ("name", "role_id"),
    [
        ("ci", UNKNOWN_ID),  # a role that does not exist
        ("", None),  # no name
        ("   ", None),  # a blank name
        ("x" * 101, None),  # a name over 100 characters
    ],
)
async def test_it_refuses_an_invalid_token(
    core_app: FastAPI, cast: Cast, name: str, role_id: str | None
) -> None:
    response = await create_token(
        core_app, cast.carol.session, role_id or cast.role_ids["read_only"], name=name
    )
    assert response.status_code == 400


async def test_it_lists_only_the_callers_own_tokens(core_app: FastAPI, cast: Cast) -> None:
    bobs = (await create_token(core_app, cast.bob.session, cast.role_ids["admin"])).json()
    carols = (await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])).json()
    async with client_for(core_app, cast.bob.session) as bob:
        own = (await bob.get("/api/tokens")).json()
    async with client_for(core_app, cast.carol.session) as carol:
        everyone_refused = await carol.get("/api/tokens", params={"all": "true"})
    async with client_for(core_app, cast.alice.session) as alice:
        alice_own = (await alice.get("/api/tokens")).json()
        everyone = (await alice.get("/api/tokens", params={"all": "true"})).json()
    async with client_for(core_app, cast.dave.session) as dave:
        dave_everyone = (await dave.get("/api/tokens", params={"all": "true"})).json()
    assert [token["id"] for token in own] == [bobs["token"]["id"]]
    assert (everyone_refused.status_code, everyone_refused.json()) == (403, FORBIDDEN)
    assert alice_own == []
    both = {bobs["token"]["id"], carols["token"]["id"]}
    assert {token["id"] for token in everyone} == both  # a Super Admin sees everyone's
    assert {token["id"] for token in dave_everyone} == both  # and so does users:write
    assert "token_hash" not in own[0]


async def test_a_revoked_token_stops_working(core_app: FastAPI, cast: Cast) -> None:
    created = (await create_token(core_app, cast.bob.session, cast.role_ids["admin"])).json()
    token_id, secret = created["token"]["id"], created["secret"]
    assert (await as_bearer(core_app, secret, "GET", "/api/audit-log")).status_code == 200
    async with client_for(core_app, cast.bob.session) as bob:
        revoked = await bob.delete(f"/api/tokens/{token_id}")
        again = await bob.delete(f"/api/tokens/{token_id}")
        listed = (await bob.get("/api/tokens")).json()
    refused = await as_bearer(core_app, secret, "GET", "/api/audit-log")
    assert (revoked.status_code, again.status_code) == (204, 204)
    assert (refused.status_code, refused.json()) == (401, INVALID_TOKEN)
    assert listed[0]["revoked_at"] is not None


async def test_only_the_owner_or_a_user_manager_revokes_a_token(
    core_app: FastAPI, cast: Cast
) -> None:
    created = (await create_token(core_app, cast.bob.session, cast.role_ids["admin"])).json()
    token_id, secret = created["token"]["id"], created["secret"]
    async with client_for(core_app, cast.carol.session) as carol:
        hidden = await carol.delete(f"/api/tokens/{token_id}")
    still_works = await as_bearer(core_app, secret, "GET", "/api/audit-log")
    async with client_for(core_app, cast.alice.session) as alice:
        revoked = await alice.delete(f"/api/tokens/{token_id}")
        unknown = await alice.delete(f"/api/tokens/{UNKNOWN_ID}")
    assert hidden.status_code == 404  # carol may not even learn that it exists
    assert still_works.status_code == 200
    assert revoked.status_code == 204
    assert unknown.status_code == 404
    assert (await as_bearer(core_app, secret, "GET", "/api/audit-log")).status_code == 401


async def test_a_token_cannot_create_another_token(core_app: FastAPI, cast: Cast) -> None:
    secret = (await create_token(core_app, cast.carol.session, cast.role_ids["read_only"])).json()[
        "secret"
    ]
    response = await as_bearer(
        core_app,
        secret,
        "POST",
        "/api/tokens",
        {"name": "child", "role_id": str(cast.role_ids["read_only"])},
    )
    assert response.status_code == 403
    async with client_for(core_app, cast.carol.session) as carol:
        assert len((await carol.get("/api/tokens")).json()) == 1


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("PATCH", "", {"status": "disabled"}),  # disabling the owner
        ("DELETE", "", None),  # deleting the owner
    ],
)
async def test_a_token_dies_with_its_owners_access(
    core_app: FastAPI, cast: Cast, method: str, suffix: str, body: object
) -> None:
    secret = (await create_token(core_app, cast.bob.session, cast.role_ids["admin"])).json()[
        "secret"
    ]
    async with client_for(core_app, cast.alice.session) as alice:
        changed = await alice.request(method, f"/api/users/{cast.bob.user_id}{suffix}", json=body)
    assert changed.status_code in (200, 204)
    refused = await as_bearer(core_app, secret, "GET", "/api/audit-log")
    assert (refused.status_code, refused.json()) == (401, INVALID_TOKEN)


async def test_a_token_never_exceeds_what_its_owner_holds_now(
    core_app: FastAPI, cast: Cast
) -> None:
    # carol binds a token to a role within her permissions; alice then widens the role
    # with audit:read, which carol does not hold: the token does not gain it.
    role = await create_role(core_app, cast.alice.session, "Readers", ["jobs:read"])
    secret = (await create_token(core_app, cast.carol.session, role)).json()["secret"]
    async with client_for(core_app, cast.alice.session) as alice:
        widened = await alice.patch(
            f"/api/roles/{role}", json={"permissions": ["jobs:read", "audit:read"]}
        )
    assert widened.status_code == 200
    refused = await as_bearer(core_app, secret, "GET", "/api/audit-log")
    me = await as_bearer(core_app, secret, "GET", "/api/account/me")
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)
    assert me.json()["permissions"] == ["jobs:read"]


async def test_a_role_bound_to_a_live_token_cannot_be_deleted(
    core_app: FastAPI, cast: Cast
) -> None:
    role = await create_role(core_app, cast.alice.session, "Readers", ["jobs:read"])
    token_id = (await create_token(core_app, cast.carol.session, role)).json()["token"]["id"]
    async with client_for(core_app, cast.alice.session) as alice:
        refused = await alice.delete(f"/api/roles/{role}")
        await alice.delete(f"/api/tokens/{token_id}")
        deleted = await alice.delete(f"/api/roles/{role}")
    assert (refused.status_code, deleted.status_code) == (409, 204)
