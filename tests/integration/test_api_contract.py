"""The API contract as a client meets it: strict input with one error style, the body
checks (JSON only, capped), `PATCH` as a JSON merge patch, who sees a job's notify
fields on every route that returns a job, and an OpenAPI document that validates and
describes every response."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from openapi_spec_validator import validate
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import audit_rows
from tests.support.jobs import BASE, create, fetch, session_with
from zilean.api.app import MAX_BODY_BYTES

MISSING: Any = object()  # drop the field from the body


def job_body(**changes: Any) -> dict[str, Any]:
    body = {**BASE, **changes}
    return {key: value for key, value in body.items() if value is not MISSING}


# fmt: off
STRICT_CASES = [
    ({"loop_enable": True}, 'unknown field "loop_enable"'),  # a typo is named, not ignored
    ({"auth_config": {"token": "t"}, "auth_type": "bearer", "colour": 1}, 'unknown field "colour"'),
    ({"loop_enabled": "yes"}, "loop_enabled: must be true or false"),  # not a JSON boolean
    ({"loop_enabled": 1}, "loop_enabled: must be true or false"),
    ({"enabled": "false"}, "enabled: must be true or false"),
    ({"pool_count": "2"}, "pool_count: must be an integer"),  # a numeric string
    ({"pool_count": 2.0}, "pool_count: must be an integer"),  # a float
    ({"pool_count": True}, "pool_count: must be an integer"),
    ({"retry_multiplier": "2"}, "retry_multiplier: must be a number"),
    ({"name": 7}, "name: must be a string"),
    ({"headers": {"X-Count": 1}}, "headers.X-Count: must be a string"),
    ({"notify_targets": ["1"]}, "notify_targets.0: must be an integer"),
    ({"script_args": "a b"}, "script_args: must be an array"),
    ({"query_params": []}, "query_params: must be a JSON object"),
    ({"run_at": "tomorrow", "schedule_type": "one_off"}, "run_at: must be an RFC 3339 timestamp"),
    ({"http_method": "FETCH"},
     "http_method: must be one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"),
    ({"pool_count": 0}, "pool_count: must be at least 1"),
    # A missing, empty or blank name gets the same words.
    ({"name": MISSING}, "name is required"),
    ({"name": ""}, "name is required"),
    ({"name": "   "}, "name is required"),
]
# fmt: on


@pytest.mark.parametrize(("changes", "message"), STRICT_CASES)
async def test_a_loose_value_is_refused_naming_its_field_and_nothing_is_stored(
    core_app: FastAPI, cast: Cast, changes: dict[str, Any], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post("/api/jobs", json=job_body(**changes))
        listed = (await alice.get("/api/jobs")).json()
    assert (response.status_code, response.json()) == (400, {"error": message})
    assert listed == []


async def test_the_read_only_fields_of_a_job_may_be_sent_back_unchanged(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    async with client_for(core_app, cast.alice.session) as alice:
        # The spec's recipe for an edit: read the job, change it, send all of it back.
        response = await alice.put(f"/api/jobs/{job['id']}", json={**job, "name": "renamed"})
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "renamed"


async def chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


# Valid JSON, but a lone surrogate is no text Postgres (or a script file) can hold.
LONE_SURROGATES = [
    ("/api/jobs", b'{"name": "a\\ud800", "url": "https://a.example/",'
                  b' "cron_expression": "@daily"}'),
    ("/api/jobs", b'{"name": "s", "job_type": "bash", "script_body": "\\ud800",'
                  b' "cron_expression": "@daily"}'),
    ("/api/global-variables", b'{"name": "G", "value": "\\udfff"}'),
]  # fmt: skip


async def test_a_body_that_is_not_json_or_too_large_gets_one_clear_message(
    core_app: FastAPI, cast: Cast
) -> None:
    oversized = b'{"name": "' + b"x" * MAX_BODY_BYTES + b'"}'
    async with client_for(core_app, cast.alice.session) as alice:
        malformed = await alice.post(
            "/api/jobs", content=b'{"name": x}', headers={"content-type": "application/json"}
        )
        as_text = await alice.post(
            "/api/jobs", content=b'{"name": "x"}', headers={"content-type": "text/plain"}
        )
        untyped = await alice.post("/api/jobs", content=b'{"name": "x"}')
        empty = await alice.post("/api/jobs", headers={"content-type": "application/json"})
        an_array = await alice.post("/api/jobs", json=[BASE])
        declared = await alice.post(
            "/api/jobs", content=oversized, headers={"content-type": "application/json"}
        )
        chunked = await alice.post(
            "/api/jobs", content=chunks(oversized), headers={"content-type": "application/json"}
        )
        lone_surrogates = [
            await alice.post(path, content=body, headers={"content-type": "application/json"})
            for path, body in LONE_SURROGATES
        ]
        listed = (await alice.get("/api/jobs")).json()
    assert (malformed.status_code, malformed.json()) == (
        400,
        {"error": "the request body is not valid JSON (Expecting value)"},
    )
    assert (as_text.status_code, as_text.json()) == (
        415,
        {"error": "Content-Type must be application/json (got 'text/plain')"},
    )
    assert (untyped.status_code, untyped.json()) == (
        415,
        {"error": "Content-Type must be application/json (got 'none')"},
    )
    assert (empty.status_code, empty.json()) == (400, {"error": "a JSON object body is required"})
    assert (an_array.status_code, an_array.json()) == (
        400,
        {"error": "the request body must be a JSON object"},
    )
    too_large = {"error": "the request body is larger than the 1 MiB limit"}
    assert (declared.status_code, declared.json()) == (413, too_large)
    assert (chunked.status_code, chunked.json()) == (413, too_large)
    assert [response.status_code for response in lone_surrogates] == [400, 400, 400]
    assert lone_surrogates[0].json() == {"error": "name: must be valid Unicode text"}
    assert listed == []


async def test_other_request_bodies_are_as_strict_as_a_jobs(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        role = await alice.post("/api/roles", json={"name": "Ops", "permission": ["jobs:read"]})
        user = await alice.post(
            "/api/users", json={"email": "e@example.com", "role_ids": [str(cast.role_ids["admin"])]}
        )
        status = await alice.patch(f"/api/users/{user.json()['user']['id']}", json={"status": 0})
        group = await alice.post("/api/groups/disable", json={"group_name": ["a"]})
    assert (role.status_code, role.json()) == (400, {"error": 'unknown field "permission"'})
    assert user.status_code == 201, user.text  # a UUID is read from its text
    assert (status.status_code, status.json()) == (400, {"error": "status: must be a string"})
    assert (group.status_code, group.json()) == (400, {"error": "group_name: must be a string"})


# --- PATCH -----------------------------------------------------------------------------


async def test_patch_changes_only_the_fields_given_and_audits_the_change(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(
        core_app,
        cast.alice.session,
        headers={"X-Keep": "1", "X-Drop": "2"},
        auth_type="bearer",
        auth_config={"token": "s3cret-token"},
        notify_on="failure",
        loop_enabled=True,
        loop_delay_ms=250,
    )
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/jobs/{job['id']}",
            json={"retry_max_attempts": 2, "headers": {"X-Drop": None}, "loop_delay_ms": None},
            headers={"content-type": "application/merge-patch+json"},
        )
    assert response.status_code == 200, response.text
    patched = response.json()
    assert patched["retry_max_attempts"] == 2
    assert patched["headers"] == {"X-Keep": "1"}  # null removes one member of an object
    assert patched["loop_delay_ms"] == 1000  # null restores the default
    unchanged = {"retry_max_attempts", "headers", "loop_delay_ms", "updated_at", "next_run_at"}
    assert {k: v for k, v in patched.items() if k not in unchanged} == {
        k: v for k, v in job.items() if k not in unchanged
    }
    assert patched["has_auth_secret"] is True  # the secret was not sent and is kept
    entry = (await audit_rows(engine))[-1]
    assert (entry["action"], entry["resource_id"]) == ("job.update", job["id"])
    assert "s3cret-token" not in str(entry)


async def test_patch_is_validated_as_put_is_and_a_refused_patch_changes_nothing(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    path = f"/api/jobs/{job['id']}"
    async with client_for(core_app, cast.alice.session) as alice:
        typo = await alice.patch(path, json={"loop_enable": True})
        loose = await alice.patch(path, json={"pool_count": "3"})
        cross_field = await alice.patch(path, json={"url": ""})
        job_type = await alice.patch(path, json={"job_type": "bash", "script_body": "echo"})
        no_name = await alice.patch(path, json={"name": None})
        not_an_object = await alice.patch(path, json=["name"])
        unknown = await alice.patch(
            "/api/jobs/00000000-0000-4000-8000-000000000000", json={"name": "x"}
        )
    assert (typo.status_code, typo.json()) == (400, {"error": 'unknown field "loop_enable"'})
    assert (loose.status_code, loose.json()) == (400, {"error": "pool_count: must be an integer"})
    assert (cross_field.status_code, cross_field.json()) == (
        400,
        {"error": "url is required for HTTP jobs"},
    )
    assert job_type.status_code == 409, job_type.text
    assert (no_name.status_code, no_name.json()) == (400, {"error": "name is required"})
    assert not_an_object.status_code == 400
    assert (unknown.status_code, unknown.json()) == (404, {"error": "job not found"})
    assert await fetch(core_app, cast.alice.session, job["id"]) == job


async def test_patch_of_notify_fields_needs_notify_write_as_put_does(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(core_app, cast.alice.session, notify_on="failure")
    writer = await session_with(core_app, engine, cast, "wes", ["jobs:read", "jobs:write"])
    async with client_for(core_app, writer) as wes:
        response = await wes.patch(f"/api/jobs/{job['id']}", json={"notify_on": "both"})
    assert response.status_code == 200, response.text
    assert (await fetch(core_app, cast.alice.session, job["id"]))["notify_on"] == "failure"


# --- who sees the notify fields --------------------------------------------------------

NOTIFY_KEYS = {
    "notify_on",
    "notify_all_targets",
    "notify_targets",
    "notify_after_failures",
    "notify_reminder_minutes",
}


async def test_every_route_that_returns_a_job_hides_notify_fields_without_notify_read(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    """The caller may write jobs but not read their notify config: each route's job (or
    jobs) leaves those fields out, and the same routes show them to alice."""
    writer = await session_with(core_app, engine, cast, "wes", ["jobs:read", "jobs:write"])
    job = await create(core_app, cast.alice.session, notify_on="failure")
    one = "/api/jobs/{job_id}"
    calls = [
        ("GET", "/api/jobs", None),
        ("GET", one, None),
        ("POST", "/api/jobs", {**BASE, "name": "another"}),
        ("PUT", one, {**BASE, "name": "replaced"}),
        ("PATCH", one, {"name": "patched"}),
        ("POST", one + "/disable", None),
        ("POST", one + "/enable", None),
    ]
    job_routes = {
        (method.upper(), route)
        for route, item in core_app.openapi()["paths"].items()
        for method, operation in item.items()
        if _returns_job(operation)
    }
    called = {(method, route) for method, route, _ in calls}
    assert called == job_routes, "a route returning a job is missing from this test"
    for session, sees_notify in ((writer, False), (cast.alice.session, True)):
        async with client_for(core_app, session) as client:
            for method, route, body in calls:
                url = route.replace("{job_id}", job["id"])
                if (method, route) == ("POST", "/api/jobs"):
                    body = {**BASE, "name": f"another, notify shown: {sees_notify}"}
                response = await client.request(method, url, json=body)
                assert response.status_code in (200, 201), (method, url, response.text)
                payload = response.json()
                for shown in payload if isinstance(payload, list) else [payload]:
                    assert (set(shown) >= NOTIFY_KEYS) is sees_notify, (method, url)
                    assert not (NOTIFY_KEYS & set(shown)) or sees_notify, (method, url)


def _returns_job(operation: dict[str, Any]) -> bool:
    for response in operation.get("responses", {}).values():
        schema = response.get("content", {}).get("application/json", {}).get("schema", {})
        ref = schema.get("$ref") or schema.get("items", {}).get("$ref", "")
        if ref.endswith("/JobView"):
            return True
    return False


# --- the OpenAPI document --------------------------------------------------------------

NOT_JSON = {
    "download_job_import_template",
    "export_jobs",
    "import_jobs",
    "get_prometheus_metrics",
}


async def test_the_openapi_document_validates_and_describes_every_response(
    core_app: FastAPI,
) -> None:
    async with client_for(core_app) as anonymous:
        response = await anonymous.get("/api/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    validate(schema)  # raises on an invalid OpenAPI 3.1 document
    operations = [operation for item in schema["paths"].values() for operation in item.values()]
    ids = [operation["operationId"] for operation in operations]
    assert len(ids) == len(set(ids)), "operation ids must be unique"
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    for operation in operations:
        responses = operation["responses"]
        name = operation["operationId"]
        assert "422" not in responses, name  # we answer 400, in our own shape
        assert responses["4XX"]["content"]["application/json"]["schema"] == error_ref, name
        success = [code for code in responses if code.startswith("2")]
        assert success, name
        if name in NOT_JSON or success == ["204"]:
            continue
        body = responses[success[0]]["content"]["application/json"]["schema"]
        assert body, f"{name} does not describe its response"
    assert schema["components"]["schemas"]["ErrorBody"]["required"] == ["error"]
