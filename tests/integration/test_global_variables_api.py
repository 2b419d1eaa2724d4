"""Global variables through the admin API: CRUD, name rules, write-only secrets (stored
only as ciphertext, with a script-key copy exactly while allowed in scripts), the PUT
rules for an empty value, permissions and the audit trail."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, UNKNOWN_ID, audit_rows
from zilean.crypto.keys import derive_script_key
from zilean.crypto.secretbox import SecretBox, SecretUnreadable
from zilean.db.tables import global_variables

PLAINTEXT = "hunter2-plaintext-4f1c"  # a secret value no response or audit entry may hold
REPLACEMENT = "rotated-plaintext-9b7e"
PUBLIC_KEYS = {
    "id",
    "name",
    "value",
    "is_secret",
    "allow_in_scripts",
    "has_value",
    "created_at",
    "updated_at",
}


def variable(name: str = "API_KEY", value: str = "", **flags: bool) -> dict[str, Any]:
    """A full request body: not secret and not allowed in scripts unless flagged."""
    return {
        "name": name,
        "value": value,
        "is_secret": flags.get("is_secret", False),
        "allow_in_scripts": flags.get("allow_in_scripts", False),
    }


def secret(name: str = "API_KEY", value: str = PLAINTEXT, *, scripts: bool = False) -> Any:
    return variable(name, value, is_secret=True, allow_in_scripts=scripts)


def master_key(app: FastAPI) -> bytes:
    key: bytes = app.state.settings.settings_encryption_key
    return key


async def create(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/api/global-variables", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def listed(app: FastAPI, session: str) -> list[dict[str, Any]]:
    async with client_for(app, session) as client:
        response = await client.get("/api/global-variables")
    assert response.status_code == 200
    result: list[dict[str, Any]] = response.json()
    return result


async def stored(engine: AsyncEngine, variable_id: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    select(global_variables).where(global_variables.c.id == uuid.UUID(variable_id))
                )
            )
            .mappings()
            .one()
        )
    return dict(row)


def open_secret(app: FastAPI, row: dict[str, Any]) -> str:
    return SecretBox(master_key(app)).open(row["secret_value"], f"globalvar:{row['id']}")


def open_script_copy(app: FastAPI, row: dict[str, Any]) -> str:
    script_key = derive_script_key(master_key(app))
    return SecretBox(script_key).open(row["script_secret_value"], f"globalvar-script:{row['id']}")


async def test_it_creates_lists_updates_and_deletes_a_plain_variable(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, variable("REGION", "eu-west-1"))
        path = f"/api/global-variables/{created['id']}"
        updated = await alice.put(path, json=variable("AWS_REGION", "eu-central-1"))
        after_update = await listed(core_app, cast.alice.session)
        deleted = await alice.delete(path)
        again = await alice.delete(path)
    assert set(created) == PUBLIC_KEYS
    assert created["name"] == "REGION"
    assert created["value"] == "eu-west-1"
    assert (created["is_secret"], created["allow_in_scripts"], created["has_value"]) == (
        False,
        False,
        True,
    )
    assert updated.status_code == 200
    assert updated.json()["id"] == created["id"]
    assert (updated.json()["name"], updated.json()["value"]) == ("AWS_REGION", "eu-central-1")
    assert updated.json()["created_at"] == created["created_at"]
    assert after_update == [updated.json()]
    assert (deleted.status_code, again.status_code) == (204, 404)
    assert again.json() == {"error": "global variable not found"}
    assert await listed(core_app, cast.alice.session) == []


async def test_it_lists_variables_sorted_by_name(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        for name in ("zone", "Base_URL", "api_token", "TIMEOUT"):
            await create(alice, variable(name, "x"))
    names = [v["name"] for v in await listed(core_app, cast.alice.session)]
    assert names == ["api_token", "Base_URL", "TIMEOUT", "zone"]


async def test_a_plain_variable_with_an_empty_value_has_no_value(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, {"name": "EMPTY"})
    assert (created["value"], created["has_value"], created["is_secret"]) == ("", False, False)


async def test_it_accepts_a_name_of_128_characters(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, variable("A" * 128, "x"))
    assert created["name"] == "A" * 128


async def test_it_refuses_an_unknown_field_but_drops_the_read_only_ones(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        typo = await alice.post(
            "/api/global-variables", json={**variable("REGION", "eu"), "colour": "red"}
        )
        created = await create(alice, {**variable("REGION", "eu"), "id": 7, "has_value": False})
        listed = (await alice.get("/api/global-variables")).json()
    assert (typo.status_code, typo.json()) == (400, {"error": 'unknown field "colour"'})
    assert listed == [created]  # the typo stored nothing
    assert set(created) == PUBLIC_KEYS
    assert (created["id"] != 7, created["has_value"]) == (True, True)


NAME_RULE = "name: may contain only letters, digits and underscores"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"value": "x"}, "name is required"),  # no name at all
        (variable(""), "name is required"),  # an empty name
        (variable("has space"), NAME_RULE),  # a space
        (variable("dash-ed"), NAME_RULE),  # a dash
        (variable("dotted.name"), NAME_RULE),  # a dot
        (variable("{{x}}"), NAME_RULE),  # placeholder braces
        (variable("naïve"), NAME_RULE),  # a non-ASCII letter
        (variable("TRAILING\n"), NAME_RULE),  # a trailing newline
        (variable("A" * 129), "name: must be at most 128 characters"),  # one character too long
        ({**variable(), "name": 5}, "name: must be a string"),  # not a string
        ({**variable(), "value": 5}, "value: must be a string"),  # not a string
        ({**variable(), "is_secret": "yes"}, "is_secret: must be true or false"),
        ({**variable(), "is_secret": 1}, "is_secret: must be true or false"),  # strict
        (
            {**variable(), "allow_in_scripts": None},  # null is not a boolean
            "allow_in_scripts: must be true or false",
        ),
    ],
)
async def test_it_refuses_an_invalid_variable(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        existing = await create(alice, variable("KEEP", "kept"))
        created = await alice.post("/api/global-variables", json=body)
        updated = await alice.put(f"/api/global-variables/{existing['id']}", json=body)
    assert (created.status_code, created.json()) == (400, {"error": message})
    assert (updated.status_code, updated.json()) == (400, {"error": message})
    assert await listed(core_app, cast.alice.session) == [existing]


@pytest.mark.parametrize(
    "missing",
    [
        "name",  # the name
        "value",  # the value: an omitted value must not clear a plain variable
        "is_secret",  # the flag: an omitted one must not turn a secret plain
        "allow_in_scripts",  # the script flag
    ],
)
async def test_put_takes_the_full_variable(core_app: FastAPI, cast: Cast, missing: str) -> None:
    body = variable("REGION", "eu")
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, body)
        del body[missing]
        response = await alice.put(f"/api/global-variables/{created['id']}", json=body)
    assert (response.status_code, response.json()) == (400, {"error": f"{missing} is required"})


async def test_an_unknown_or_malformed_id_is_refused(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        unknown_put = await alice.put(f"/api/global-variables/{UNKNOWN_ID}", json=variable())
        unknown_delete = await alice.delete(f"/api/global-variables/{UNKNOWN_ID}")
        malformed = await alice.delete("/api/global-variables/not-a-uuid")
    assert (unknown_put.status_code, unknown_put.json()) == (
        404,
        {"error": "global variable not found"},
    )
    assert unknown_delete.status_code == 404
    assert malformed.status_code == 400


async def test_it_refuses_a_duplicate_name_on_create_and_rename(
    core_app: FastAPI, cast: Cast
) -> None:
    conflict = {"error": 'a global variable named "TOKEN_URL" already exists'}
    async with client_for(core_app, cast.alice.session) as alice:
        first = await create(alice, variable("TOKEN_URL", "https://a.example.com"))
        other = await create(alice, variable("OTHER", "o"))
        duplicate = await alice.post(
            "/api/global-variables", json=secret("TOKEN_URL", "https://b.example.com")
        )
        renamed = await alice.put(
            f"/api/global-variables/{other['id']}", json=variable("TOKEN_URL", "o")
        )
        kept_name = await alice.put(
            f"/api/global-variables/{first['id']}", json=variable("TOKEN_URL", "https://c")
        )
    assert (duplicate.status_code, duplicate.json()) == (409, conflict)
    assert (renamed.status_code, renamed.json()) == (409, conflict)
    assert kept_name.status_code == 200
    names = [v["name"] for v in await listed(core_app, cast.alice.session)]
    assert names == ["OTHER", "TOKEN_URL"]


async def test_a_secret_is_stored_only_as_ciphertext_bound_to_its_row(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, secret())
    row = await stored(engine, created["id"])
    assert (created["value"], created["has_value"], created["is_secret"]) == ("", True, True)
    assert row["value"] == ""
    assert PLAINTEXT.encode() not in row["secret_value"]
    assert open_secret(core_app, row) == PLAINTEXT
    assert row["script_secret_value"] is None
    # The ciphertext opens only under its own row's identity, and not with the script key.
    with pytest.raises(SecretUnreadable):
        SecretBox(master_key(core_app)).open(row["secret_value"], f"globalvar:{UNKNOWN_ID}")
    with pytest.raises(SecretUnreadable):
        SecretBox(derive_script_key(master_key(core_app))).open(
            row["secret_value"], f"globalvar-script:{row['id']}"
        )


async def test_the_script_copy_exists_exactly_while_the_secret_is_allowed_in_scripts(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, secret(scripts=True))
        path = f"/api/global-variables/{created['id']}"
        opted_in = await stored(engine, created["id"])
        await alice.put(path, json=secret(value="", scripts=False))
        opted_out = await stored(engine, created["id"])
        await alice.put(path, json=secret(value="", scripts=True))
        opted_in_again = await stored(engine, created["id"])
        await alice.put(path, json=secret(value=REPLACEMENT, scripts=True))
        replaced = await stored(engine, created["id"])
        await alice.put(path, json=variable("API_KEY", "now public", allow_in_scripts=True))
        made_plain = await stored(engine, created["id"])
    assert open_script_copy(core_app, opted_in) == PLAINTEXT
    assert opted_out["script_secret_value"] is None
    assert open_secret(core_app, opted_out) == PLAINTEXT
    assert open_script_copy(core_app, opted_in_again) == PLAINTEXT
    assert (open_secret(core_app, replaced), open_script_copy(core_app, replaced)) == (
        REPLACEMENT,
        REPLACEMENT,
    )
    assert (made_plain["secret_value"], made_plain["script_secret_value"]) == (None, None)
    assert made_plain["value"] == "now public"
    # The script copy does not open with the master key, nor under the master key's context.
    with pytest.raises(SecretUnreadable):
        SecretBox(master_key(core_app)).open(
            opted_in["script_secret_value"], f"globalvar-script:{opted_in['id']}"
        )
    with pytest.raises(SecretUnreadable):
        SecretBox(derive_script_key(master_key(core_app))).open(
            opted_in["script_secret_value"], f"globalvar:{opted_in['id']}"
        )


async def test_an_empty_secret_stores_nothing(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, secret(value="", scripts=True))
    row = await stored(engine, created["id"])
    assert (created["value"], created["has_value"]) == ("", False)
    assert (row["value"], row["secret_value"], row["script_secret_value"]) == ("", None, None)


# (before, after, expected has_value, what the row then holds: "secret" decrypting to
# the plaintext shown, or the plain value)
PUT_CASES = [
    pytest.param(
        secret(),
        secret(value=""),
        True,
        ("secret", PLAINTEXT),
        id="secret_kept_when_empty_and_still_secret",
    ),
    pytest.param(
        secret(),
        secret(value="", scripts=True),
        True,
        ("secret", PLAINTEXT),
        id="secret_kept_and_copied_for_scripts_when_allowed",
    ),
    pytest.param(
        secret(),
        secret(value=REPLACEMENT),
        True,
        ("secret", REPLACEMENT),
        id="secret_replaced_by_a_new_value",
    ),
    pytest.param(
        secret(scripts=True),
        variable("API_KEY", ""),
        False,
        ("plain", ""),
        id="secret_made_plain_with_empty_value_is_cleared",
    ),
    pytest.param(
        secret(),
        variable("API_KEY", "visible"),
        True,
        ("plain", "visible"),
        id="secret_made_plain_with_a_value_takes_it",
    ),
    pytest.param(
        variable("API_KEY", "visible"),
        secret(value=""),
        False,
        ("secret", None),
        id="plain_made_secret_with_empty_value_stores_an_empty_secret",
    ),
    pytest.param(
        variable("API_KEY", "visible"),
        secret(value=REPLACEMENT, scripts=True),
        True,
        ("secret", REPLACEMENT),
        id="plain_made_secret_with_a_value_seals_it",
    ),
]


@pytest.mark.parametrize(("before", "after", "has_value", "holds"), PUT_CASES)
async def test_put_applies_the_empty_value_rules(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    before: dict[str, Any],
    after: dict[str, Any],
    has_value: bool,
    holds: tuple[str, str | None],
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, before)
        response = await alice.put(f"/api/global-variables/{created['id']}", json=after)
        body_text = response.text + (await alice.get("/api/global-variables")).text
    assert response.status_code == 200, response.text
    body = response.json()
    row = await stored(engine, created["id"])
    kind, content = holds
    assert (body["is_secret"], body["has_value"]) == (kind == "secret", has_value)
    if kind == "plain":
        assert (body["value"], row["value"]) == (content, content)
        assert (row["secret_value"], row["script_secret_value"]) == (None, None)
    else:
        assert (body["value"], row["value"]) == ("", "")
        if content is None:
            assert row["secret_value"] is None
        else:
            assert open_secret(core_app, row) == content
        if after["allow_in_scripts"] and content is not None:
            assert open_script_copy(core_app, row) == content
        else:
            assert row["script_secret_value"] is None
    # A secret never comes back through the API unless the caller made it plain on purpose.
    for hidden in (PLAINTEXT, REPLACEMENT):
        if not (kind == "plain" and content == hidden):
            assert hidden not in body_text


async def test_no_plaintext_secret_reaches_a_response_or_the_audit_log(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    texts = []
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, secret(scripts=True))
        path = f"/api/global-variables/{created['id']}"
        for body in (
            secret(value=""),
            secret(value=REPLACEMENT, scripts=True),
            secret("RENAMED", value="", scripts=False),
            variable("RENAMED", ""),
        ):
            response = await alice.put(path, json=body)
            assert response.status_code == 200
            texts.append(response.text)
        texts.append((await alice.get("/api/global-variables")).text)
        texts.append((await alice.get("/api/audit-log")).text)
        assert (await alice.delete(path)).status_code == 204
    entries = [e for e in await audit_rows(engine) if e["resource_type"] == "global_variable"]
    snapshots = json.dumps([[e["before"], e["after"]] for e in entries])
    for hidden in (PLAINTEXT, REPLACEMENT):
        assert all(hidden not in text for text in texts)
        assert hidden not in snapshots
    assert "secret_value" not in snapshots
    assert [e["action"] for e in entries] == [
        "global_variable.create",
        *["global_variable.update"] * 4,
        "global_variable.delete",
    ]
    # A stored secret is shown as the mask; an empty or cleared one as "".
    values = [
        (None if e["before"] is None else e["before"]["value"])
        for e in entries
        if e["action"] != "global_variable.create"
    ]
    assert values == ["***", "***", "***", "***", ""]
    assert entries[0]["after"]["value"] == "***"
    assert entries[-2]["after"]["value"] == ""
    assert entries[-2]["after"]["is_secret"] is False


async def test_it_audits_every_change_with_before_and_after(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        created = await create(bob, variable("REGION", "eu"))
        path = f"/api/global-variables/{created['id']}"
        updated = (await bob.put(path, json=variable("REGION", "us"))).json()
        await bob.delete(path)
    entries = [e for e in await audit_rows(engine) if e["resource_type"] == "global_variable"]
    summary = [
        (
            e["action"],
            e["resource_id"],
            e["actor_email"],
            e["before"] and e["before"]["value"],
            e["after"] and e["after"]["value"],
        )
        for e in entries
    ]
    assert summary == [
        ("global_variable.create", created["id"], "bob@example.com", None, "eu"),
        ("global_variable.update", created["id"], "bob@example.com", "eu", "us"),
        ("global_variable.delete", created["id"], "bob@example.com", "us", None),
    ]
    stamps = {"created_at", "updated_at"}  # the API and the audit log format times differently
    assert {k: v for k, v in entries[1]["after"].items() if k not in stamps} == {
        k: v for k, v in updated.items() if k not in stamps
    }
    assert set(entries[0]["after"]) == PUBLIC_KEYS


async def test_read_only_lists_variables_but_cannot_change_them(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, secret())
    path = f"/api/global-variables/{created['id']}"
    async with client_for(core_app, cast.carol.session) as carol:
        listing = await carol.get("/api/global-variables")
        refused = [
            await carol.post("/api/global-variables", json=variable("NEW", "x")),
            await carol.put(path, json=variable("API_KEY", "leaked")),
            await carol.delete(path),
        ]
    assert listing.status_code == 200
    assert [v["name"] for v in listing.json()] == ["API_KEY"]
    assert PLAINTEXT not in listing.text
    assert [(r.status_code, r.json()) for r in refused] == [(403, FORBIDDEN)] * 3
    assert await listed(core_app, cast.alice.session) == [created]


async def test_an_admin_manages_variables_and_a_role_without_the_keys_cannot_read_them(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        created = await create(bob, secret(scripts=True))
        path = f"/api/global-variables/{created['id']}"
        updated = await bob.put(path, json=secret("RENAMED", value="", scripts=False))
        deleted = await bob.delete(path)
    async with client_for(core_app, cast.dave.session) as dave:
        refused = await dave.get("/api/global-variables")
    assert (updated.status_code, updated.json()["name"], deleted.status_code) == (
        200,
        "RENAMED",
        204,
    )
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)
