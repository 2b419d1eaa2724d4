"""The script volumes catalog through the admin API (CRUD, rules, usage counts, the 409
that lists what still declares a volume, permissions, audit) and the capability checks
the job registry calls."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, audit_rows
from zilean.db.tables import scheduled_jobs, script_volumes
from zilean.errors import InvalidInput
from zilean.registry.volume_declarations import read_capabilities
from zilean.registry.volumes import validate_capabilities

NAME_RULE = {"error": "name: must match ^[a-z][a-z0-9_]{0,62}$"}
MODE_RULE = {"error": 'max_mode: must be "ro" or "rw"'}
PUBLIC_KEYS = {"name", "max_mode", "description", "usage", "created_at", "updated_at"}


def volume(name: str = "reports", max_mode: str = "rw", description: str = "") -> dict[str, Any]:
    return {"name": name, "max_mode": max_mode, "description": description}


def declaring(*names: str, mode: str = "ro") -> dict[str, Any]:
    return {"volumes": [{"name": name, "mode": mode} for name in names]}


async def create(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/api/script-volumes", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def listed(app: FastAPI, session: str) -> list[dict[str, Any]]:
    async with client_for(app, session) as client:
        response = await client.get("/api/script-volumes")
    assert response.status_code == 200
    result: list[dict[str, Any]] = response.json()
    return result


async def add_job(
    engine: AsyncEngine, name: str, capabilities: object, job_type: str = "bash"
) -> str:
    """Insert a job row directly, with every other column at its default."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs).values(
                id=job_id, name=name, job_type=job_type, capabilities=capabilities
            )
        )
    return str(job_id)


async def add_volumes(engine: AsyncEngine, **ceilings: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(script_volumes), [{"name": n, "max_mode": m} for n, m in ceilings.items()]
        )


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Collect the SQL statements the engine sends while the block runs."""
    seen: list[str] = []

    def collect(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", collect)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", collect)


async def test_it_creates_lists_updates_and_deletes_a_volume(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, volume("reports", "rw", "Nightly exports"))
        await create(alice, volume("archive", "ro"))
        updated = await alice.put(
            "/api/script-volumes/reports",
            json={"name": "renamed", "max_mode": "ro", "description": "Read them only"},
        )
        after_update = await listed(core_app, cast.alice.session)
        deleted = await alice.delete("/api/script-volumes/reports")
        again = await alice.delete("/api/script-volumes/reports")
    assert set(created) == PUBLIC_KEYS
    assert (created["name"], created["max_mode"], created["description"], created["usage"]) == (
        "reports",
        "rw",
        "Nightly exports",
        0,
    )
    assert updated.status_code == 200
    assert (updated.json()["name"], updated.json()["max_mode"]) == ("reports", "ro")
    assert updated.json()["description"] == "Read them only"
    assert updated.json()["created_at"] == created["created_at"]
    assert [v["name"] for v in after_update] == ["archive", "reports"]
    assert after_update[1] == updated.json()
    assert (deleted.status_code, again.status_code) == (204, 404)
    assert again.json() == {"error": 'script volume "reports" not found'}
    assert [v["name"] for v in await listed(core_app, cast.alice.session)] == ["archive"]


async def test_put_on_an_unknown_volume_is_not_found(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put("/api/script-volumes/nope", json=volume("nope"))
    assert (response.status_code, response.json()) == (
        404,
        {"error": 'script volume "nope" not found'},
    )


@pytest.mark.parametrize(
    "name",
    [
        "a",  # one letter
        "reports_2026",  # letters, digits and an underscore
        "a" + "b" * 62,  # 63 characters, the longest allowed
    ],
)
async def test_it_accepts_a_valid_name(core_app: FastAPI, cast: Cast, name: str) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, volume(name))
    assert created["name"] == name


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (volume(""), NAME_RULE),  # empty
        (volume("Reports"), NAME_RULE),  # an upper-case letter
        (volume("2reports"), NAME_RULE),  # starts with a digit
        (volume("_reports"), NAME_RULE),  # starts with an underscore
        (volume("daily-reports"), NAME_RULE),  # a dash
        (volume("../etc"), NAME_RULE),  # a path
        (volume("reports\n"), NAME_RULE),  # a trailing newline
        (volume("a" * 64), NAME_RULE),  # 64 characters
        (volume(max_mode="RW"), MODE_RULE),  # modes are lower-case
        (volume(max_mode="wo"), MODE_RULE),  # no such mode
        (volume(max_mode=""), MODE_RULE),  # empty
        ({"name": "reports"}, {"error": "max_mode is required"}),  # no ceiling
        ({"max_mode": "ro"}, {"error": "name is required"}),  # no name
        (
            {**volume(), "max_mode": 1},  # not a string
            {"error": "max_mode: must be a string"},
        ),
        (
            {**volume(), "description": ["x"]},  # not a string
            {"error": "description: must be a string"},
        ),
    ],
)
async def test_it_refuses_an_invalid_volume(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], error: dict[str, str]
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post("/api/script-volumes", json=body)
    assert (response.status_code, response.json()) == (400, error)
    assert await listed(core_app, cast.alice.session) == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"max_mode": "full"}, MODE_RULE),  # no such mode
        ({"description": "only"}, {"error": "max_mode is required"}),  # no ceiling
    ],
)
async def test_it_refuses_an_invalid_update(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], error: dict[str, str]
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, volume("reports", "rw", "kept"))
        response = await alice.put("/api/script-volumes/reports", json=body)
    assert (response.status_code, response.json()) == (400, error)
    assert await listed(core_app, cast.alice.session) == [created]


async def test_it_refuses_a_duplicate_name(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await create(alice, volume("reports", "rw"))
        response = await alice.post("/api/script-volumes", json=volume("reports", "ro"))
    assert (response.status_code, response.json()) == (
        409,
        {"error": 'a script volume named "reports" already exists'},
    )
    assert [v["max_mode"] for v in await listed(core_app, cast.alice.session)] == ["rw"]


async def test_usage_counts_the_jobs_declaring_each_volume(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        for name, mode in (("reports", "rw"), ("archive", "ro"), ("scratch", "rw")):
            await create(alice, volume(name, mode))
    await add_job(engine, "export", declaring("reports", mode="rw"))
    await add_job(engine, "digest", declaring("reports", "archive"))
    await add_job(engine, "plain", {})
    await add_job(engine, "ping", {}, job_type="http")
    await add_job(engine, "unreadable", {"volumes": "reports"})  # not a list: matches nothing
    await add_job(engine, "lookalike", declaring("reports_old"))
    with statements(engine) as sent:
        volumes = await listed(core_app, cast.carol.session)
    assert {v["name"]: v["usage"] for v in volumes} == {"archive": 1, "reports": 2, "scratch": 0}
    # One query for the whole list, however many volumes there are.
    assert len([sql for sql in sent if "script_volumes" in sql]) == 1


async def test_it_refuses_to_delete_a_volume_a_job_declares_and_lists_the_jobs(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await create(alice, volume("reports", "rw"))
    export = await add_job(engine, "nightly-report", declaring("reports", mode="rw"))
    digest = await add_job(engine, "digest", declaring("archive", "reports"))
    async with client_for(core_app, cast.alice.session) as alice:
        refused = await alice.delete("/api/script-volumes/reports")
        still_listed = await listed(core_app, cast.alice.session)
        async with engine.begin() as conn:
            await conn.execute(update(scheduled_jobs).values(capabilities={}))
        deleted = await alice.delete("/api/script-volumes/reports")
    assert refused.status_code == 409
    assert refused.json() == {
        "error": 'script volume "reports" is still declared by 2 job(s)',
        "jobs": [{"id": digest, "name": "digest"}, {"id": export, "name": "nightly-report"}],
        "workflows": [],
    }
    assert [(v["name"], v["usage"]) for v in still_listed] == [("reports", 2)]
    assert deleted.status_code == 204
    assert await listed(core_app, cast.alice.session) == []


async def test_it_audits_create_update_and_delete(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        await create(bob, volume("reports", "rw", "exports"))
        await bob.put("/api/script-volumes/reports", json={"max_mode": "ro"})
        await add_job(engine, "digest", declaring("reports"))
        assert (await bob.delete("/api/script-volumes/reports")).status_code == 409
        async with engine.begin() as conn:
            await conn.execute(update(scheduled_jobs).values(capabilities={}))
        assert (await bob.delete("/api/script-volumes/reports")).status_code == 204
    entries = [e for e in await audit_rows(engine) if e["resource_type"] == "script_volume"]

    def described(snapshot: dict[str, Any] | None) -> tuple[str, str] | None:
        return None if snapshot is None else (snapshot["max_mode"], snapshot["description"])

    assert [
        (
            e["action"],
            e["resource_id"],
            e["actor_email"],
            described(e["before"]),
            described(e["after"]),
        )
        for e in entries
    ] == [
        ("script_volume.create", "reports", "bob@example.com", None, ("rw", "exports")),
        ("script_volume.update", "reports", "bob@example.com", ("rw", "exports"), ("ro", "")),
        ("script_volume.delete", "reports", "bob@example.com", ("ro", ""), None),
    ]


async def test_read_only_lists_volumes_but_cannot_change_them(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await create(alice, volume("reports", "rw"))
    async with client_for(core_app, cast.carol.session) as carol:
        listing = await carol.get("/api/script-volumes")
        refused = [
            await carol.post("/api/script-volumes", json=volume("other")),
            await carol.put("/api/script-volumes/reports", json=volume(max_mode="ro")),
            await carol.delete("/api/script-volumes/reports"),
        ]
    assert (listing.status_code, listing.json()) == (200, [created])
    assert [(r.status_code, r.json()) for r in refused] == [(403, FORBIDDEN)] * 3
    assert await listed(core_app, cast.alice.session) == [created]


async def test_an_admin_manages_volumes_and_a_role_without_the_keys_cannot_see_them(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        created = await bob.post("/api/script-volumes", json=volume("reports", "rw"))
        updated = await bob.put("/api/script-volumes/reports", json={"max_mode": "ro"})
        deleted = await bob.delete("/api/script-volumes/reports")
    async with client_for(core_app, cast.dave.session) as dave:
        refused = await dave.get("/api/script-volumes")
    assert (created.status_code, updated.status_code, deleted.status_code) == (201, 200, 204)
    assert (refused.status_code, refused.json()) == (403, FORBIDDEN)


# The catalog these cases run against: reports may be written, archive only read.
CATALOG = {"reports": "rw", "archive": "ro"}


@pytest.mark.parametrize(
    ("raw", "job_type", "expected"),
    [
        ({}, "bash", {}),  # nothing declared
        ({"volumes": []}, "bash", {}),  # an empty list means nothing declared
        ({}, "http", {}),  # an HTTP job may say nothing
        ({"volumes": []}, "http", {}),  # ...or an empty list
        (declaring("reports", mode="rw"), "bash", declaring("reports", mode="rw")),  # at ceiling
        (declaring("reports"), "python", declaring("reports")),  # below the ceiling
        (declaring("archive"), "groovy", declaring("archive")),  # ro on an ro volume
        (
            {"volumes": [{"name": "archive", "mode": "ro"}, {"name": "reports", "mode": "rw"}]},
            "bash",  # two volumes keep their order
            {"volumes": [{"name": "archive", "mode": "ro"}, {"name": "reports", "mode": "rw"}]},
        ),
    ],
)
async def test_validate_capabilities_accepts_and_normalises(
    engine: AsyncEngine, raw: object, job_type: str, expected: dict[str, Any]
) -> None:
    await add_volumes(engine, **CATALOG)
    async with engine.begin() as conn:
        assert await validate_capabilities(conn, raw, job_type=job_type) == expected


@pytest.mark.parametrize(
    ("raw", "job_type", "message"),
    [
        ([], "bash", "capabilities: must be an object"),  # a list
        (None, "bash", "capabilities: must be an object"),  # null
        ("reports", "bash", "capabilities: must be an object"),  # a string
        ({"egress": ["example.com"]}, "bash", "capabilities.egress: is not supported yet"),
        ({"network": True}, "bash", "capabilities.network: is not a known capability"),
        (
            {**declaring("reports"), "egress": []},  # egress beside valid volumes
            "bash",
            "capabilities.egress: is not supported yet",
        ),
        ({"volumes": "reports"}, "bash", "capabilities.volumes: must be a list"),  # a string
        ({"volumes": None}, "bash", "capabilities.volumes: must be a list"),  # null
        (
            {"volumes": ["reports"]},  # a bare name
            "bash",
            "capabilities.volumes[0]: must be an object with name and mode",
        ),
        (
            {"volumes": [{"name": "reports"}]},  # no mode
            "bash",
            'capabilities.volumes[0].mode: must be "ro" or "rw"',
        ),
        (
            declaring("reports", mode="RW"),  # modes are lower-case
            "bash",
            'capabilities.volumes[0].mode: must be "ro" or "rw"',
        ),
        (
            {"volumes": [{"name": "reports", "mode": ["rw"]}]},  # not a string
            "bash",
            'capabilities.volumes[0].mode: must be "ro" or "rw"',
        ),
        ({"volumes": [{"mode": "ro"}]}, "bash", "capabilities.volumes[0].name is required"),
        (
            {"volumes": [{"name": 5, "mode": "ro"}]},  # not a string
            "bash",
            "capabilities.volumes[0].name is required",
        ),
        (
            {"volumes": [{"name": "reports", "mode": "ro", "path": "/x"}]},  # an extra field
            "bash",
            "capabilities.volumes[0].path: is not a known field",
        ),
        (
            declaring("reports", "missing"),  # not in the catalog
            "bash",
            'capabilities.volumes[1].name: unknown script volume "missing"',
        ),
        (
            declaring("archive", mode="rw"),  # above an ro ceiling
            "bash",
            'capabilities.volumes[0].mode: script volume "archive" allows at most "ro"',
        ),
        (
            {"volumes": [{"name": "reports", "mode": "ro"}, {"name": "reports", "mode": "rw"}]},
            "bash",  # the same volume twice, even with different modes
            'capabilities.volumes[1]: script volume "reports" is declared more than once',
        ),
        (declaring("reports"), "http", "capabilities: must be empty on an HTTP job"),
    ],
)
async def test_validate_capabilities_refuses(
    engine: AsyncEngine, raw: object, job_type: str, message: str
) -> None:
    await add_volumes(engine, **CATALOG)
    async with engine.begin() as conn:
        with pytest.raises(InvalidInput) as refused:
            await validate_capabilities(conn, raw, job_type=job_type)
    assert (refused.value.status_code, refused.value.message) == (400, message)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ({}, ({}, False)),  # nothing declared
        ({"volumes": []}, ({}, False)),  # nothing declared, normalised
        (declaring("reports"), (declaring("reports"), False)),  # a readable declaration
        (declaring("gone"), (declaring("gone"), False)),  # the catalog is not consulted
        ({"volumes": "reports"}, ({}, True)),  # not a list
        ({"egress": []}, ({}, True)),  # an unsupported capability
        ([], ({}, True)),  # not an object
        (declaring("reports", mode="write"), ({}, True)),  # an unknown mode
    ],
)
def test_read_capabilities_flags_an_unreadable_declaration(
    stored: object, expected: tuple[dict[str, Any], bool]
) -> None:
    assert read_capabilities(stored) == expected
