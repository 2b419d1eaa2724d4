"""Core's MCP administration: the endpoint's switch with its live probe, and MCP tokens
(the grant rule, the plaintext shown once, the hidden account that goes with each)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import core_settings
from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, UNKNOWN_ID, audit_rows, bearer, create_role
from tests.support.mcp import issue_token, mcp_server
from tests.support.servers import free_port
from zilean.api.app import create_core_app
from zilean.db.tables import mcp_tokens, user_roles, users

TOKEN_FIELDS = {
    "id",
    "name",
    "role_id",
    "role_name",
    "account_id",
    "account_email",
    "token_hint",
    "created_at",
    "expires_at",
    "last_used_at",
}


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


async def post_token(core: FastAPI, session: str, body: dict[str, Any]) -> Any:
    async with client_for(core, session) as client:
        return await client.post("/api/mcp-tokens", json=body)


# The switch.


async def test_the_endpoint_is_off_until_switched_on_and_each_switch_is_audited(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        first = await bob.get("/api/settings/mcp")
        on = await bob.put("/api/settings/mcp", json={"enabled": True})
        again = await bob.put("/api/settings/mcp", json={"enabled": True})
        read = await bob.get("/api/settings/mcp")
        # What was read may be sent back: the probe's fields are ignored.
        echoed = await bob.put("/api/settings/mcp", json={**read.json(), "enabled": False})
    assert first.status_code == 200
    assert (first.json()["enabled"], on.json()["enabled"], read.json()["enabled"]) == (
        False,
        True,
        True,
    )
    assert (echoed.status_code, echoed.json()["enabled"]) == (200, False)
    assert again.status_code == 200
    switches = [r for r in await audit_rows(engine) if r["action"] == "settings.mcp"]
    assert [(r["before"], r["after"], r["actor_email"]) for r in switches] == [
        ({"enabled": False}, {"enabled": True}, cast.bob.email),
        ({"enabled": True}, {"enabled": False}, cast.bob.email),
    ]


@pytest.mark.parametrize("body", [{"enabled": "yes"}, {}, {"enabled": True, "extra": 1}])
async def test_it_refuses_a_malformed_switch(
    core_app: FastAPI, cast: Cast, body: dict[str, Any]
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        response = await bob.put("/api/settings/mcp", json=body)
        still = await bob.get("/api/settings/mcp")
    assert response.status_code == 400
    assert still.json()["enabled"] is False


async def test_it_probes_the_mcp_service_and_reports_whether_it_is_live(
    database_url: str, engine: AsyncEngine, cast: Cast
) -> None:
    unreachable = create_core_app(
        core_settings(database_url, MCP_HEALTH_URL=f"http://127.0.0.1:{free_port()}/healthz"),
        engine,
    )
    before = datetime.now(UTC)
    async with client_for(unreachable, cast.alice.session) as alice:
        down = (await alice.get("/api/settings/mcp")).json()
        # Switching on works whether or not the service runs.
        switched = (await alice.put("/api/settings/mcp", json={"enabled": True})).json()
    assert (down["live"], switched["live"], switched["enabled"]) == (False, False, True)
    assert before - timedelta(seconds=1) <= parse(down["checked_at"]) <= datetime.now(UTC)
    with mcp_server(database_url) as base:
        reachable = create_core_app(
            core_settings(database_url, MCP_HEALTH_URL=f"{base}/healthz"), engine
        )
        async with client_for(reachable, cast.alice.session) as alice:
            up = (await alice.get("/api/settings/mcp")).json()
    assert (up["enabled"], up["live"]) == (True, True)
    assert parse(up["checked_at"]) > parse(down["checked_at"])


async def test_only_settings_mcp_opens_the_administration(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    # Read-Only (carol) and a user manager (dave) both lack settings:mcp.
    refused = {}
    for actor in (cast.carol, cast.dave):
        async with client_for(core_app, actor.session) as client:
            refused[actor.name] = [
                (await client.get("/api/settings/mcp")).json(),
                (await client.put("/api/settings/mcp", json={"enabled": True})).json(),
                (await client.get("/api/mcp-tokens")).json(),
                (
                    await client.post(
                        "/api/mcp-tokens",
                        json={"name": "x", "role_id": str(cast.role_ids["read_only"])},
                    )
                ).json(),
                (await client.delete(f"/api/mcp-tokens/{UNKNOWN_ID}")).json(),
            ]
    assert refused == {"carol": [FORBIDDEN] * 5, "dave": [FORBIDDEN] * 5}
    async with engine.connect() as conn:
        assert (await conn.execute(select(mcp_tokens))).first() is None


# Tokens.


async def test_a_token_is_shown_once_and_only_its_digest_is_stored(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    created = await post_token(
        core_app,
        cast.bob.session,
        {"name": "claude-desktop", "role_id": str(cast.role_ids["admin"]), "expires_in": "90d"},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    secret = body.pop("token")
    assert secret.startswith("zmcp_")
    assert len(secret) > 40
    assert set(body) == TOKEN_FIELDS
    assert (body["name"], body["role_id"], body["role_name"]) == (
        "claude-desktop",
        str(cast.role_ids["admin"]),
        "Admin",
    )
    assert body["token_hint"] == secret[-4:]
    assert body["last_used_at"] is None
    expires = parse(body["expires_at"]) - parse(body["created_at"])
    assert abs(expires - timedelta(days=90)) < timedelta(seconds=5)
    async with client_for(core_app, cast.bob.session) as bob:
        listed = await bob.get("/api/mcp-tokens")
    assert listed.status_code == 200
    assert listed.json() == [body]
    assert secret not in listed.text
    async with engine.connect() as conn:
        stored = (await conn.execute(select(mcp_tokens))).mappings().one()
    assert stored["token_hash"] == hashlib.sha256(secret.encode()).digest()
    assert secret not in json.dumps([str(value) for value in stored.values()])
    entries = [r for r in await audit_rows(engine) if r["resource_type"] == "mcp_token"]
    assert [(r["action"], r["resource_id"], r["actor_email"]) for r in entries] == [
        ("mcp_token.create", body["id"], cast.bob.email)
    ]
    assert secret not in json.dumps(entries, default=str)


@pytest.mark.parametrize(
    ("expires_in", "days"), [("30d", 30), ("90d", 90), ("365d", 365), ("never", None)]
)
async def test_it_offers_fixed_lifetimes(
    core_app: FastAPI, cast: Cast, expires_in: str, days: int | None
) -> None:
    body = await issue_token(
        core_app, cast.alice.session, cast.role_ids["read_only"], expires_in=expires_in
    )
    if days is None:
        assert body["expires_at"] is None
    else:
        lifetime = parse(body["expires_at"]) - parse(body["created_at"])
        assert abs(lifetime - timedelta(days=days)) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "a", "role_id": UNKNOWN_ID}, "role_id: unknown role"),
        ({"name": " ", "role_id": "{read_only}"}, "name is required"),
        ({"name": "a" * 101, "role_id": "{read_only}"}, "name is required"),
        ({"name": "a", "role_id": "{read_only}", "expires_in": "7d"}, "expires_in: must be"),
        ({"name": "a", "role_id": "not-a-uuid"}, "role_id: must be a UUID"),
        ({"role_id": "{read_only}"}, "name is required"),
        ({"name": "a", "role_id": "{read_only}", "scope": "all"}, 'unknown field "scope"'),
    ],
)
async def test_it_refuses_an_invalid_token_request(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], message: str
) -> None:
    sent = {
        key: value.format(read_only=cast.role_ids["read_only"]) if key == "role_id" else value
        for key, value in body.items()
    }
    response = await post_token(core_app, cast.alice.session, sent)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)


async def test_no_one_binds_a_token_to_super_admin_not_even_a_super_admin(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    body = {"name": "root", "role_id": str(cast.role_ids["super_admin"])}
    response = await post_token(core_app, cast.alice.session, body)
    assert response.status_code == 403
    assert response.json() == {"error": "an MCP token cannot be bound to the Super Admin role"}
    async with engine.connect() as conn:
        assert (await conn.execute(select(mcp_tokens))).first() is None
        hidden = await conn.execute(select(users).where(users.c.is_service_account))
        assert hidden.first() is None


async def test_a_token_role_never_exceeds_the_issuers_permissions(
    core_app: FastAPI, cast: Cast
) -> None:
    # Admin (bob) holds neither users:read nor roles:read, which Read-Only has.
    wider = await post_token(
        core_app, cast.bob.session, {"name": "x", "role_id": str(cast.role_ids["read_only"])}
    )
    assert wider.status_code == 403
    assert "exceeds your own permissions" in wider.json()["error"]
    narrower = await create_role(core_app, cast.alice.session, "Readers", ["jobs:read"])
    within = await post_token(core_app, cast.bob.session, {"name": "x", "role_id": str(narrower)})
    assert within.status_code == 201, within.text


async def test_the_service_account_is_hidden_and_goes_with_its_token(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    token = await issue_token(core_app, cast.alice.session, cast.role_ids["read_only"])
    account = token["account_id"]
    async with engine.connect() as conn:
        row = (await conn.execute(select(users).where(users.c.id == account))).mappings().one()
    assert (row["is_service_account"], row["password_hash"], row["status"]) == (
        True,
        None,
        "active",
    )
    assert row["email"] == token["account_email"]
    async with client_for(core_app, cast.alice.session) as alice:
        listed = (await alice.get("/api/users")).json()
        assert account not in {user["id"] for user in listed}
        # Nor can it be managed as a user: it is not one.
        assert (
            await alice.patch(f"/api/users/{account}", json={"status": "disabled"})
        ).status_code == 404
        assert (await alice.post(f"/api/users/{account}/reset-password")).status_code == 404
        assert (await alice.delete(f"/api/users/{account}")).status_code == 404
        deleted = await alice.delete(f"/api/mcp-tokens/{token['id']}")
        twice = await alice.delete(f"/api/mcp-tokens/{token['id']}")
        after = (await alice.get("/api/mcp-tokens")).json()
    assert deleted.status_code == 204
    assert (twice.status_code, twice.json()) == (404, {"error": "MCP token not found"})
    assert after == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(users).where(users.c.id == account))).first() is None
        links = await conn.execute(select(user_roles).where(user_roles.c.user_id == account))
        assert links.first() is None
        assert (await conn.execute(select(mcp_tokens))).first() is None
    deletions = [r for r in await audit_rows(engine) if r["action"] == "mcp_token.delete"]
    assert [(r["resource_id"], r["before"]["name"]) for r in deletions] == [(token["id"], "agent")]


async def test_an_mcp_token_does_not_open_the_admin_api(core_app: FastAPI, cast: Cast) -> None:
    token = await issue_token(core_app, cast.alice.session, cast.role_ids["admin"])
    async with client_for(core_app) as anonymous:
        response = await anonymous.get("/api/jobs", headers=bearer(token["token"]))
    assert (response.status_code, response.json()) == (401, {"error": "invalid or expired token"})


async def test_tokens_are_listed_newest_first(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.get("/api/mcp-tokens")).json() == []
    first = await issue_token(core_app, cast.alice.session, cast.role_ids["admin"], name="one")
    second = await issue_token(core_app, cast.alice.session, cast.role_ids["admin"], name="two")
    async with client_for(core_app, cast.alice.session) as alice:
        listed = (await alice.get("/api/mcp-tokens")).json()
    assert [token["id"] for token in listed] == [second["id"], first["id"]]
    assert len({token["account_id"] for token in listed}) == 2


async def test_a_role_bound_to_an_mcp_token_cannot_be_deleted(
    core_app: FastAPI, cast: Cast
) -> None:
    role = await create_role(core_app, cast.alice.session, "Agents", ["jobs:read"])
    token = await issue_token(core_app, cast.alice.session, role)
    async with client_for(core_app, cast.alice.session) as alice:
        refused = await alice.delete(f"/api/roles/{role}")
        assert (await alice.delete(f"/api/mcp-tokens/{token['id']}")).status_code == 204
        deleted = await alice.delete(f"/api/roles/{role}")
    assert (refused.status_code, refused.json()) == (
        409,
        {"error": "the role is bound to 1 MCP token(s); delete them first"},
    )
    assert deleted.status_code == 204
