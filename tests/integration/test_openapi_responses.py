"""The OpenAPI document describes every response body, so a typed client can be generated.

Checked for the account, user, role, invite, token, audit, settings, global variable,
script volume, group, activity and monitoring routes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_activity import add_stats
from tests.support.actors import Cast, client_for
from tests.support.jobs import create
from zilean.api.routes import (
    account,
    activity,
    audit,
    global_variables,
    groups,
    invites,
    monitoring,
    queue_settings,
    roles,
    script_volumes,
    tokens,
    users,
)

MODULES = (
    account, activity, audit, global_variables, groups, invites, monitoring, queue_settings,
    roles, script_volumes, tokens, users,
)  # fmt: skip
# Response fields whose names suggest a credential. Each is either a flag, a hint, or a
# value the API shows exactly once (a temporary password, a new token's secret); `token`
# is the metadata object beside that secret. A new name here needs a reason.
CREDENTIAL_LIKE = ("password", "secret", "token", "hash", "cipher", "api_key")
CREDENTIAL_FIELDS = {
    "must_change_password", "temp_password", "is_secret", "token", "secret", "token_hint",
}  # fmt: skip


async def openapi(app: FastAPI) -> dict[str, Any]:
    async with client_for(app) as client:
        response = await client.get("/api/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def routes() -> list[APIRoute]:
    found = [route for m in MODULES for route in m.router.routes if isinstance(route, APIRoute)]
    assert len(found) >= 40  # every module contributes; an empty list would pass anything
    return found


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


def problems(document: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    """Why `schema` fails to describe a body: an object needs properties, an array items."""
    schema = resolve(document, schema)
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        if not branches:
            return [f"{where}: only null"]
        return [p for b in branches for p in problems(document, b, where)]
    if schema.get("type") == "array":
        items = resolve(document, schema.get("items", {}))
        if items.get("type") in ("string", "integer", "number", "boolean"):
            return []
        return problems(document, items, f"{where}[]")
    if schema.get("type") == "object" and schema.get("properties"):
        if schema.get("additionalProperties") is not False:
            return [f"{where}: undeclared keys allowed"]
        return []
    return [f"{where}: no declared shape ({schema})"]


def response_schemas(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every 2xx JSON schema of these modules' routes, nested models included."""
    found: list[dict[str, Any]] = []
    for route in routes():
        for method in route.methods:
            answers = document["paths"][route.path][method.lower()]["responses"]
            for code, answer in answers.items():
                schema = answer.get("content", {}).get("application/json", {}).get("schema")
                if code.startswith("2") and schema:
                    found.append(schema)
    return found


def property_names(document: dict[str, Any], schema: dict[str, Any], seen: set[str]) -> set[str]:
    if "$ref" in schema:
        if schema["$ref"] in seen:
            return set()
        seen.add(schema["$ref"])
    schema = resolve(document, schema)
    names = set(schema.get("properties", {}))
    nested = [
        *schema.get("properties", {}).values(),
        *schema.get("anyOf", []),
        *([schema["items"]] if "items" in schema else []),
    ]
    for child in nested:
        names |= property_names(document, child, seen)
    return names


async def test_every_json_route_declares_the_shape_of_its_success_body(
    core_app: FastAPI,
) -> None:
    document = await openapi(core_app)
    failures: list[str] = []
    for route in routes():
        for method in route.methods:
            operation = document["paths"][route.path][method.lower()]
            where = f"{method} {route.path} ({operation['operationId']})"
            answers = {c: a for c, a in operation["responses"].items() if c.startswith("2")}
            if route.status_code == 204:
                assert list(answers) == ["204"], where
                assert "content" not in answers["204"], where
                continue
            schemas = [
                a["content"]["application/json"]["schema"]
                for a in answers.values()
                if "application/json" in a.get("content", {})
            ]
            if not schemas:
                failures.append(f"{where}: no JSON success body")
            for schema in schemas:
                failures += problems(document, schema, where)
    assert failures == []


async def test_no_response_model_carries_a_stored_credential(core_app: FastAPI) -> None:
    document = await openapi(core_app)
    seen: set[str] = set()
    names: set[str] = set()
    for schema in response_schemas(document):
        names |= property_names(document, schema, seen)
    assert len(names) > 50  # the walk reached the nested models
    suspicious = {name for name in names if any(part in name for part in CREDENTIAL_LIKE)}
    assert suspicious == CREDENTIAL_FIELDS


async def test_the_pre_encoded_heartbeats_body_matches_its_declared_model(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    """Heartbeats skip response validation (the body is encoded by hand), so check it here."""
    job = await create(core_app, cast.alice.session)
    await create(core_app, cast.alice.session, name="never-ran")
    await add_stats(engine, job["id"], minutes_ago=10, total=3, failed=1)  # settled: cached
    await add_stats(engine, job["id"], minutes_ago=0, total=2)  # the current minute: read live
    async with client_for(core_app, cast.carol.session) as client:
        for _ in range(2):  # the first read fills the heartbeat cache, the second joins it
            response = await client.get("/api/jobs/heartbeats", params={"since": "1h"})
            assert response.status_code == 200
            body = activity.Heartbeats.model_validate_json(response.content)
            assert sorted(sum(b.total for b in j.buckets) for j in body.jobs) == [0, 5]
