"""The job registry through the admin API: CRUD, who may write what, notify fields, auth
secrets, webhook tokens, one-off guards, enabling, the audit trail and the OpenAPI schema."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.conftest import KEY
from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN, UNKNOWN_ID, audit_rows
from tests.support.jobs import BASE, FUTURE, SCRIPT, create, fetch, put, session_with
from zilean.crypto.secretbox import SecretBox
from zilean.db.tables import scheduled_jobs

SCRIPT_FORBIDDEN = {"error": "script jobs require the jobs:script permission"}


async def test_a_job_is_created_read_listed_replaced_and_deleted(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session, headers={"X-Trace": "1"}, body={"a": [1]})
    seen_by_carol = await fetch(core_app, cast.carol.session, job["id"])
    # Read-Only lacks notify:read, so the notify config is the only difference.
    assert seen_by_carol == {k: v for k, v in job.items() if not k.startswith("notify_")}
    async with client_for(core_app, cast.alice.session) as alice:
        listed = await alice.get("/api/jobs")
        replaced = await alice.put(f"/api/jobs/{job['id']}", json={**BASE, "name": "renamed"})
        deleted = await alice.delete(f"/api/jobs/{job['id']}")
        gone = await alice.get(f"/api/jobs/{job['id']}")
        deleted_again = await alice.delete(f"/api/jobs/{job['id']}")
        unknown = await alice.put(f"/api/jobs/{UNKNOWN_ID}", json=BASE)
    assert listed.json() == [job]
    assert replaced.status_code == 200, replaced.text
    new = replaced.json()
    assert (new["name"], new["headers"], new["body"]) == ("renamed", {}, None)  # full replace
    assert (new["id"], new["created_at"]) == (job["id"], job["created_at"])
    assert datetime.fromisoformat(new["updated_at"]) > datetime.fromisoformat(job["updated_at"])
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert (gone.status_code, gone.json()) == (404, {"error": "job not found"})
    assert (deleted_again.status_code, unknown.status_code) == (404, 404)


async def test_changing_job_type_on_put_is_a_conflict(core_app: FastAPI, cast: Cast) -> None:
    job = await create(core_app, cast.alice.session)
    response = await put(core_app, cast.alice.session, job, **{**SCRIPT, "url": ""})
    assert response.status_code == 409
    assert response.json() == {"error": "job_type: cannot be changed after the job is created"}
    assert (await fetch(core_app, cast.alice.session, job["id"]))["job_type"] == "http"


async def test_server_managed_fields_in_the_body_are_ignored(core_app: FastAPI, cast: Cast) -> None:
    managed = {
        "id": UNKNOWN_ID,
        "created_at": "2000-01-01T00:00:00Z",
        "invocations_total": 99,
        "invocations_failed": 9,
        "running_since_by_pool": {"0": "2000-01-01T00:00:00Z"},
        "run_at_fired_at": "2000-01-01T00:00:00Z",
        "webhook_token_hint": "deadbeef",
        "has_auth_secret": True,
        "group_gated": True,
    }
    job = await create(core_app, cast.alice.session, **managed)
    replaced = await put(core_app, cast.alice.session, job, **managed)
    for body in (job, replaced.json()):
        assert body["id"] != UNKNOWN_ID
        assert body["created_at"] > "2001"
        assert (body["invocations_total"], body["invocations_failed"]) == (0, 0)
        assert body["running_since_by_pool"] == {}
        assert (body["run_at_fired_at"], body["webhook_token_hint"]) == (None, None)
        assert (body["has_auth_secret"], body["group_gated"]) == (False, False)
    assert replaced.json()["id"] == job["id"]


async def test_read_only_carol_reads_jobs_but_cannot_change_them(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session)
    path = f"/api/jobs/{job['id']}"
    async with client_for(core_app, cast.carol.session) as carol:
        assert (await carol.get("/api/jobs")).status_code == 200
        assert (await carol.get(f"{path}")).status_code == 200
        writes = [
            await carol.post("/api/jobs", json=BASE),
            await carol.put(path, json=job),
            await carol.delete(path),
            await carol.post(f"{path}/enable"),
            await carol.post(f"{path}/disable"),
            await carol.post("/api/jobs/disable-all"),
            await carol.post("/api/groups/disable", json={"group_name": "Ops"}),
        ]
    assert [(w.status_code, w.json()) for w in writes] == [(403, FORBIDDEN)] * len(writes)
    assert await fetch(core_app, cast.alice.session, job["id"]) == job


async def test_admin_bob_without_jobs_script_can_neither_create_nor_edit_a_script_job(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session, **SCRIPT, url="")
    async with client_for(core_app, cast.bob.session) as bob:
        created = await bob.post("/api/jobs", json=SCRIPT)
        edited = await bob.put(f"/api/jobs/{job['id']}", json={**job, "name": "bob's"})
        listed = await bob.get("/api/jobs")
    assert (created.status_code, created.json()) == (403, SCRIPT_FORBIDDEN)
    assert (edited.status_code, edited.json()) == (403, SCRIPT_FORBIDDEN)
    assert listed.json() == [job]


async def test_setting_script_secret_vars_needs_globalvars_write_as_well_as_jobs_script(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    scripting = ["jobs:read", "jobs:write", "jobs:script"]
    erin = await session_with(core_app, engine, cast, "erin", scripting)
    fay = await session_with(core_app, engine, cast, "fay", [*scripting, "globalvars:write"])
    body = {**SCRIPT, "script_secret_vars": ["API_KEY"]}
    async with client_for(core_app, erin) as client:
        refused = await client.post("/api/jobs", json=body)
        plain = await client.post("/api/jobs", json=SCRIPT)
    async with client_for(core_app, fay) as client:
        allowed = await client.post("/api/jobs", json=body)
    assert refused.status_code == 403
    assert "globalvars:write" in refused.json()["error"]
    assert plain.status_code == 201
    assert allowed.status_code == 201, allowed.text
    assert allowed.json()["script_secret_vars"] == ["API_KEY"]
    edited = await put(core_app, erin, plain.json(), script_secret_vars=["API_KEY"])
    assert edited.status_code == 403
    kept = await put(core_app, erin, allowed.json(), name="renamed by erin")  # same list: fine
    assert (kept.status_code, kept.json()["script_secret_vars"]) == (200, ["API_KEY"])


async def test_notify_fields_are_kept_when_the_editor_lacks_notify_write(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    notify = {"notify_on": "both", "notify_all_targets": False, "notify_targets": [3, 7]}
    job = await create(core_app, cast.alice.session, **notify)
    by_bob = await create(core_app, cast.bob.session, name="bob's", notify_on="failure")
    assert by_bob["notify_on"] == "failure"  # Admin holds notify:write
    gus = await session_with(core_app, engine, cast, "gus", ["jobs:read", "jobs:write"])
    changes = {"notify_on": "none", "notify_all_targets": True, "notify_targets": []}
    edited = await put(core_app, gus, job, name="renamed by gus", pool_count=3, **changes)
    assert edited.status_code == 200, edited.text
    assert (edited.json()["name"], edited.json()["pool_count"]) == ("renamed by gus", 3)
    assert "notify_on" not in edited.json()  # gus lacks notify:read too
    stored = await fetch(core_app, cast.alice.session, job["id"])
    assert {key: stored[key] for key in notify} == notify
    created = await create(core_app, gus, name="gus's", notify_on="both", notify_targets=[1])
    stored = await fetch(core_app, cast.alice.session, created["id"])
    assert (stored["notify_on"], stored["notify_targets"]) == ("none", [])


async def test_a_script_jobs_volumes_are_checked_and_kept_when_a_put_omits_them(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        for name, mode in (("reports", "rw"), ("archive", "ro")):
            volume = await alice.post("/api/script-volumes", json={"name": name, "max_mode": mode})
            assert volume.status_code == 201, volume.text
        over = await alice.post(
            "/api/jobs",
            json={**SCRIPT, "capabilities": {"volumes": [{"name": "archive", "mode": "rw"}]}},
        )
        on_http = await alice.post(
            "/api/jobs",
            json={**BASE, "capabilities": {"volumes": [{"name": "reports", "mode": "ro"}]}},
        )
    assert over.status_code == 400
    assert over.json()["error"] == (
        'capabilities.volumes[0].mode: script volume "archive" allows at most "ro"'
    )
    assert on_http.json() == {"error": "capabilities: must be empty on an HTTP job"}
    declared = {"volumes": [{"name": "reports", "mode": "rw"}, {"name": "archive", "mode": "ro"}]}
    job = await create(core_app, cast.alice.session, **SCRIPT, url="", capabilities=declared)
    assert (job["capabilities"], job["capabilities_invalid"]) == (declared, False)
    omitted = {key: value for key, value in job.items() if key != "capabilities"}
    kept = await put(core_app, cast.alice.session, omitted, name="renamed")
    assert kept.json()["capabilities"] == declared
    cleared = await put(core_app, cast.alice.session, job, capabilities={})
    assert cleared.json()["capabilities"] == {}


async def stored_secret(engine: AsyncEngine, job_id: str) -> str | None:
    async with engine.connect() as conn:
        blob = (
            await conn.execute(
                select(scheduled_jobs.c.auth_secret).where(scheduled_jobs.c.id == job_id)
            )
        ).scalar_one()
    if blob is None:
        return None
    return SecretBox(base64.b64decode(KEY)).open(blob, f"job-auth:{job_id}")


async def test_auth_secrets_are_sealed_never_returned_and_kept_when_sent_empty(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    bearer = {"auth_type": "bearer", "auth_config": {"token": "tok-SECRET-1"}}
    job = await create(core_app, cast.alice.session, **bearer)
    keyed = await create(
        core_app, cast.alice.session, name="keyed",
        auth_type="api_key", auth_config={"api_key": "key-SECRET-3"},
    )  # fmt: skip
    assert (job["has_auth_secret"], job["auth_config"]) == (True, {})
    assert await stored_secret(engine, job["id"]) == "tok-SECRET-1"
    assert await stored_secret(engine, keyed["id"]) == "key-SECRET-3"

    kept = await put(core_app, cast.alice.session, job, auth_config={"token": ""})
    assert kept.json()["has_auth_secret"] is True
    assert await stored_secret(engine, job["id"]) == "tok-SECRET-1"
    changed = await put(core_app, cast.alice.session, job, auth_config={"token": "tok-SECRET-2"})
    assert await stored_secret(engine, job["id"]) == "tok-SECRET-2"
    basic = {"auth_type": "basic", "auth_config": {"username": "ops", "password": ""}}
    to_basic = await put(core_app, cast.alice.session, job, **basic)
    assert to_basic.status_code == 200, to_basic.text
    assert to_basic.json()["auth_config"] == {"username": "ops"}
    assert to_basic.json()["has_auth_secret"] is False
    assert await stored_secret(engine, job["id"]) is None
    with_password = {"auth_type": "basic", "auth_config": {"username": "ops", "password": "pw-S"}}
    await put(core_app, cast.alice.session, job, **with_password)

    async with client_for(core_app, cast.alice.session) as alice:
        reads = [await alice.get("/api/jobs"), await alice.get(f"/api/jobs/{job['id']}")]
    responses = [*reads, kept, changed, to_basic]
    texts = [r.text for r in responses] + [json.dumps(keyed)]
    texts.append(json.dumps(await audit_rows(engine), default=str))
    for secret in ("tok-SECRET-1", "tok-SECRET-2", "key-SECRET-3", "pw-S"):
        assert not [text for text in texts if secret in text], secret
    shown = [*reads[0].json(), *(r.json() for r in responses[1:]), keyed]
    assert all(set(job["auth_config"]) <= {"username", "header_name"} for job in shown), shown


async def test_a_webhook_token_is_shown_once_rotated_on_demand_and_kept_on_routine_edits(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    created = await create(core_app, cast.alice.session, schedule_type="webhook")
    token, job_id = created["webhook_token"], created["id"]
    assert created["webhook_url"] == f"https://zilean.example.com/api/webhooks/{job_id}/{token}"
    assert created["webhook_token_hint"] == token[:8]
    assert created["cron_expression"] == "0 3 * * *"  # a leftover expression is accepted
    assert created["next_run_at"] is None
    job = await fetch(core_app, cast.carol.session, job_id)
    async with client_for(core_app, cast.alice.session) as alice:
        listed = (await alice.get("/api/jobs")).text
        info = (await alice.get(f"/api/jobs/{job_id}/webhook")).json()
        rotated = (await alice.post(f"/api/jobs/{job_id}/webhook/rotate")).json()
        after = (await alice.get(f"/api/jobs/{job_id}/webhook")).json()
    assert "webhook_token" not in job
    assert "webhook_url" not in job
    assert token not in listed
    assert info == {
        "job_id": job_id,
        "webhook_token_hint": token[:8],
        "webhook_token_rotated_at": created["webhook_token_rotated_at"],
    }
    new_token = rotated["webhook_token"]
    assert new_token != token
    assert rotated["webhook_url"].endswith(f"/api/webhooks/{job_id}/{new_token}")
    assert after["webhook_token_hint"] == new_token[:8] != token[:8]
    assert datetime.fromisoformat(after["webhook_token_rotated_at"]) > datetime.fromisoformat(
        info["webhook_token_rotated_at"]
    )
    assert token not in json.dumps(await audit_rows(engine), default=str)

    edited = await put(core_app, cast.alice.session, job, name="renamed")
    assert edited.status_code == 200, edited.text
    assert "webhook_token" not in edited.json()
    assert edited.json()["webhook_token_hint"] == new_token[:8]

    away = await put(core_app, cast.alice.session, job, schedule_type="cron")
    assert (away.json()["webhook_token_hint"], away.json()["webhook_token_rotated_at"]) == (
        None,
        None,
    )
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.get(f"/api/jobs/{job_id}/webhook")).status_code == 400
        assert (await alice.post(f"/api/jobs/{job_id}/webhook/rotate")).status_code == 400
    back = await put(core_app, cast.alice.session, job, schedule_type="webhook")
    assert back.json()["webhook_token_hint"] == back.json()["webhook_token"][:8]


@pytest.mark.parametrize(
    "url",
    [
        "https://zilean.example.com/api/webhooks/{id}/anything",  # the public URL
        "https://{{host}}/api/webhooks/{id}/x",  # a templated host
        "{{base_url}}/api/webhooks/{id}/x",  # a templated origin
        "https://zilean.example.com/api/webhooks/{ID}/x",  # the id in upper case
        "https://zilean.example.com/api/webhooks/{hex}/x",  # the id without hyphens
    ],
)
async def test_a_job_may_not_call_its_own_webhook(core_app: FastAPI, cast: Cast, url: str) -> None:
    job = await create(core_app, cast.alice.session, schedule_type="webhook")
    spelled = (
        url.replace("{id}", job["id"])
        .replace("{ID}", job["id"].upper())
        .replace("{hex}", job["id"].replace("-", ""))
    )
    response = await put(core_app, cast.alice.session, job, url=spelled)
    assert response.status_code == 400
    assert "own webhook" in response.json()["error"]
    elsewhere = url.replace("{id}", UNKNOWN_ID).replace("{ID}", UNKNOWN_ID)
    other = await put(core_app, cast.alice.session, job, url=elsewhere.replace("{hex}", UNKNOWN_ID))
    assert other.status_code == 200, other.text


FIRED_AT = datetime(2024, 5, 1, 12, 0, 1, tzinfo=UTC)


async def fired_one_off(app: FastAPI, engine: AsyncEngine, session: str) -> dict[str, Any]:
    """A one-off that ran at 2024-05-01 12:00Z (its run was inserted a second later)."""
    job = await create(app, session, schedule_type="one_off", run_at=FUTURE)
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job["id"])
            .values(run_at=datetime(2024, 5, 1, 12, tzinfo=UTC), run_at_fired_at=FIRED_AT)
        )
    return await fetch(app, session, job["id"])


async def test_a_fired_one_offs_run_at_cannot_change_but_may_be_resent(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    job = await fired_one_off(core_app, engine, cast.alice.session)
    assert (job["run_at_fired_at"], job["next_run_at"]) == ("2024-05-01T12:00:01Z", None)
    moved = await put(core_app, cast.alice.session, job, run_at=FUTURE)
    assert moved.status_code == 400
    assert moved.json() == {"error": "run_at: cannot change after the one-off has fired"}
    kept = await put(core_app, cast.alice.session, job, name="renamed")
    assert kept.status_code == 200, kept.text  # in the past, but unchanged
    same = await put(core_app, cast.alice.session, job, run_at="2024-05-01T14:00+02:00")
    assert same.status_code == 200, same.text  # the same instant, written another way
    assert same.json()["run_at_fired_at"] == "2024-05-01T12:00:01Z"


@pytest.mark.parametrize(
    "schedule",
    [
        {"schedule_type": "cron"},  # to a cron schedule
        {"schedule_type": "rate", "cron_expression": "@every 1h"},  # to a rate
        {"schedule_type": "webhook"},  # to a webhook
    ],
)
async def test_switching_a_fired_one_off_to_another_schedule_clears_run_at_fired_at(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, schedule: dict[str, str]
) -> None:
    job = await fired_one_off(core_app, engine, cast.alice.session)
    switched = await put(core_app, cast.alice.session, job, **schedule)
    assert switched.status_code == 200, switched.text
    assert switched.json()["run_at"] is None
    assert switched.json()["run_at_fired_at"] is None  # zilean-17: cleared on switching away
    async with engine.connect() as conn:
        stored = await conn.execute(
            select(scheduled_jobs.c.run_at_fired_at).where(scheduled_jobs.c.id == job["id"])
        )
    assert stored.scalar_one() is None


@pytest.mark.parametrize(
    ("after_run", "stored"),
    [
        ("delete", "delete"),  # delete the row after its run
        (" DELETE ", "delete"),  # case and spaces aside
        ("keep", "keep"),  # disable and keep
        ("archive", "keep"),  # an unknown value falls through to keep
        ("", "keep"),  # so does an empty one
    ],
)
async def test_one_off_after_run_is_stored_as_delete_or_keep(
    core_app: FastAPI, cast: Cast, after_run: str, stored: str
) -> None:
    job = await create(
        core_app, cast.alice.session, schedule_type="one_off", run_at=FUTURE,
        one_off_after_run=after_run,
    )  # fmt: skip
    assert job["one_off_after_run"] == stored


async def test_enabling_and_disabling_jobs_one_at_a_time_and_all_together(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    jobs = [await create(core_app, cast.alice.session, name=f"job {n}") for n in range(3)]
    path = f"/api/jobs/{jobs[0]['id']}"
    async with client_for(core_app, cast.bob.session) as bob:
        disabled = (await bob.post(f"{path}/disable")).json()
        enabled = (await bob.post(f"{path}/enable")).json()
        await bob.post(f"{path}/disable")
        all_off = await bob.post("/api/jobs/disable-all")
        all_off_again = await bob.post("/api/jobs/disable-all")
        all_on = await bob.post("/api/jobs/enable-all")
    assert (disabled["enabled"], disabled["next_run_at"]) == (False, None)
    assert (enabled["enabled"], enabled["next_run_at"]) == (True, jobs[0]["next_run_at"])
    assert (all_off.status_code, all_off.json()) == (200, {"updated": 2})
    assert all_off_again.json() == {"updated": 0}
    assert all_on.json() == {"updated": 3}
    actions = [(row["action"], row["resource_id"]) for row in await audit_rows(engine)]
    assert [a for a in actions if a[0] in ("job.enable", "job.disable")] == [
        ("job.disable", jobs[0]["id"]),
        ("job.enable", jobs[0]["id"]),
        ("job.disable", jobs[0]["id"]),
    ]
    assert ("job.disable_all", None) in actions
    assert ("job.enable_all", None) in actions


async def test_job_writes_are_audited_with_before_and_after_but_no_secrets(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    bearer = {"auth_type": "bearer", "auth_config": {"token": "tok-AUDIT"}}
    job = await create(core_app, cast.bob.session, **bearer)
    await put(core_app, cast.bob.session, job, name="renamed", auth_config={"token": "tok-NEW"})
    async with client_for(core_app, cast.bob.session) as bob:
        await bob.delete(f"/api/jobs/{job['id']}")
    rows = [row for row in await audit_rows(engine) if row["resource_type"] == "job"]
    assert [row["action"] for row in rows] == ["job.create", "job.update", "job.delete"]
    assert {(row["resource_id"], row["actor_email"]) for row in rows} == {
        (job["id"], "bob@example.com")
    }
    create_row, update_row, delete_row = rows
    assert create_row["before"] is None
    assert create_row["after"]["name"] == "nightly"
    assert create_row["after"]["has_auth_secret"] is True
    assert (update_row["before"]["name"], update_row["after"]["name"]) == ("nightly", "renamed")
    assert (delete_row["before"]["name"], delete_row["after"]) == ("renamed", None)
    text = json.dumps(rows, default=str)
    assert "tok-AUDIT" not in text
    assert "tok-NEW" not in text
    assert "auth_secret" not in text.replace("has_auth_secret", "")


async def job_schema(app: FastAPI) -> dict[str, Any]:
    async with client_for(app) as client:
        response = await client.get("/api/openapi.json")
    assert response.status_code == 200
    schema: dict[str, Any] = response.json()["components"]["schemas"]["JobWrite"]
    return schema


async def test_the_openapi_schema_documents_the_execution_bounds(core_app: FastAPI) -> None:
    fields = (await job_schema(core_app))["properties"]
    assert fields["exec_timeout_ms"]["default"] == 60_000
    assert fields["exec_timeout_ms"]["maximum"] == 1_800_000
    assert fields["exec_timeout_ms"]["minimum"] == 1
    assert (fields["pool_count"]["default"], fields["pool_count"]["maximum"]) == (1, 20)
    assert fields["retry_max_attempts"]["default"] == 5
    assert fields["loop_response_path"]["default"] == "result.remaining"


# The zilean-17 defaults of every optional field. `run_at` and `body` have none, and
# `capabilities` is null in the model so that a PUT may omit it (keeping the stored volumes).
DOCUMENTED_DEFAULTS = {
    "group_name": "", "enabled": True, "schedule_type": "cron", "cron_expression": "",
    "timezone": "", "one_off_after_run": "keep", "job_type": "http", "http_method": "GET",
    "url": "", "query_params": {}, "headers": {}, "auth_type": "none", "auth_config": {},
    "script_body": "", "script_args": [], "script_secret_vars": [], "exec_timeout_ms": 60_000,
    "pool_count": 1, "overlap_policy": "skip", "loop_enabled": False,
    "loop_response_path": "result.remaining", "loop_delay_ms": 1000, "loop_jitter_ms": 0,
    "loop_max_iterations": 50, "retry_enabled": True, "retry_mode": "exponential",
    "retry_base_delay_ms": 1000, "retry_multiplier": 2, "retry_max_delay_ms": 30_000,
    "retry_max_attempts": 5, "on_failure_url": "", "notify_on": "none",
    "notify_all_targets": False, "notify_targets": [], "notify_after_failures": 1,
    "notify_reminder_minutes": 0,
}  # fmt: skip


async def test_the_openapi_schema_documents_every_job_fields_default(core_app: FastAPI) -> None:
    schema = await job_schema(core_app)
    assert schema["required"] == ["name"]
    assert set(schema["properties"]) == {
        "name", "run_at", "body", "capabilities", *DOCUMENTED_DEFAULTS
    }  # fmt: skip
    documented = {
        field: schema["properties"][field].get("default", "<undocumented>")
        for field in DOCUMENTED_DEFAULTS
    }
    assert documented == DOCUMENTED_DEFAULTS


async def test_the_notify_config_is_hidden_from_callers_without_notify_read(
    core_app: FastAPI, cast: Cast
) -> None:
    job = await create(core_app, cast.alice.session, notify_on="failure")
    async with client_for(core_app, cast.carol.session) as carol:  # Read-Only: no notify:read
        shown = (await carol.get(f"/api/jobs/{job['id']}")).json()
        listed = (await carol.get("/api/jobs")).json()
    assert "notify_on" not in shown
    assert all("notify_targets" not in item for item in listed)
    async with client_for(core_app, cast.bob.session) as bob:  # Admin holds notify:read
        assert (await bob.get(f"/api/jobs/{job['id']}")).json()["notify_on"] == "failure"
