"""The audit log through the admin API: what is recorded, filters, pagination, the
retention setting and the sweep that applies it."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, audit_rows, create_role, create_user, served_client
from zilean.audit.log import Actor, record
from zilean.audit.retention import set_retention_days, sweep_once
from zilean.auth.tokens import digest, new_token
from zilean.db.tables import audit_log, sessions


async def read_log(app: FastAPI, session: str, **params: str) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.get("/api/audit-log", params=params)


async def test_it_records_account_changes_newest_first_without_secrets(
    core_app: FastAPI, cast: Cast
) -> None:
    erin, temporary = await create_user(
        core_app, cast.alice.session, "erin@example.com", [cast.role_ids["read_only"]]
    )
    read_only = str(cast.role_ids["read_only"])
    async with client_for(core_app, cast.alice.session) as alice:

        async def call(method: str, path: str, status: int, body: object = None) -> Any:
            response = await alice.request(method, path, json=body)
            assert response.status_code == status, (method, path, response.text)
            return response.json() if response.content else None

        user = f"/api/users/{erin}"
        await call("PATCH", user, 200, {"role_ids": [str(cast.role_ids["dave"])]})
        await call("PATCH", user, 200, {"status": "disabled"})
        reset = await call("POST", f"{user}/reset-password", 200)
        await call("DELETE", user, 204)
        invited = await call(
            "POST", "/api/invites", 201, {"email": "x@example.com", "role_ids": [read_only]}
        )
        resent = await call("POST", f"/api/invites/{invited['invite']['user_id']}/resend", 201)
        role = f"/api/roles/{(await call('POST', '/api/roles', 201, {'name': 'Deployers'}))['id']}"
        await call("PATCH", role, 200, {"permissions": ["jobs:read"]})
        await call("DELETE", role, 204)
    secrets = [temporary, reset["temp_password"]]
    secrets += [link["link"].partition("token=")[2] for link in (invited, resent)]
    assert all(secrets)

    response = await read_log(core_app, cast.alice.session)
    assert response.status_code == 200
    body = response.json()
    entries = body["entries"]
    assert body["next_cursor"] is None
    assert [entry["action"] for entry in entries] == [
        "role.delete",
        "role.update",
        "role.create",
        "invite.resend",
        "invite.create",
        "user.delete",
        "user.password_reset",
        "user.status_change",
        "user.role_change",
        "user.create",
    ]
    assert [entry["id"] for entry in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert {entry["actor_email"] for entry in entries} == {"alice@example.com"}
    assert {entry["actor_user_id"] for entry in entries} == {str(cast.alice.user_id)}
    by_action = {entry["action"]: entry for entry in entries}
    assert by_action["user.create"]["before"] is None
    assert by_action["user.create"]["after"]["email"] == "erin@example.com"
    assert by_action["user.create"]["resource_id"] == str(erin)
    assert [r["name"] for r in by_action["user.role_change"]["before"]["roles"]] == ["Read-Only"]
    assert [r["name"] for r in by_action["user.role_change"]["after"]["roles"]] == ["User managers"]
    assert by_action["user.status_change"]["before"] == {"status": "active"}
    assert by_action["user.status_change"]["after"] == {"status": "disabled"}
    assert by_action["user.delete"]["before"]["email"] == "erin@example.com"
    assert by_action["user.delete"]["after"] is None
    assert by_action["invite.create"]["after"]["email"] == "x@example.com"
    assert by_action["role.update"]["before"]["permissions"] == []
    assert by_action["role.update"]["after"]["permissions"] == ["jobs:read"]
    assert by_action["role.delete"]["before"]["name"] == "Deployers"

    text = json.dumps(entries)
    assert "$2b$" not in text
    for secret in secrets:
        assert secret not in text


async def test_token_creation_is_audited_without_the_secret(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        created = await carol.post(
            "/api/tokens", json={"name": "ci", "role_id": str(cast.role_ids["read_only"])}
        )
    assert created.status_code == 201
    entries = (await read_log(core_app, cast.alice.session)).json()["entries"]
    assert [entry["action"] for entry in entries] == ["api_token.create"]
    assert entries[0]["actor_email"] == "carol@example.com"
    assert created.json()["secret"] not in json.dumps(entries)


async def test_it_filters_entries(core_app: FastAPI, cast: Cast) -> None:
    for email in ("erin@example.com", "fay@example.com"):
        await create_user(core_app, cast.alice.session, email, [cast.role_ids["read_only"]])
    await create_role(core_app, cast.alice.session, "Deployers", [])
    now = datetime.now(UTC)
    expected = {
        # action=user.create: the two users
        "action": ({"action": "user.create"}, ["user.create", "user.create"]),
        # resource_type=role: the role
        "resource": ({"resource_type": "role"}, ["role.create"]),
        # alice's entries: all three
        "alice": ({"actor_user_id": str(cast.alice.user_id)}, 3),
        # bob did nothing
        "bob": ({"actor_user_id": str(cast.bob.user_id)}, 0),
        # since an hour ago, with a Z
        "since": ({"since": (now - timedelta(hours=1)).isoformat().replace("+00:00", "Z")}, 3),
        # since an hour from now
        "future": ({"since": (now + timedelta(hours=1)).isoformat()}, 0),
        # until an hour ago
        "until": ({"until": (now - timedelta(hours=1)).isoformat()}, 0),
    }
    found = {}
    for name, (params, _) in expected.items():
        response = await read_log(core_app, cast.alice.session, **params)
        assert response.status_code == 200, (name, response.text)
        actions = [entry["action"] for entry in response.json()["entries"]]
        found[name] = actions if isinstance(expected[name][1], list) else len(actions)
    assert found == {name: want for name, (_, want) in expected.items()}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("actor_user_id", "not-a-uuid"),  # not a UUID
        ("since", "not-a-time"),  # not a time
        ("until", "yesterday"),  # not a time either
        ("since", "2024-01-01T00:00:00"),  # a time without a zone
        ("cursor", "garbage"),  # not one of our cursors
        ("cursor", "!!!"),  # not even base64
    ],
)
async def test_it_refuses_a_malformed_filter(
    core_app: FastAPI, cast: Cast, name: str, value: str
) -> None:
    response = await read_log(core_app, cast.alice.session, **{name: value})
    assert response.status_code == 400
    assert set(response.json()) == {"error"}


async def test_it_refuses_a_cursor_whose_id_is_out_of_range_with_400(
    core_app: FastAPI, cast: Cast
) -> None:
    forged = base64.urlsafe_b64encode(b"2024-01-01T00:00:00+00:00|99999999999999999999").decode()
    async with served_client(core_app, cast.alice.session) as alice:
        response = await alice.get("/api/audit-log", params={"cursor": forged})
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "cursor is malformed"}


async def test_it_pages_through_entries_with_a_cursor(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    actor = Actor(cast.bob.user_id, cast.bob.email, "127.0.0.1")
    # Two transactions: 70 entries sharing one timestamp, then 50 sharing a later one,
    # so pages break both inside a tie and across timestamps.
    for first, count in ((0, 70), (70, 50)):
        async with engine.begin() as conn:
            for n in range(first, first + count):
                await record(conn, actor, "test.entry", "test", str(n))
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        params = {"cursor": cursor} if cursor else {}
        body = (await read_log(core_app, cast.alice.session, **params)).json()
        pages.append(body["entries"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert len(pages) < 5, "the cursor never ran out"
    assert [len(page) for page in pages] == [50, 50, 20]
    ids = [entry["resource_id"] for page in pages for entry in page]
    assert ids == [str(n) for n in reversed(range(120))]


async def test_audit_readers_read_the_retention_setting_and_writers_change_it(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        read = await bob.get("/api/settings/audit")
        refused = await bob.put("/api/settings/audit", json={"audit_retention_days": 30})
    assert read.status_code == 200
    assert isinstance(read.json()["audit_retention_days"], int)
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)
    async with client_for(core_app, cast.alice.session) as alice:
        written = await alice.put("/api/settings/audit", json={"audit_retention_days": 30})
    async with client_for(core_app, cast.bob.session) as bob:
        reread = await bob.get("/api/settings/audit")
    assert (written.status_code, written.json()) == (200, {"audit_retention_days": 30})
    assert reread.json() == {"audit_retention_days": 30}


@pytest.mark.parametrize(
    ("days", "status"),
    [
        (0, 400),  # below the minimum
        (-1, 400),  # negative
        (3651, 400),  # above the maximum
        ("30", 400),  # a string, not an integer
        (30.5, 400),  # not a whole number
        (True, 400),  # a boolean is not a number of days
        (1, 200),  # the minimum
        (3650, 200),  # the maximum
    ],
)
async def test_it_checks_the_retention_setting(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, days: object, status: int
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        before = (await alice.get("/api/settings/audit")).json()
        response = await alice.put("/api/settings/audit", json={"audit_retention_days": days})
        after = (await alice.get("/api/settings/audit")).json()
    assert response.status_code == status, response.text
    assert after == ({"audit_retention_days": days} if status == 200 else before)
    # Changing the setting is not itself audited.
    assert await audit_rows(engine) == []


async def test_the_sweep_removes_old_entries_and_long_expired_sessions(
    engine: AsyncEngine, cast: Cast
) -> None:
    async with engine.begin() as conn:
        await set_retention_days(conn, 30)
        now = (await conn.execute(select(func.now()))).scalar_one()
        actor = Actor(None, None, None)
        for label, age in (("old", 31), ("recent", 29)):
            await record(conn, actor, "test.entry", "test", label)
            await conn.execute(
                update(audit_log)
                .where(audit_log.c.resource_id == label)
                .values(occurred_at=now - timedelta(days=age))
            )
        await record(conn, actor, "test.entry", "test", "now")
        expired = {
            "long": now - timedelta(hours=25),  # expired more than a day ago
            "lately": now - timedelta(hours=23),  # expired, but within the day's grace
            "live": now + timedelta(hours=1),  # not expired at all
        }
        hashes = {label: digest(new_token()) for label in expired}
        await conn.execute(
            insert(sessions),
            [
                {"token_hash": hashes[label], "user_id": cast.carol.user_id, "expires_at": at}
                for label, at in expired.items()
            ],
        )
    removed = await sweep_once(engine)
    async with engine.connect() as conn:
        kept_entries = (await conn.execute(select(audit_log.c.resource_id))).scalars().all()
        kept_sessions = set((await conn.execute(select(sessions.c.token_hash))).scalars().all())
    assert removed == (1, 1)
    assert sorted(kept_entries) == ["now", "recent"]
    assert hashes["long"] not in kept_sessions
    assert {hashes["lately"], hashes["live"]} <= kept_sessions
    # The cast's own sessions are live and survive.
    assert len(kept_sessions) == 4 + 2
