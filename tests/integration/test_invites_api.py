"""Invites through the admin API: creation, the pending list and resending."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.actors import Cast, client_for
from tests.support.api import UNKNOWN_ID

LINK_PREFIX = "https://zilean.example.com/admin/accept-invite?token="


async def invite(app: FastAPI, session: str, email: str, role_ids: list[Any]) -> Any:
    async with client_for(app, session) as client:
        return await client.post(
            "/api/invites", json={"email": email, "role_ids": [str(r) for r in role_ids]}
        )


async def users_by_email(app: FastAPI, cast: Cast) -> dict[str, Any]:
    async with client_for(app, cast.alice.session) as alice:
        response = await alice.get("/api/users")
    assert response.status_code == 200
    return {user["email"]: user for user in response.json()}


async def test_it_invites_someone_as_an_invited_user(core_app: FastAPI, cast: Cast) -> None:
    response = await invite(
        core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]]
    )
    assert response.status_code == 201
    body = response.json()
    assert body["link"].startswith(LINK_PREFIX)
    assert len(body["link"]) > len(LINK_PREFIX) + 20
    created = body["invite"]
    assert created["email"] == "x@example.com"
    assert [role["name"] for role in created["roles"]] == ["Read-Only"]
    invited = (await users_by_email(core_app, cast))["x@example.com"]
    assert invited["status"] == "invited"
    assert invited["id"] == created["user_id"]
    assert invited["is_super_admin"] is False


async def test_it_lists_a_pending_invite(core_app: FastAPI, cast: Cast) -> None:
    created = (
        await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]])
    ).json()["invite"]
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.get("/api/invites")
    assert response.status_code == 200
    pending = response.json()
    assert len(pending) == 1
    assert pending[0]["id"] == created["id"]
    assert pending[0]["user_id"] == created["user_id"]
    assert pending[0]["email"] == "x@example.com"
    assert pending[0]["expired"] is False


async def test_the_pending_list_shows_only_the_newest_invite_of_each_invitee(
    core_app: FastAPI, cast: Cast
) -> None:
    first = (
        await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]])
    ).json()
    await invite(core_app, cast.alice.session, "y@example.com", [cast.role_ids["read_only"]])
    async with client_for(core_app, cast.alice.session) as alice:
        resent = (await alice.post(f"/api/invites/{first['invite']['user_id']}/resend")).json()
        response = await alice.get("/api/invites")
    assert response.status_code == 200
    # Newest first: x's resent invite is newer than y's, and x's first one is gone.
    listed = [(item["email"], item["id"]) for item in response.json()]
    assert listed[0] == ("x@example.com", resent["invite"]["id"])
    assert [email for email, _ in listed] == ["x@example.com", "y@example.com"]


async def test_resending_by_the_invitees_user_id_mints_a_fresh_link(
    core_app: FastAPI, cast: Cast
) -> None:
    first = (
        await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]])
    ).json()
    async with client_for(core_app, cast.alice.session) as alice:
        resent = await alice.post(f"/api/invites/{first['invite']['user_id']}/resend")
    assert resent.status_code == 201
    again = resent.json()
    assert again["link"].startswith(LINK_PREFIX)
    assert again["link"] != first["link"]
    assert again["invite"]["user_id"] == first["invite"]["user_id"]
    assert again["invite"]["id"] != first["invite"]["id"]
    assert again["invite"]["expires_at"] >= first["invite"]["expires_at"]


async def test_resending_by_the_invite_id_rather_than_the_user_id_is_not_found(
    core_app: FastAPI, cast: Cast
) -> None:
    first = (
        await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]])
    ).json()
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post(f"/api/invites/{first['invite']['id']}/resend")
    assert response.status_code == 404


async def test_resending_for_an_unknown_user_is_not_found(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post(f"/api/invites/{UNKNOWN_ID}/resend")
    assert response.status_code == 404


async def test_resending_for_an_active_user_is_a_conflict(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post(f"/api/invites/{cast.bob.user_id}/resend")
    assert response.status_code == 409
    assert (await users_by_email(core_app, cast))["bob@example.com"]["status"] == "active"


@pytest.mark.parametrize(
    "email",
    [
        "bob@example.com",  # an active user: an invite would hand over his account
        "BOB@example.com",  # the same, in another case
        "x@example.com",  # someone already invited
    ],
)
async def test_it_refuses_to_invite_an_existing_user(
    core_app: FastAPI, cast: Cast, email: str
) -> None:
    await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["read_only"]])
    response = await invite(core_app, cast.alice.session, email, [cast.role_ids["read_only"]])
    assert response.status_code == 409
    statuses = {email: u["status"] for email, u in (await users_by_email(core_app, cast)).items()}
    assert statuses["bob@example.com"] == "active"
    assert statuses["x@example.com"] == "invited"
    assert len(statuses) == 5


@pytest.mark.parametrize(
    ("role", "status"),
    [
        ("admin", 403),  # Admin exceeds dave's permissions
        ("super_admin", 403),  # only a Super Admin invites a Super Admin
        ("dave", 201),  # dave's own role
    ],
)
async def test_an_inviter_can_only_invite_into_roles_within_his_permissions(
    core_app: FastAPI, cast: Cast, role: str, status: int
) -> None:
    response = await invite(core_app, cast.dave.session, "x@example.com", [cast.role_ids[role]])
    assert response.status_code == status, response.text
    assert ("x@example.com" in await users_by_email(core_app, cast)) is (status == 201)


async def test_an_inviter_cannot_resend_an_invite_into_a_role_beyond_his_permissions(
    core_app: FastAPI, cast: Cast
) -> None:
    first = (
        await invite(core_app, cast.alice.session, "x@example.com", [cast.role_ids["admin"]])
    ).json()
    async with client_for(core_app, cast.dave.session) as dave:
        response = await dave.post(f"/api/invites/{first['invite']['user_id']}/resend")
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("email", "role_ids"),
    [
        ("x@example.com", []),  # no role at all
        ("x@example.com", [UNKNOWN_ID]),  # a role that does not exist
        ("not-an-email", None),  # no @ in the address
    ],
)
async def test_it_refuses_an_invalid_invite(
    core_app: FastAPI, cast: Cast, email: str, role_ids: list[str] | None
) -> None:
    ids = [cast.role_ids["read_only"]] if role_ids is None else role_ids
    response = await invite(core_app, cast.alice.session, email, ids)
    assert response.status_code == 400
    assert len(await users_by_email(core_app, cast)) == 4
