"""The MCP endpoint, driven by the official MCP client over streamable HTTP against the
real mcp app on loopback: who gets in, which tools each role sees, what every tool
answers, and that every write is audited under the token's own service account."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import UNKNOWN_ID, audit_rows, create_role
from tests.support.attempts import attempts, worker_for
from tests.support.attempts import run_now as api_run_now
from tests.support.jobs import FUTURE, create
from tests.support.mcp import (
    call,
    error_text,
    issue_token,
    mcp_server,
    mcp_session,
    payload,
    protocol_error,
    raw_post,
    refusal,
    switch_mcp,
    tool_names,
)
from tests.support.monitoring import eventually, insert_sample
from tests.support.target import HttpTarget, hanging_target
from zilean.auth.sessions import SESSION_COOKIE
from zilean.config import Service
from zilean.db.tables import mcp_tokens

READ_TOOLS = ["zilean_list_jobs", "zilean_get_job", "zilean_job_activity", "zilean_recent_calls"]
WRITE_TOOLS = ["zilean_enable_job", "zilean_disable_job", "zilean_run_job"]
ALL_TOOLS = [*READ_TOOLS, "zilean_worker_metrics", "zilean_audit_log", *WRITE_TOOLS]
REFUSED = "invalid or expired token"
DISABLED = "the MCP endpoint is disabled; enable it under Settings, MCP"
# What a job may hold that no tool result may show.
AUTH_SECRET = "s3cr3t-bearer-value"
HEADER_SECRET = "header-credential-9f2"
URL_PASSWORD = "url-pa55word"
QUERY_SECRET = "query-key-77"
BODY_SECRET = "body-password-31"


@pytest.fixture
def mcp(database_url: str) -> Iterator[str]:
    with mcp_server(database_url) as base:
        yield base


@pytest.fixture
async def enabled(core_app: FastAPI, cast: Cast) -> None:
    await switch_mcp(core_app, cast.alice.session, True)


async def token_for(core: FastAPI, cast: Cast, role: str, **options: Any) -> dict[str, Any]:
    return await issue_token(core, cast.alice.session, cast.role_ids[role], **options)


def entries_by(rows: list[dict[str, Any]], account_id: str) -> list[dict[str, Any]]:
    return [row for row in rows if str(row["actor_user_id"]) == account_id]


# Who gets in.


async def test_it_answers_healthz_without_a_token_even_while_disabled(mcp: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{mcp}/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_it_answers_503_to_everyone_while_disabled(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    token = (await token_for(core_app, cast, "admin"))["token"]
    assert await refusal(mcp, Authorization=f"Bearer {token}") == DISABLED
    assert await refusal(mcp) == DISABLED
    response = await raw_post(mcp, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 503
    assert response.json()["error"]["message"] == DISABLED
    # Switched on, the same token gets in at its next request; switched off, out again.
    await switch_mcp(core_app, cast.alice.session, True)
    assert "zilean_list_jobs" in await tool_names(mcp, token)
    await switch_mcp(core_app, cast.alice.session, False)
    assert (await raw_post(mcp, {"Authorization": f"Bearer {token}"})).status_code == 503


@pytest.mark.usefixtures("enabled")
async def test_it_answers_401_without_a_valid_bearer_token(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    revoked = await token_for(core_app, cast, "admin", name="revoked")
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.delete(f"/api/mcp-tokens/{revoked['id']}")).status_code == 204
    expired = await token_for(core_app, cast, "admin", name="expired", expires_in="30d")
    async with engine.begin() as conn:
        await conn.execute(
            update(mcp_tokens)
            .where(mcp_tokens.c.name == "expired")
            .values(expires_at=func.now() - timedelta(seconds=1))
        )
    cases = {
        "missing": {},
        "unknown": {"Authorization": "Bearer zmcp_not-a-token"},
        "empty": {"Authorization": "Bearer"},
        "revoked": {"Authorization": f"Bearer {revoked['token']}"},
        "expired": {"Authorization": f"Bearer {expired['token']}"},
        "another scheme": {"Authorization": f"Basic {expired['token']}"},
        # A signed-in browser's session is no way in: tokens only.
        "session cookie": {"Cookie": f"{SESSION_COOKIE}={cast.alice.session}"},
    }
    answers = {}
    for case, headers in cases.items():
        response = await raw_post(mcp, headers)
        answers[case] = (
            response.status_code,
            response.json()["error"]["message"],
            response.headers.get("www-authenticate"),
            await refusal(mcp, **headers),
        )
    assert answers == dict.fromkeys(cases, (401, REFUSED, 'Bearer realm="zilean-mcp"', REFUSED))


@pytest.mark.usefixtures("enabled")
async def test_an_api_token_is_not_an_mcp_token(mcp: str, core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        created = await bob.post(
            "/api/tokens", json={"name": "ci", "role_id": str(cast.role_ids["admin"])}
        )
    assert await refusal(mcp, Authorization=f"Bearer {created.json()['secret']}") == REFUSED


@pytest.mark.usefixtures("enabled")
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28", "auto"])
async def test_it_serves_both_protocol_eras(
    mcp: str, core_app: FastAPI, cast: Cast, mode: str
) -> None:
    # `ClientSession` (above) opens with the initialize handshake; the SDK's `Client` can
    # also speak the handshake-free 2026-07-28 protocol, which newer clients will use.
    job = await create(core_app, cast.alice.session)
    token = (await token_for(core_app, cast, "read_only"))["token"]
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(f"{mcp}/mcp", http_client=http), mode=mode) as client,
    ):
        listed = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("zilean_list_jobs", {})
    assert listed == [*READ_TOOLS, "zilean_worker_metrics"]
    assert [entry["id"] for entry in payload(result)["jobs"]] == [job["id"]]


# Which tools a token sees.


@pytest.mark.usefixtures("enabled")
async def test_the_tool_list_is_exactly_what_the_tokens_role_allows(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    jobs_only = await create_role(core_app, cast.alice.session, "Job readers", ["jobs:read"])
    operators = await create_role(
        core_app, cast.alice.session, "Operators", ["jobs:read", "jobs:write", "audit:read"]
    )
    nothing = await create_role(core_app, cast.alice.session, "Nobody", [])
    tokens = {
        "admin": (await token_for(core_app, cast, "admin"))["token"],
        "read_only": (await token_for(core_app, cast, "read_only"))["token"],
        "jobs_only": (await issue_token(core_app, cast.alice.session, jobs_only))["token"],
        "operators": (await issue_token(core_app, cast.alice.session, operators))["token"],
        "nothing": (await issue_token(core_app, cast.alice.session, nothing))["token"],
    }
    listed = {name: await tool_names(mcp, token) for name, token in tokens.items()}
    assert listed == {
        "admin": ALL_TOOLS,
        "read_only": [*READ_TOOLS, "zilean_worker_metrics"],
        "jobs_only": READ_TOOLS,
        "operators": [*READ_TOOLS, "zilean_audit_log", *WRITE_TOOLS],
        "nothing": [],
    }


@pytest.mark.usefixtures("enabled")
async def test_every_tool_has_a_description_and_an_input_schema(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    token = (await token_for(core_app, cast, "admin"))["token"]
    async with mcp_session(mcp, token=token) as session:
        tools = (await session.list_tools()).tools
    for tool in tools:
        assert len(tool.description or "") > 80, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.input_schema["additionalProperties"] is False, tool.name
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (tool.name not in WRITE_TOOLS)
    schemas = {tool.name: tool.input_schema for tool in tools}
    for name in ["zilean_get_job", "zilean_job_activity", "zilean_recent_calls", *WRITE_TOOLS]:
        assert schemas[name]["required"] == ["job_id"], name
        assert schemas[name]["properties"]["job_id"]["format"] == "uuid", name
    assert set(schemas["zilean_list_jobs"]["properties"]) == {
        "group_name",
        "enabled",
        "job_type",
        "schedule_type",
        "name_contains",
    }
    assert "required" not in schemas["zilean_list_jobs"]


@pytest.mark.usefixtures("enabled")
async def test_a_tool_outside_the_role_cannot_be_called_either(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(core_app, cast.alice.session)
    token = (await token_for(core_app, cast, "read_only"))["token"]
    for name in ["zilean_run_job", "zilean_audit_log", "zilean_delete_job"]:
        refused = await protocol_error(call(mcp, token, name, job_id=job["id"]))
        assert refused.message == f"unknown tool: {name}"
    assert not [row for row in await audit_rows(engine) if row["action"] == "job.run"]


@pytest.mark.usefixtures("enabled")
async def test_a_role_change_counts_from_the_next_request(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    role = await create_role(core_app, cast.alice.session, "Growing", ["jobs:read"])
    token = (await issue_token(core_app, cast.alice.session, role))["token"]
    assert await tool_names(mcp, token) == READ_TOOLS
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.patch(
            f"/api/roles/{role}", json={"permissions": ["jobs:read", "metrics:read"]}
        )
    assert response.status_code == 200, response.text
    assert await tool_names(mcp, token) == [*READ_TOOLS, "zilean_worker_metrics"]


@pytest.mark.usefixtures("enabled")
async def test_using_a_token_records_when_it_was_last_used(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    issued = await token_for(core_app, cast, "admin")
    assert issued["last_used_at"] is None
    await tool_names(mcp, issued["token"])
    async with client_for(core_app, cast.alice.session) as alice:
        listed = (await alice.get("/api/mcp-tokens")).json()
    assert listed[0]["id"] == issued["id"]
    assert listed[0]["last_used_at"] is not None


# What the read tools answer.


def secret_job(**fields: Any) -> dict[str, Any]:
    return {
        "name": "billing-sync",
        "group_name": "billing",
        "url": f"https://sync:{URL_PASSWORD}@billing.example.com/run",
        "http_method": "POST",
        "headers": {"X-Api-Key": HEADER_SECRET, "Accept": "application/json"},
        "query_params": {"access_token": QUERY_SECRET, "page": "1"},
        "body": {"account": "acme", "password": BODY_SECRET},
        "auth_type": "bearer",
        "auth_config": {"token": AUTH_SECRET},
        **fields,
    }


def assert_no_secret(result: Any) -> None:
    text = json.dumps(result)
    for secret in (AUTH_SECRET, HEADER_SECRET, URL_PASSWORD, QUERY_SECRET, BODY_SECRET):
        assert secret not in text


@pytest.mark.usefixtures("enabled")
async def test_list_jobs_lists_every_job_and_applies_its_filters(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    billing = await create(core_app, cast.alice.session, **secret_job())
    report = await create(
        core_app,
        cast.alice.session,
        name="Nightly report",
        job_type="bash",
        url="",
        script_body="echo hi",
        cron_expression="@daily",
        enabled=False,
    )
    hook = await create(
        core_app,
        cast.alice.session,
        name="on-push",
        group_name="billing",
        schedule_type="webhook",
        cron_expression="",
    )
    token = (await token_for(core_app, cast, "read_only"))["token"]

    async def names(**filters: Any) -> list[str]:
        found = payload(await call(mcp, token, "zilean_list_jobs", **filters))
        assert found["count"] == len(found["jobs"])
        assert_no_secret(found)
        return [job["name"] for job in found["jobs"]]

    assert await names() == ["Nightly report", "billing-sync", "on-push"]
    assert await names(group_name="billing") == ["billing-sync", "on-push"]
    assert await names(group_name="") == ["Nightly report"]
    assert await names(enabled=False) == ["Nightly report"]
    assert await names(enabled=True, group_name="billing") == ["billing-sync", "on-push"]
    assert await names(job_type="bash") == ["Nightly report"]
    assert await names(schedule_type="webhook") == ["on-push"]
    assert await names(name_contains="NIGHT") == ["Nightly report"]
    listed = payload(await call(mcp, token, "zilean_list_jobs", name_contains="billing"))
    entry = listed["jobs"][0]
    assert entry["id"] == billing["id"]
    assert entry["capabilities"] == {}
    assert entry["next_run_at"] is not None
    assert {report["id"], hook["id"]} <= {
        job["id"] for job in payload(await call(mcp, token, "zilean_list_jobs"))["jobs"]
    }
    # A bad filter is the agent's mistake to fix: a readable tool error.
    assert error_text(await call(mcp, token, "zilean_list_jobs", job_type="cobol")).startswith(
        "job_type: must be one of"
    )
    assert error_text(await call(mcp, token, "zilean_list_jobs", enabled="yes")) == (
        "enabled: must be true or false"
    )
    assert error_text(await call(mcp, token, "zilean_list_jobs", colour="red")) == (
        'unknown field "colour"'
    )


@pytest.mark.usefixtures("enabled")
async def test_get_job_shows_the_configuration_and_no_secret(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(core_app, cast.alice.session, **secret_job())
    for role in ("admin", "read_only"):
        issued = await token_for(core_app, cast, role)
        token = issued["token"]
        shown = payload(await call(mcp, token, "zilean_get_job", job_id=job["id"]))["job"]
        assert_no_secret(shown)
        assert shown["id"] == job["id"]
        assert shown["name"] == "billing-sync"
        assert shown["auth_type"] == "bearer"
        assert shown["has_auth_secret"] is True
        assert shown["url"] == "https://sync:REDACTED@billing.example.com/run"
        assert shown["headers"] == {"X-Api-Key": "***", "Accept": "application/json"}
        assert shown["query_params"] == {"access_token": "***", "page": "1"}
        assert shown["body"] == {"account": "acme", "password": "***"}
        assert shown["capabilities"] == {}
        assert shown["retry_max_attempts"] == job["retry_max_attempts"]
        assert "webhook_token_hint" not in shown
        # The notify fields follow notify:read, as in the API.
        assert ("notify_on" in shown) is (role == "admin")
        # Reads are not audited (as in the API).
        assert entries_by(await audit_rows(engine), issued["account_id"]) == []
    token = (await token_for(core_app, cast, "read_only"))["token"]
    assert error_text(await call(mcp, token, "zilean_get_job", job_id=UNKNOWN_ID)) == (
        "job not found"
    )
    assert error_text(await call(mcp, token, "zilean_get_job", job_id="42")) == (
        "job_id: must be a UUID"
    )
    assert error_text(await call(mcp, token, "zilean_get_job")) == "job_id is required"


@pytest.mark.usefixtures("enabled")
async def test_worker_metrics_reads_a_services_samples(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    await insert_sample(engine, Service.WORKER, cpu_percent=12.5, age=timedelta(minutes=3))
    await insert_sample(engine, Service.WORKER, cpu_percent=7.5)
    await insert_sample(engine, Service.SCRIPT_WORKER_BASH, cpu_percent=99.0)
    token = (await token_for(core_app, cast, "read_only"))["token"]
    worker = payload(await call(mcp, token, "zilean_worker_metrics", since="1h", buckets=60))
    assert worker["service"] == "worker"
    assert worker["latest"]["cpu_percent"] == 7.5
    assert worker["latest"]["rss_bytes"] == 50_000_000
    history = worker["history"]
    assert (history["service"], history["slot_count"], history["bucket_width_seconds"]) == (
        "worker",
        60,
        60,
    )
    assert sorted(slot["cpu_percent"] for slot in history["samples"]) == [7.5, 12.5]
    bash = payload(await call(mcp, token, "zilean_worker_metrics", service="script-worker-bash"))
    assert bash["latest"]["cpu_percent"] == 99.0
    silent = payload(await call(mcp, token, "zilean_worker_metrics", service="webhook"))
    assert (silent["latest"], silent["history"]["samples"]) == (None, [])
    assert error_text(
        await call(mcp, token, "zilean_worker_metrics", service="toaster")
    ).startswith("service: must be one of worker")


# The writes, each audited under the token's own account, as the API audits them.


@pytest.mark.usefixtures("enabled")
async def test_enable_and_disable_change_one_job_and_are_audited_under_the_token(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(core_app, cast.alice.session)
    issued = await token_for(core_app, cast, "admin", name="claude")
    token = issued["token"]
    disabled = payload(await call(mcp, token, "zilean_disable_job", job_id=job["id"]))
    assert disabled["changed"] is True
    assert (disabled["job"]["id"], disabled["job"]["enabled"]) == (job["id"], False)
    again = payload(await call(mcp, token, "zilean_disable_job", job_id=job["id"]))
    assert (again["changed"], again["job"]["enabled"]) == (False, False)
    enabled = payload(await call(mcp, token, "zilean_enable_job", job_id=job["id"]))
    assert (enabled["changed"], enabled["job"]["enabled"]) == (True, True)
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.get(f"/api/jobs/{job['id']}")).json()["enabled"] is True
        # The same change through the API, for comparison.
        assert (await alice.post(f"/api/jobs/{job['id']}/disable")).status_code == 200
    rows = await audit_rows(engine)
    by_token = entries_by(rows, issued["account_id"])
    assert [(r["action"], r["resource_type"], r["resource_id"]) for r in by_token] == [
        ("job.disable", "job", job["id"]),
        ("job.enable", "job", job["id"]),
    ]
    assert {r["actor_email"] for r in by_token} == {issued["account_email"]}
    by_api = [
        r for r in rows if r["action"] == "job.disable" and r["actor_email"] == cast.alice.email
    ]
    shape = ("action", "resource_type", "resource_id", "before", "after")
    assert [r[k] for k in shape for r in by_api] == [by_token[0][k] for k in shape]
    assert all(r["ip"] == "127.0.0.1" for r in by_token)
    assert error_text(await call(mcp, token, "zilean_enable_job", job_id=UNKNOWN_ID)) == (
        "job not found"
    )


@pytest.mark.usefixtures("enabled")
async def test_run_job_queues_a_run_the_worker_makes_and_the_read_tools_report(
    mcp: str,
    core_app: FastAPI,
    cast: Cast,
    engine: AsyncEngine,
    database_url: str,
    target: HttpTarget,
) -> None:
    job = await create(
        core_app,
        cast.alice.session,
        name="ping",
        url=f"{target.base_url}/work",
        retry_enabled=False,
    )
    issued = await token_for(core_app, cast, "admin")
    token = issued["token"]
    async with worker_for(database_url) as worker:
        queued = payload(await call(mcp, token, "zilean_run_job", job_id=job["id"]))
        assert queued == {"job_id": job["id"], "queued": 1, "busy_members": []}

        async def recorded() -> list[dict[str, Any]] | None:
            found = payload(await call(mcp, token, "zilean_recent_calls", job_id=job["id"]))
            finished = [c for c in found["calls"] if c["state"] == "succeeded"]
            return finished or None

        calls = await eventually(recorded, what="the run's attempt")
        await worker.drain(_settled)
    assert [r.path for r in target.requests] == ["/work"]
    attempt = calls[0]
    assert (attempt["trigger"], attempt["attempt"]) == ("run_now", 1)
    assert attempt["last_call"]["status_code"] == 200
    assert attempt["last_call"]["url"] == f"{target.base_url}/work"
    activity = payload(
        await call(mcp, token, "zilean_job_activity", job_id=job["id"], since="1h", buckets=12)
    )
    assert (activity["job_id"], activity["slot_count"], activity["bucket_width_seconds"]) == (
        job["id"],
        12,
        300,
    )
    assert activity["invocations_total"] == activity["invocations_completed"] == 1
    assert sum(bucket["completed"] for bucket in activity["buckets"]) == 1
    limited = payload(await call(mcp, token, "zilean_recent_calls", job_id=job["id"], limit=1))
    assert len(limited["calls"]) == 1
    assert error_text(await call(mcp, token, "zilean_recent_calls", job_id=job["id"], limit=0)) == (
        "limit: must be a positive integer"
    )
    assert error_text(
        await call(mcp, token, "zilean_job_activity", job_id=job["id"], since="soon")
    ).startswith("since:")
    runs = [r for r in await audit_rows(engine) if r["action"] == "job.run"]
    assert [(str(r["actor_user_id"]), r["resource_id"], r["after"]) for r in runs] == [
        (issued["account_id"], job["id"], {"queued": 1, "busy_members": []})
    ]


async def _settled() -> bool:
    return True  # the attempt is recorded: nothing else to wait for but callbacks


@pytest.mark.usefixtures("enabled")
async def test_a_refused_run_is_a_readable_tool_error_and_is_not_audited(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    token = (await token_for(core_app, cast, "admin"))["token"]
    off = await create(core_app, cast.alice.session, name="off", enabled=False)
    hook = await create(
        core_app, cast.alice.session, name="hook", schedule_type="webhook", cron_expression=""
    )
    gated = await create(core_app, cast.alice.session, name="gated", group_name="paused")
    once = await create(
        core_app,
        cast.alice.session,
        name="once",
        schedule_type="one_off",
        cron_expression="",
        run_at=FUTURE,
    )
    async with client_for(core_app, cast.alice.session) as alice:
        paused = await alice.post("/api/groups/disable", json={"group_name": "paused"})
        assert paused.status_code == 200, paused.text
        # The API refuses the same runs with a 409 and the same reasons.
        api = {
            j["name"]: await api_run_now(core_app, cast.alice.session, j["id"])
            for j in (off, hook, gated, once)
        }
    reasons = {
        job["name"]: error_text(await call(mcp, token, "zilean_run_job", job_id=job["id"]))
        for job in (off, hook, gated, once)
    }
    assert reasons == {
        "off": "the job is disabled",
        "hook": "a webhook job cannot be run manually: it would run without a payload",
        "gated": "the job's group is disabled",
        "once": "a one_off job cannot be run manually: it would run before its run_at",
    }
    assert {name: (r.status_code, r.json()["error"]) for name, r in api.items()} == {
        name: (409, reason) for name, reason in reasons.items()
    }
    assert error_text(await call(mcp, token, "zilean_run_job", job_id=UNKNOWN_ID)) == (
        "job not found"
    )
    assert not [r for r in await audit_rows(engine) if r["action"] == "job.run"]


@pytest.mark.usefixtures("enabled")
async def test_a_run_while_every_member_is_running_is_a_readable_409(
    mcp: str, core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str
) -> None:
    token = (await token_for(core_app, cast, "admin"))["token"]
    with hanging_target() as (url, received):
        job = await create(
            core_app,
            cast.alice.session,
            name="slow",
            url=url,
            exec_timeout_ms=3000,
            retry_enabled=False,
        )
        async with worker_for(database_url) as worker:
            first = payload(await call(mcp, token, "zilean_run_job", job_id=job["id"]))
            assert first["queued"] == 1

            async def started() -> bool:
                return bool(received)

            await eventually(started, what="the call to start")
            second = await call(mcp, token, "zilean_run_job", job_id=job["id"])
            assert error_text(second) == (
                "run in progress: every pool member of this job is already running"
            )
            await worker.drain(lambda: _finished(engine, job["id"]))
    runs = [r for r in await audit_rows(engine) if r["action"] == "job.run"]
    assert len(runs) == 1


async def _finished(engine: AsyncEngine, job_id: str) -> bool:
    found = await attempts(engine, job_id)
    return bool(found) and all(a["state"] != "running" for a in found)


@pytest.mark.usefixtures("enabled")
async def test_audit_log_reads_the_entries_and_names_the_token(
    mcp: str, core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    issued = await token_for(core_app, cast, "admin", name="cursor")
    token = issued["token"]
    payload(await call(mcp, token, "zilean_disable_job", job_id=job["id"]))
    page = payload(await call(mcp, token, "zilean_audit_log"))
    actions = [entry["action"] for entry in page["entries"]]
    assert actions[0] == "job.disable"
    assert {"mcp_token.create", "settings.mcp", "job.create"} <= set(actions)
    mine = payload(await call(mcp, token, "zilean_audit_log", actor_user_id=issued["account_id"]))
    assert [(e["action"], e["resource_id"], e["actor_email"]) for e in mine["entries"]] == [
        ("job.disable", job["id"], issued["account_email"])
    ]
    created = payload(await call(mcp, token, "zilean_audit_log", action="mcp_token.create"))
    assert created["entries"][0]["resource_id"] == issued["id"]
    assert issued["token"] not in json.dumps(created)
    about = payload(
        await call(mcp, token, "zilean_audit_log", resource_type="job", resource_id=job["id"])
    )
    assert [e["action"] for e in about["entries"]] == ["job.disable", "job.create"]
    assert error_text(await call(mcp, token, "zilean_audit_log", since="yesterday")) == (
        "since: must be an RFC 3339 timestamp"
    )
