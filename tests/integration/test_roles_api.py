"""Roles through the admin API: the permission keys, protected system roles, custom roles
and the rule that an editor may only add permissions they hold."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, add_user, client_for, sign_in_directly
from tests.support.api import (
    ADMIN_KEYS,
    ALL_PERMISSION_KEYS,
    FORBIDDEN,
    READ_ONLY_KEYS,
    UNKNOWN_ID,
    create_role,
)

EDITOR_KEYS = ["jobs:read", "roles:read", "roles:write"]


async def role_editor(app: FastAPI, engine: AsyncEngine, cast: Cast) -> str:
    """A session for a user whose only role holds roles:read, roles:write and jobs:read."""
    role = await create_role(app, cast.alice.session, "Role editors", EDITOR_KEYS)
    editor = await add_user(engine, "gina@example.com", [role])
    return await sign_in_directly(engine, editor)


async def roles_by_name(app: FastAPI, session: str) -> dict[str, dict[str, Any]]:
    async with client_for(app, session) as client:
        response = await client.get("/api/roles")
    assert response.status_code == 200
    return {role["name"]: role for role in response.json()}


async def test_it_lists_the_24_permission_keys(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        response = await carol.get("/api/roles/permissions")
    assert response.status_code == 200
    assert len(response.json()) == 24
    assert set(response.json()) == ALL_PERMISSION_KEYS


async def test_it_lists_the_seeded_roles_with_their_permissions(
    core_app: FastAPI, cast: Cast
) -> None:
    listed = await roles_by_name(core_app, cast.carol.session)
    assert list(listed) == ["Admin", "Read-Only", "Super Admin", "User managers"]
    assert set(listed["Admin"]["permissions"]) == ADMIN_KEYS
    assert set(listed["Read-Only"]["permissions"]) == READ_ONLY_KEYS
    assert listed["Super Admin"]["permissions"] == []
    assert [listed[name]["is_system"] for name in listed] == [True, True, True, False]


@pytest.mark.parametrize(
    "role",
    [
        "super_admin",  # Super Admin
        "admin",  # Admin
        "read_only",  # Read-Only
    ],
)
async def test_it_refuses_to_rename_or_delete_a_system_role(
    core_app: FastAPI, cast: Cast, role: str
) -> None:
    role_id = cast.role_ids[role]
    async with client_for(core_app, cast.alice.session) as alice:
        renamed = await alice.patch(f"/api/roles/{role_id}", json={"name": "Renamed"})
        deleted = await alice.delete(f"/api/roles/{role_id}")
    assert (renamed.status_code, deleted.status_code) == (409, 409)
    names = await roles_by_name(core_app, cast.alice.session)
    assert "Renamed" not in names
    assert len(names) == 4


async def test_a_system_role_keeps_its_name_but_may_change_its_description(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/roles/{cast.role_ids['admin']}",
            json={"name": "Admin", "description": "Day to day."},
        )
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["description"]) == ("Admin", "Day to day.")


async def test_it_refuses_to_edit_the_super_admin_roles_permissions(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/roles/{cast.role_ids['super_admin']}", json={"permissions": ["jobs:read"]}
        )
    assert response.status_code == 409
    assert (await roles_by_name(core_app, cast.alice.session))["Super Admin"]["permissions"] == []


async def test_a_super_admin_edits_the_admin_roles_permissions_with_immediate_effect(
    core_app: FastAPI, cast: Cast
) -> None:
    wanted = sorted((ADMIN_KEYS - {"notify:write"}) | {"users:read"})
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/roles/{cast.role_ids['admin']}", json={"permissions": wanted}
        )
    async with client_for(core_app, cast.bob.session) as bob:
        me = (await bob.get("/api/account/me")).json()
        users_list = await bob.get("/api/users")
    assert response.status_code == 200
    assert response.json()["permissions"] == wanted
    assert me["permissions"] == wanted
    assert users_list.status_code == 200


@pytest.mark.parametrize(
    "name",
    [
        "Deployers",  # exactly the existing custom role's name
        "deployers",  # the same name in another case
        "  DEPLOYERS ",  # the same name, case and spaces aside
        "read-only",  # a system role's name in another case
    ],
)
async def test_it_refuses_a_duplicate_role_name(core_app: FastAPI, cast: Cast, name: str) -> None:
    await create_role(core_app, cast.alice.session, "Deployers", ["jobs:read"])
    other = await create_role(core_app, cast.alice.session, "Operators", [])
    async with client_for(core_app, cast.alice.session) as alice:
        created = await alice.post("/api/roles", json={"name": name})
        renamed = await alice.patch(f"/api/roles/{other}", json={"name": name})
    assert (created.status_code, renamed.status_code) == (409, 409)
    names = await roles_by_name(core_app, cast.alice.session)
    assert set(names) == {
        "Admin",
        "Read-Only",
        "Super Admin",
        "User managers",
        "Deployers",
        "Operators",
    }


async def test_it_renames_and_deletes_an_unassigned_custom_role(
    core_app: FastAPI, cast: Cast
) -> None:
    role = await create_role(core_app, cast.alice.session, "Deployers", ["jobs:read"])
    async with client_for(core_app, cast.alice.session) as alice:
        renamed = await alice.patch(f"/api/roles/{role}", json={"name": "Releasers"})
        deleted = await alice.delete(f"/api/roles/{role}")
        again = await alice.delete(f"/api/roles/{role}")
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "Releasers"
    assert (deleted.status_code, again.status_code) == (204, 404)
    assert "Releasers" not in await roles_by_name(core_app, cast.alice.session)


async def test_it_refuses_to_delete_a_role_still_assigned(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.delete(f"/api/roles/{cast.role_ids['dave']}")
    assert response.status_code == 409
    assert "User managers" in await roles_by_name(core_app, cast.alice.session)


@pytest.mark.parametrize(
    "permissions",
    [
        ["jobs:read", "jobs:fly"],  # one unknown key among known ones
        ["settings:river_jobs"],  # the spec's name for our settings:queue_jobs
        ["JOBS:READ"],  # keys are exact
    ],
)
async def test_it_refuses_an_unknown_permission_key(
    core_app: FastAPI, cast: Cast, permissions: list[str]
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await alice.post("/api/roles", json={"name": "Odd", "permissions": permissions})
        updated = await alice.patch(
            f"/api/roles/{cast.role_ids['dave']}", json={"permissions": permissions}
        )
    assert (created.status_code, updated.status_code) == (400, 400)
    assert "Odd" not in await roles_by_name(core_app, cast.alice.session)


async def test_an_unknown_role_is_not_found(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(f"/api/roles/{UNKNOWN_ID}", json={"name": "Nobody"})
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("permissions", "status"),
    [
        (["jobs:read"], 201),  # a permission the editor holds
        (["roles:read", "roles:write"], 201),  # every permission the editor holds but one
        (["jobs:write"], 403),  # a permission the editor lacks
        (["jobs:read", "audit:read"], 403),  # one held, one lacked
    ],
)
async def test_a_role_editor_creates_roles_only_from_permissions_they_hold(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, permissions: list[str], status: int
) -> None:
    session = await role_editor(core_app, engine, cast)
    async with client_for(core_app, session) as editor:
        response = await editor.post("/api/roles", json={"name": "New", "permissions": permissions})
    assert response.status_code == status, response.text
    assert ("New" in await roles_by_name(core_app, cast.alice.session)) is (status == 201)


async def test_a_role_editor_adds_a_permission_they_hold_but_not_one_they_lack(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    session = await role_editor(core_app, engine, cast)
    dave_role = f"/api/roles/{cast.role_ids['dave']}"
    dave_keys = ["invites:create", "roles:read", "users:read", "users:write"]
    async with client_for(core_app, session) as editor:
        added = await editor.patch(dave_role, json={"permissions": [*dave_keys, "jobs:read"]})
        refused = await editor.patch(
            dave_role, json={"permissions": [*dave_keys, "jobs:read", "jobs:write"]}
        )
    assert added.status_code == 200
    assert added.json()["permissions"] == sorted([*dave_keys, "jobs:read"])
    assert refused.status_code == 403
    assert refused.json() != FORBIDDEN  # it names the permission
    assert "jobs:write" in refused.json()["error"]
    listed = await roles_by_name(core_app, cast.alice.session)
    assert listed["User managers"]["permissions"] == sorted([*dave_keys, "jobs:read"])


async def test_a_role_editor_removes_permissions_they_do_not_hold(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    session = await role_editor(core_app, engine, cast)
    kept = sorted(ADMIN_KEYS - {"jobs:write", "notify:write", "settings:smtp"})
    async with client_for(core_app, session) as editor:
        response = await editor.patch(
            f"/api/roles/{cast.role_ids['admin']}", json={"permissions": kept}
        )
    assert response.status_code == 200
    assert response.json()["permissions"] == kept
    async with client_for(core_app, cast.bob.session) as bob:
        assert (await bob.get("/api/account/me")).json()["permissions"] == kept


async def test_a_role_with_no_permissions_key_keeps_its_permissions(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/roles/{cast.role_ids['read_only']}", json={"description": "Looks only."}
        )
    assert response.status_code == 200
    assert set(response.json()["permissions"]) == READ_ONLY_KEYS
