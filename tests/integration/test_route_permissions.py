"""Every `/api` route and `/prometheus/metrics` declare exactly one access rule: the spec's.

The static checks read the `Authorize` dependency off each registered route, so a new
route without an entry in EXPECTED fails here. The behavioural checks call the routes.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, add_user, client_for, sign_in_directly
from tests.support.api import FORBIDDEN, PASSWORD_CHANGE_REQUIRED, READ_ONLY_KEYS, UNKNOWN_ID
from zilean.api.access import Authorize, authorizers

ALARM_BODY = {"metric": "failed", "threshold": 5, "window_minutes": 30}
TARGET_BODY = {"name": "ops", "kind": "email", "address": "ops@example.com"}

# The spec's table: (method, path) -> the permission it needs, "signed-in" or "public".
EXPECTED: dict[tuple[str, str], str] = {
    ("GET", "/api/meta"): "public",
    ("GET", "/api/account/me"): "signed-in",
    ("POST", "/api/account/change-password"): "signed-in",
    ("POST", "/api/account/sign-out-others"): "signed-in",
    ("GET", "/api/users"): "users:read",
    ("POST", "/api/users"): "users:write",
    ("PATCH", "/api/users/{user_id}"): "users:write",
    ("POST", "/api/users/{user_id}/reset-password"): "users:write",
    ("DELETE", "/api/users/{user_id}"): "users:write",
    ("GET", "/api/roles"): "roles:read",
    ("GET", "/api/roles/permissions"): "roles:read",
    ("POST", "/api/roles"): "roles:write",
    ("PATCH", "/api/roles/{role_id}"): "roles:write",
    ("DELETE", "/api/roles/{role_id}"): "roles:write",
    ("POST", "/api/invites"): "invites:create",
    ("GET", "/api/invites"): "invites:create",
    ("POST", "/api/invites/{user_id}/resend"): "invites:create",
    ("GET", "/api/audit-log"): "audit:read",
    ("GET", "/api/settings/audit"): "audit:read",
    ("PUT", "/api/settings/audit"): "audit:write",
    ("GET", "/api/settings/queue-jobs"): "settings:queue_jobs",
    ("PUT", "/api/settings/queue-jobs"): "settings:queue_jobs",
    ("GET", "/api/queue/jobs"): "jobs:write",
    ("GET", "/api/queue/jobs/{queue_job_id}"): "jobs:write",
    ("POST", "/api/queue/jobs/{queue_job_id}/retry"): "jobs:write",
    ("POST", "/api/queue/jobs/{queue_job_id}/cancel"): "jobs:write",
    ("DELETE", "/api/queue/jobs/{queue_job_id}"): "jobs:write",
    ("GET", "/api/jobs"): "jobs:read",
    ("POST", "/api/jobs"): "jobs:write",
    ("GET", "/api/jobs/{job_id}"): "jobs:read",
    ("PUT", "/api/jobs/{job_id}"): "jobs:write",
    ("PATCH", "/api/jobs/{job_id}"): "jobs:write",  # beyond the spec: a JSON merge patch
    ("DELETE", "/api/jobs/{job_id}"): "jobs:write",
    ("POST", "/api/jobs/{job_id}/enable"): "jobs:write",
    ("POST", "/api/jobs/{job_id}/disable"): "jobs:write",
    ("POST", "/api/jobs/enable-all"): "jobs:write",
    ("POST", "/api/jobs/disable-all"): "jobs:write",
    ("GET", "/api/jobs/{job_id}/webhook"): "jobs:read",
    ("POST", "/api/jobs/{job_id}/webhook/rotate"): "jobs:write",
    ("POST", "/api/jobs/{job_id}/run"): "jobs:write",
    ("GET", "/api/jobs/{job_id}/calls"): "jobs:read",
    ("GET", "/api/jobs/heartbeats"): "jobs:read",
    ("GET", "/api/jobs/{job_id}/activity"): "jobs:read",
    ("GET", "/api/metrics/live"): "metrics:read",
    ("GET", "/api/metrics/history"): "metrics:read",
    ("GET", "/api/system/health"): "metrics:read",
    ("GET", "/prometheus/metrics"): "metrics:read",
    ("GET", "/api/scripts/liveness"): "jobs:script",
    ("GET", "/api/script-workers/status"): "scriptvolumes:read",
    ("GET", "/api/jobs/import/template"): "jobs:write",
    ("POST", "/api/jobs/import"): "jobs:write",
    ("GET", "/api/jobs/export"): "jobs:read",
    ("GET", "/api/groups/disabled"): "jobs:read",
    ("POST", "/api/groups/enable"): "jobs:write",
    ("POST", "/api/groups/disable"): "jobs:write",
    ("POST", "/api/schedules/preview"): "jobs:read",
    ("POST", "/api/tokens"): "signed-in",
    ("GET", "/api/tokens"): "signed-in",
    ("DELETE", "/api/tokens/{token_id}"): "signed-in",
    ("GET", "/api/global-variables"): "globalvars:read",
    ("POST", "/api/global-variables"): "globalvars:write",
    ("PUT", "/api/global-variables/{variable_id}"): "globalvars:write",
    ("DELETE", "/api/global-variables/{variable_id}"): "globalvars:write",
    ("GET", "/api/script-volumes"): "scriptvolumes:read",
    ("GET", "/api/settings/mcp"): "settings:mcp",
    ("PUT", "/api/settings/mcp"): "settings:mcp",
    ("GET", "/api/mcp-tokens"): "settings:mcp",
    ("POST", "/api/mcp-tokens"): "settings:mcp",
    ("DELETE", "/api/mcp-tokens/{mcp_token_id}"): "settings:mcp",
    ("GET", "/api/jobs/{job_id}/alarms"): "jobs:read",
    ("GET", "/api/jobs/{job_id}/events"): "jobs:read",
    ("POST", "/api/jobs/{job_id}/alarms"): "notify:write",
    ("PUT", "/api/jobs/{job_id}/alarms/{alarm_id}"): "notify:write",
    ("DELETE", "/api/jobs/{job_id}/alarms/{alarm_id}"): "notify:write",
    ("GET", "/api/notify/targets"): "notify_settings:read",
    ("POST", "/api/notify/targets"): "notify_settings:write",
    ("PUT", "/api/notify/targets/{target_id}"): "notify_settings:write",
    ("DELETE", "/api/notify/targets/{target_id}"): "notify_settings:write",
    ("POST", "/api/notify/targets/{target_id}/test"): "notify_settings:write",
    ("GET", "/api/settings/apprise"): "notify_settings:read",
    ("PUT", "/api/settings/apprise"): "notify_settings:write",
    ("POST", "/api/settings/apprise/test"): "notify_settings:write",
    ("GET", "/api/notify/thresholds"): "notify_settings:read",
    ("PUT", "/api/notify/thresholds/{service_name}"): "notify_settings:write",
    ("GET", "/api/settings/smtp"): "settings:smtp",
    ("PUT", "/api/settings/smtp"): "settings:smtp",
    ("POST", "/api/settings/smtp/test"): "settings:smtp",
    ("POST", "/api/script-volumes"): "scriptvolumes:write",
    ("PUT", "/api/script-volumes/{name}"): "scriptvolumes:write",
    ("DELETE", "/api/script-volumes/{name}"): "scriptvolumes:write",
}
# The only routes a user who must change their password may still call.
PASSWORD_CHANGE_ROUTES = {
    ("GET", "/api/account/me"),
    ("POST", "/api/account/change-password"),
    ("POST", "/api/account/sign-out-others"),
}

ROLE_BODY = {"name": "Deployers", "permissions": []}
VARIABLE_BODY = {"name": "REGION", "value": "eu", "is_secret": False, "allow_in_scripts": False}
VOLUME_BODY = {"name": "reports", "max_mode": "rw", "description": ""}
# A valid-shaped request for every route that needs a permission Read-Only lacks.
JOB_BODY = {"name": "j", "url": "https://example.com", "cron_expression": "* * * * *"}
CAROL_LACKS = [
    # jobs:script
    pytest.param("GET", "/api/scripts/liveness", None),
    # jobs:write
    pytest.param("GET", "/api/jobs/import/template", None),
    # jobs:write (the permission is checked before the upload is read)
    pytest.param("POST", "/api/jobs/import", None),
    # jobs:write
    pytest.param("POST", "/api/jobs", JOB_BODY),
    # jobs:write
    pytest.param("PUT", "/api/jobs/{job_id}", JOB_BODY),
    # jobs:write
    pytest.param("PATCH", "/api/jobs/{job_id}", {"name": "renamed"}),
    # jobs:write
    pytest.param("DELETE", "/api/jobs/{job_id}", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/{job_id}/enable", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/{job_id}/disable", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/enable-all", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/disable-all", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/{job_id}/webhook/rotate", None),
    # jobs:write
    pytest.param("POST", "/api/jobs/{job_id}/run", None),
    # jobs:write
    pytest.param("GET", "/api/queue/jobs", None),
    # jobs:write
    pytest.param("GET", "/api/queue/jobs/{queue_job_id}", None),
    # jobs:write
    pytest.param("POST", "/api/queue/jobs/{queue_job_id}/retry", None),
    # jobs:write
    pytest.param("POST", "/api/queue/jobs/{queue_job_id}/cancel", None),
    # jobs:write
    pytest.param("DELETE", "/api/queue/jobs/{queue_job_id}", None),
    # jobs:write
    pytest.param("POST", "/api/groups/enable", {"group_name": "g"}),
    # jobs:write
    pytest.param("POST", "/api/groups/disable", {"group_name": "g"}),
    # users:write
    pytest.param("POST", "/api/users", {"email": "e@example.com", "role_ids": [UNKNOWN_ID]}),
    # users:write
    pytest.param("PATCH", "/api/users/{user_id}", {"status": "disabled"}),
    # users:write
    pytest.param("POST", "/api/users/{user_id}/reset-password", None),
    # users:write
    pytest.param("DELETE", "/api/users/{user_id}", None),
    # roles:write
    pytest.param("POST", "/api/roles", ROLE_BODY),
    # roles:write
    pytest.param("PATCH", "/api/roles/{role_id}", ROLE_BODY),
    # roles:write
    pytest.param("DELETE", "/api/roles/{role_id}", None),
    # invites:create
    pytest.param("POST", "/api/invites", {"email": "e@example.com", "role_ids": [UNKNOWN_ID]}),
    # invites:create
    pytest.param("GET", "/api/invites", None),
    # invites:create
    pytest.param("POST", "/api/invites/{user_id}/resend", None),
    # audit:read
    pytest.param("GET", "/api/audit-log", None),
    # audit:read
    pytest.param("GET", "/api/settings/audit", None),
    # audit:write
    pytest.param("PUT", "/api/settings/audit", {"audit_retention_days": 30}),
    # settings:queue_jobs
    pytest.param("GET", "/api/settings/queue-jobs", None),
    # settings:queue_jobs
    pytest.param("PUT", "/api/settings/queue-jobs", {"queue_job_retention_days": 30}),
    # globalvars:write
    pytest.param("POST", "/api/global-variables", VARIABLE_BODY),
    # globalvars:write
    pytest.param("PUT", "/api/global-variables/{variable_id}", VARIABLE_BODY),
    # globalvars:write
    pytest.param("DELETE", "/api/global-variables/{variable_id}", None),
    # scriptvolumes:write
    pytest.param("POST", "/api/script-volumes", VOLUME_BODY),
    # scriptvolumes:write
    pytest.param("PUT", "/api/script-volumes/{name}", VOLUME_BODY),
    # scriptvolumes:write
    pytest.param("DELETE", "/api/script-volumes/{name}", None),
    # settings:mcp
    pytest.param("GET", "/api/settings/mcp", None),
    # settings:mcp
    pytest.param("PUT", "/api/settings/mcp", {"enabled": True}),
    # settings:mcp
    pytest.param("GET", "/api/mcp-tokens", None),
    # settings:mcp
    pytest.param("POST", "/api/mcp-tokens", {"name": "agent", "role_id": UNKNOWN_ID}),
    # settings:mcp
    pytest.param("DELETE", "/api/mcp-tokens/{mcp_token_id}", None),
    # notify:write
    pytest.param("POST", "/api/jobs/{job_id}/alarms", ALARM_BODY),
    pytest.param("PUT", "/api/jobs/{job_id}/alarms/{alarm_id}", ALARM_BODY),
    pytest.param("DELETE", "/api/jobs/{job_id}/alarms/{alarm_id}", None),
    # notify_settings:read and :write
    pytest.param("GET", "/api/notify/targets", None),
    pytest.param("POST", "/api/notify/targets", TARGET_BODY),
    pytest.param("PUT", "/api/notify/targets/{target_id}", TARGET_BODY),
    pytest.param("DELETE", "/api/notify/targets/{target_id}", None),
    pytest.param("POST", "/api/notify/targets/{target_id}/test", None),
    pytest.param("GET", "/api/settings/apprise", None),
    pytest.param("PUT", "/api/settings/apprise", {"enabled": False}),
    pytest.param("POST", "/api/settings/apprise/test", {"server_url": "http://a/notify"}),
    pytest.param("GET", "/api/notify/thresholds", None),
    pytest.param("PUT", "/api/notify/thresholds/{service_name}", {"cpu_percent": 1}),
    # settings:smtp
    pytest.param("GET", "/api/settings/smtp", None),
    pytest.param("PUT", "/api/settings/smtp", {"enabled": False}),
    pytest.param("POST", "/api/settings/smtp/test", {"to": "a@example.com"}),
]


def api_routes(app: FastAPI) -> dict[tuple[str, str], list[Authorize]]:
    """Every registered `/api` endpoint, by (method, path), with its `Authorize` dependencies.

    Since FastAPI 0.137 `app.routes` holds included routers unflattened;
    `iter_route_contexts` yields one context per endpoint with its full path.
    """
    found: dict[tuple[str, str], list[Authorize]] = {}
    for context in iter_route_contexts(app.routes):
        if not isinstance(context.original_route, APIRoute):
            continue
        path = context.path
        assert path is not None
        if not path.startswith(("/api", "/prometheus")):
            continue
        for method in context.methods or ():
            assert (method, path) not in found, f"{method} {path} is registered twice"
            found[(method, path)] = list(authorizers(context.dependant))
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", UNKNOWN_ID, path)


async def send(client: Any, method: str, path: str, body: object = None) -> Any:
    if body is None:
        return await client.request(method, concrete(path))
    return await client.request(method, concrete(path), json=body)


def test_the_registered_api_routes_are_exactly_the_specified_ones(core_app: FastAPI) -> None:
    assert set(api_routes(core_app)) == set(EXPECTED)


def test_every_api_route_declares_exactly_one_access_rule(core_app: FastAPI) -> None:
    counts = {key: len(found) for key, found in api_routes(core_app).items()}
    assert counts == dict.fromkeys(counts, 1)


def test_every_api_route_declares_the_specified_access(core_app: FastAPI) -> None:
    declared = {key: found[0].access.describe() for key, found in api_routes(core_app).items()}
    assert declared == EXPECTED


def test_only_the_account_routes_allow_a_pending_password_change(core_app: FastAPI) -> None:
    allowing = {
        key for key, found in api_routes(core_app).items() if found[0].access.allow_password_change
    }
    assert allowing == PASSWORD_CHANGE_ROUTES


def test_the_refusal_table_covers_every_route_read_only_cannot_use() -> None:
    needing_more = {
        key for key, access in EXPECTED.items() if ":" in access and access not in READ_ONLY_KEYS
    }
    assert {(p.values[0], p.values[1]) for p in CAROL_LACKS} == needing_more


@pytest.mark.parametrize(("method", "path", "body"), CAROL_LACKS)
async def test_it_refuses_read_only_a_route_needing_a_permission_she_lacks(
    core_app: FastAPI, cast: Cast, method: str, path: str, body: object
) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        response = await send(carol, method, path, body)
    assert (response.status_code, response.json()) == (403, FORBIDDEN)


async def test_it_checks_the_permission_before_validating_the_body(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        response = await carol.post("/api/roles", json={"unexpected": True})
    assert (response.status_code, response.json()) == (403, FORBIDDEN)


async def test_it_lets_read_only_use_the_routes_her_permissions_cover(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        statuses = {
            key: (await send(carol, *key)).status_code
            for key, access in EXPECTED.items()
            if access in READ_ONLY_KEYS and key[0] == "GET"
        }
    # Routes naming a placeholder id answer 404: past the permission check, nothing there.
    assert statuses == {key: 404 if "{" in key[1] else 200 for key in statuses}
    assert set(statuses) == {
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs/export"),
        ("GET", "/api/jobs/{job_id}"),
        ("GET", "/api/jobs/{job_id}/webhook"),
        ("GET", "/api/jobs/{job_id}/calls"),
        ("GET", "/api/jobs/heartbeats"),
        ("GET", "/api/jobs/{job_id}/activity"),
        ("GET", "/api/jobs/{job_id}/alarms"),
        ("GET", "/api/jobs/{job_id}/events"),
        ("GET", "/api/metrics/live"),
        ("GET", "/api/metrics/history"),
        ("GET", "/api/system/health"),
        ("GET", "/prometheus/metrics"),
        ("GET", "/api/script-workers/status"),
        ("GET", "/api/groups/disabled"),
        ("GET", "/api/users"),
        ("GET", "/api/roles"),
        ("GET", "/api/roles/permissions"),
        ("GET", "/api/global-variables"),
        ("GET", "/api/script-volumes"),
    }


async def test_it_sends_a_caller_without_a_session_to_the_login_page_from_every_private_route(
    core_app: FastAPI, cast: Cast
) -> None:
    answers = {}
    async with client_for(core_app) as anonymous:
        for key, access in EXPECTED.items():
            if access != "public":
                response = await send(anonymous, *key, {})
                answers[key] = (response.status_code, response.headers.get("location"))
    assert answers == dict.fromkeys(answers, (302, "/login"))
    assert len(answers) == len(EXPECTED) - 1


async def test_it_refuses_every_other_route_while_a_password_change_is_pending(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    # A Super Admin, so nothing but the pending password change can refuse them.
    pending = await add_user(
        engine,
        "pending@example.com",
        [cast.role_ids["super_admin"]],
        super_admin=True,
        must_change_password=True,
    )
    session = await sign_in_directly(engine, pending)
    refused = {}
    async with client_for(core_app, session) as client:
        for key, access in EXPECTED.items():
            if access != "public" and key not in PASSWORD_CHANGE_ROUTES:
                response = await send(client, *key, {})
                refused[key] = (response.status_code, response.json())
        me = await client.get("/api/account/me")
    assert refused == dict.fromkeys(refused, (403, PASSWORD_CHANGE_REQUIRED))
    assert me.status_code == 200
    assert me.json()["must_change_password"] is True
