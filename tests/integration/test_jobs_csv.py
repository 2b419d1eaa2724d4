"""Jobs as CSV through the admin API: the template, per-row outcomes of an import, the
collision modes, file limits, who may do what, and the export round trip."""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import drop_database, new_database
from tests.integration.conftest import KEY, core_settings
from tests.support.actors import Cast, build_cast, client_for
from tests.support.api import FORBIDDEN, audit_rows
from zilean.api.app import create_core_app
from zilean.audit.log import Actor
from zilean.auth.principal import session_principal
from zilean.crypto.secretbox import SecretBox
from zilean.db.engine import create_engine
from zilean.db.tables import scheduled_jobs
from zilean.db.urls import with_database
from zilean.registry.csv_import import ImportRun, import_rows, read_csv
from zilean.registry.fields import JobWrite
from zilean.registry.validation import RegistryContext

NDJSON = "application/x-ndjson"
RESULT_KEYS = {"row", "status", "job_id", "name", "group_name", "error"}
SCRIPT_DENIED = "script jobs require the jobs:script permission"
JOB_TYPE_FROZEN = "job_type: cannot be changed after the job is created"
MAX_UPLOAD = 5 * 1024 * 1024
BOX = SecretBox(base64.b64decode(KEY))
# Derived from the clock rather than stored: it moves between two reads of a rate job.
VOLATILE = {"updated_at", "next_run_at"}
# What a second instance assigns afresh, and the secrets an export never carries.
INSTANCE_OWN = VOLATILE | {
    "id",
    "created_at",
    "has_auth_secret",
    "webhook_token_hint",
    "webhook_token_rotated_at",
    # When this instance queued the one-off's run, and the lock that run holds.
    "run_at_fired_at",
    "running_since_by_pool",
}
EXPECTED_COLUMNS = [
    "capabilities_json" if field == "capabilities" else field for field in JobWrite.model_fields
]


def to_csv(rows: list[dict[str, str]]) -> str:
    """A CSV whose header is every column the rows use, in first-seen order."""
    columns = list(dict.fromkeys(column for row in rows for column in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, restval="", lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def parse_csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def http_row(name: str, **cells: str) -> dict[str, str]:
    return {
        "name": name,
        "group_name": "",
        "job_type": "",
        "cron_expression": "0 * * * *",
        "url": "https://example.com/hook",
        **cells,
    }


async def post_import(
    client: httpx.AsyncClient, content: str | bytes, **form: str
) -> httpx.Response:
    data = content.encode() if isinstance(content, str) else content
    return await client.post(
        "/api/jobs/import", files={"file": ("jobs.csv", data, "text/csv")}, data=form
    )


async def import_csv(
    client: httpx.AsyncClient, content: str | bytes, **form: str
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Upload a CSV; return the per-row lines and the summary, checking the stream's shape."""
    response = await post_import(client, content, **form)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == NDJSON
    assert response.text.endswith("\n")
    *rows, last = [json.loads(line) for line in response.text.splitlines()]
    assert set(last) == {"summary"}
    for row in rows:
        assert RESULT_KEYS <= set(row) <= RESULT_KEYS | {"webhook_token", "webhook_url"}
    return rows, last["summary"]


async def create_job(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await client.post("/api/jobs", json=fields)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


async def jobs_by_name(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    response = await client.get("/api/jobs")
    assert response.status_code == 200, response.text
    return {job["name"]: job for job in response.json()}


def without(job: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {key: value for key, value in job.items() if key not in keys}


async def test_the_template_names_every_settable_field_and_its_example_imports_cleanly(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.bob.session) as bob:
        response = await bob.get("/api/jobs/import/template")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/csv")
        assert response.headers["content-disposition"] == (
            'attachment; filename="zilean-jobs-template.csv"'
        )
        header, *examples = parse_csv(response.text)
        assert header == EXPECTED_COLUMNS
        assert len(examples) == 1
        rows, summary = await import_csv(bob, response.text)
        jobs = await jobs_by_name(bob)
    assert [(row["row"], row["status"], row["error"]) for row in rows] == [(1, "created", None)]
    assert summary == {"created": 1, "updated": 0, "skipped": 0, "errors": 0}
    example = jobs["Nightly report"]
    assert example["id"] == rows[0]["job_id"]
    assert (example["group_name"], example["enabled"]) == ("Examples/Reports", False)
    assert (example["query_params"], example["body"]) == ({"format": "csv"}, {"since": "yesterday"})


async def test_a_mixed_file_reports_each_row_in_order_and_keeps_the_good_ones(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        cleanup = await create_job(
            alice,
            name="Cleanup",
            group_name="Ops",
            job_type="bash",
            script_body="echo hi",
            cron_expression="0 * * * *",
        )
    bad_cron = {"name": "Bad cron", "cron_expression": "61 * * * *", "url": "https://e.x/"}
    bad_type = {"name": "Bad type", "job_type": "ftp", "cron_expression": "0 * * * *"}
    rows = [
        http_row("Ping"),
        http_row("Bad cron", cron_expression="61 * * * *"),
        http_row("Bad type", job_type="ftp"),
        http_row("Backup", job_type="bash", url="", script_body="tar czf /tmp/b.tgz /srv"),
        http_row("Bad headers", headers="{not json"),
        # Matches the bash job above but says http.
        http_row("Cleanup", group_name="Ops", job_type="http"),
        http_row("Too deep", group_name="/".join(["g"] * 17)),
        http_row("Pong"),
    ]
    async with client_for(core_app, cast.bob.session) as bob:
        api_cron = await bob.post("/api/jobs", json=bad_cron)
        api_type = await bob.post("/api/jobs", json=bad_type)
        api_script = await bob.post(
            "/api/jobs", json={"name": "Backup", "job_type": "bash", "script_body": "tar"}
        )
        results, summary = await import_csv(bob, to_csv(rows), on_collision="overwrite")
        jobs = await jobs_by_name(bob)
    assert (api_cron.status_code, api_type.status_code) == (400, 400)
    assert api_script.json() == {"error": SCRIPT_DENIED}
    assert [(r["row"], r["name"], r["status"]) for r in results] == [
        (1, "Ping", "created"),
        (2, "Bad cron", "error"),
        (3, "Bad type", "error"),
        (4, "Backup", "error"),
        (5, "Bad headers", "error"),
        (6, "Cleanup", "error"),
        (7, "Too deep", "error"),
        (8, "Pong", "created"),
    ]
    errors = [result["error"] for result in results]
    assert errors[1] == api_cron.json()["error"]  # the API's own words
    assert errors[2] == api_type.json()["error"]
    assert errors[3] == SCRIPT_DENIED
    assert errors[4] is not None
    assert errors[4].startswith("headers: not valid JSON")
    assert errors[5] == JOB_TYPE_FROZEN
    assert errors[6] == "group_name must be at most 16 levels deep"
    assert (errors[0], errors[7]) == (None, None)
    assert (results[5]["job_id"], results[5]["group_name"]) == (cleanup["id"], "Ops")
    assert [results[i]["job_id"] for i in (1, 2, 3, 4, 6)] == [None] * 5
    assert summary == {"created": 2, "updated": 0, "skipped": 0, "errors": 6}
    assert set(jobs) == {"Cleanup", "Ping", "Pong"}
    assert jobs["Cleanup"] == cleanup | {"next_run_at": jobs["Cleanup"]["next_run_at"]}
    created = [
        (row["action"], row["resource_id"])
        for row in await audit_rows(engine)
        if row["actor_email"] == "bob@example.com"
    ]
    assert created == [("job.create", jobs["Ping"]["id"]), ("job.create", jobs["Pong"]["id"])]


EXISTING = {
    "name": "Sync",
    "group_name": "Ops",
    "cron_expression": "0 * * * *",
    "url": "https://a.example.com/sync",
    "headers": {"X-A": "1"},
    "exec_timeout_ms": 120000,
    "auth_type": "basic",
    "auth_config": {"username": "u", "password": "p"},
}
# Matches EXISTING once its group is normalised. Blank cells: headers, exec_timeout_ms,
# auth_type, auth_config. The job has no query_params and no timezone.
COLLIDING_ROW = {
    "name": " Sync ",
    "group_name": " Ops / ",
    "cron_expression": "30 * * * *",
    "url": "https://b.example.com/sync",
    "query_params": '{"page": "1"}',
    "timezone": "Europe/Paris",
    "headers": "",
    "exec_timeout_ms": "",
    "auth_type": "",
    "auth_config": "",
}
# The fields the collision cases look at, as EXISTING leaves them.
UNTOUCHED = {
    "cron_expression": "0 * * * *",
    "url": "https://a.example.com/sync",
    "headers": {"X-A": "1"},
    "query_params": {},
    "timezone": "",
    "exec_timeout_ms": 120000,
    "auth_type": "basic",
    "auth_config": {"username": "u"},
    "has_auth_secret": True,
}
# Where the job is blank, a merge takes the row's value whatever the priority.
FILLED_BLANKS = {"query_params": {"page": "1"}, "timezone": "Europe/Paris"}


@pytest.mark.parametrize(
    ("form", "status", "expected"),
    [
        pytest.param({"on_collision": "skip"}, "skipped", UNTOUCHED, id="skip leaves the job"),
        pytest.param(
            {"on_collision": "overwrite"},
            "updated",
            {
                "cron_expression": "30 * * * *",
                "url": "https://b.example.com/sync",
                "headers": {},
                **FILLED_BLANKS,
                "exec_timeout_ms": 60000,
                "auth_type": "none",
                "auth_config": {},
                "has_auth_secret": False,
            },
            id="overwrite replaces the job, blank cells taking defaults",
        ),
        pytest.param(
            {"on_collision": "merge", "merge_priority": "source"},
            "updated",
            UNTOUCHED
            | FILLED_BLANKS
            | {"cron_expression": "30 * * * *", "url": "https://b.example.com/sync"},
            id="merge with source: the row wins where both are set",
        ),
        pytest.param(
            {"on_collision": "merge"},
            "updated",
            UNTOUCHED
            | FILLED_BLANKS
            | {"cron_expression": "30 * * * *", "url": "https://b.example.com/sync"},
            id="merge defaults to source priority",
        ),
        pytest.param(
            {"on_collision": "merge", "merge_priority": "target"},
            "updated",
            UNTOUCHED | FILLED_BLANKS,
            id="merge with target: the job wins where both are set",
        ),
    ],
)
async def test_a_row_matching_a_job_is_handled_by_the_collision_mode(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    form: dict[str, str],
    status: str,
    expected: dict[str, Any],
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        job = await create_job(alice, **EXISTING)
        results, _ = await import_csv(alice, to_csv([COLLIDING_ROW]), **form)
        after = (await jobs_by_name(alice))["Sync"]
    assert [(r["status"], r["job_id"], r["name"], r["group_name"]) for r in results] == [
        (status, job["id"], "Sync", "Ops")
    ]
    assert {field: after[field] for field in expected} == expected
    last = (await audit_rows(engine))[-1]
    expected_action = "job.create" if status == "skipped" else "job.update"
    assert (last["action"], last["resource_id"]) == (expected_action, job["id"])


@pytest.mark.parametrize(
    "form",
    [
        pytest.param({"on_collision": "overwrite"}, id="overwrite"),
        pytest.param({"on_collision": "merge", "merge_priority": "source"}, id="merge source"),
        pytest.param({"on_collision": "merge", "merge_priority": "target"}, id="merge target"),
    ],
)
async def test_a_row_may_not_change_the_job_type_of_the_job_it_matches(
    core_app: FastAPI, cast: Cast, form: dict[str, str]
) -> None:
    row = {"name": "Sync", "group_name": "Ops", "job_type": "bash", "script_body": "echo hi"}
    async with client_for(core_app, cast.alice.session) as alice:
        job = await create_job(alice, **EXISTING)
        results, summary = await import_csv(alice, to_csv([row]), **form)
        after = (await jobs_by_name(alice))["Sync"]
    assert [(r["status"], r["error"], r["job_id"]) for r in results] == [
        ("error", JOB_TYPE_FROZEN, job["id"])
    ]
    assert summary["errors"] == 1
    assert without(after, VOLATILE) == without(job, VOLATILE)


async def test_a_merge_keeps_the_stored_secret_and_a_new_secret_replaces_it(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    rows = [
        {"name": "Sync", "group_name": "Ops", "auth_config": '{"username": "v"}'},
        {"name": "Sync", "group_name": "Ops", "auth_config": '{"username": "w", "password": "q"}'},
    ]
    async with client_for(core_app, cast.alice.session) as alice:
        job = await create_job(alice, **EXISTING)
    secrets = []
    for row in rows:
        async with client_for(core_app, cast.alice.session) as alice:
            results, _ = await import_csv(alice, to_csv([row]), on_collision="merge")
            after = (await jobs_by_name(alice))["Sync"]
        assert results[0]["status"] == "updated", results
        assert after["has_auth_secret"] is True
        secrets.append((after["auth_config"], await stored_password(engine, job["id"])))
    assert secrets == [({"username": "v"}, "p"), ({"username": "w"}, "q")]


async def stored_password(engine: AsyncEngine, job_id: str) -> str:
    async with engine.connect() as conn:
        sealed = (
            await conn.execute(
                select(scheduled_jobs.c.auth_secret).where(scheduled_jobs.c.id == job_id)
            )
        ).scalar_one()
    return BOX.open(sealed, f"job-auth:{job_id}")


async def test_each_row_sees_the_jobs_earlier_rows_created_and_skip_is_the_default(
    core_app: FastAPI, cast: Cast
) -> None:
    rows = [http_row("Twice", group_name="A/B"), http_row("Twice", group_name="A / B /")]
    async with client_for(core_app, cast.alice.session) as alice:
        results, summary = await import_csv(alice, to_csv(rows))
    assert [(r["row"], r["status"]) for r in results] == [(1, "created"), (2, "skipped")]
    assert results[0]["job_id"] == results[1]["job_id"]
    assert summary == {"created": 1, "updated": 0, "skipped": 1, "errors": 0}


@pytest.mark.parametrize(
    ("form", "message"),
    [
        pytest.param(
            {"on_collision": "replace"},
            "on_collision: must be one of overwrite, skip, merge (got 'replace')",
            id="unknown on_collision",
        ),
        pytest.param(
            {"on_collision": "merge", "merge_priority": "csv"},
            "merge_priority: must be one of source, target (got 'csv')",
            id="unknown merge_priority",
        ),
    ],
)
async def test_an_unknown_option_refuses_the_import(
    core_app: FastAPI, cast: Cast, form: dict[str, str], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await post_import(alice, to_csv([http_row("Never")]), **form)
        jobs = await jobs_by_name(alice)
    assert (response.status_code, response.json()) == (400, {"error": message})
    assert jobs == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            b"name,url\r\n\xff\xfe,x\r\n", "the file must be UTF-8 encoded CSV", id="latin"
        ),
        pytest.param(
            b"", "the file is empty: it needs a header row naming the columns", id="empty"
        ),
        pytest.param(
            b"name,cron_expresion\r\nA,* * * * *\r\n",
            "unknown column(s): cron_expresion; the template lists the accepted columns",
            id="misspelt column",
        ),
        pytest.param(
            b"name,url,url\r\n", "column(s) named more than once: url", id="repeated column"
        ),
        pytest.param(
            b"url\r\nhttps://e.x/\r\n", "the header must include a name column", id="no name"
        ),
        pytest.param(
            b'name,url\r\n"A,https://e.x/\r\n',
            "the file is not valid CSV (line 2: unexpected end of data)",
            id="unclosed quote",
        ),
    ],
)
async def test_a_file_that_is_not_a_jobs_csv_is_refused_whole(
    core_app: FastAPI, cast: Cast, content: bytes, message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await post_import(alice, content)
    assert (response.status_code, response.json()) == (400, {"error": message})


async def test_a_value_postgres_cannot_store_refuses_only_its_row(
    core_app: FastAPI, cast: Cast
) -> None:
    # JSON may spell a NUL character, which a jsonb column refuses at insert time.
    nul = {"X": "a\u0000b"}
    rows = [http_row("Nul", headers=json.dumps(nul)), http_row("Fine")]
    async with client_for(core_app, cast.alice.session) as alice:
        api = await alice.post(
            "/api/jobs",
            json={"name": "Direct", "cron_expression": "0 * * * *", "url": "https://e.x/"}
            | {"headers": nul},
        )
        results, summary = await import_csv(alice, to_csv(rows))
        jobs = await jobs_by_name(alice)
    assert api.status_code == 400
    assert [(r["status"], r["error"]) for r in results] == [
        ("error", api.json()["error"]),
        ("created", None),
    ]
    assert summary["errors"] == 1
    assert set(jobs) == {"Fine"}


async def test_values_outside_the_named_columns_refuse_only_their_row(
    core_app: FastAPI, cast: Cast
) -> None:
    # A spreadsheet's trailing comma makes an unnamed column; blank rows are not jobs but
    # still count, so row numbers match the spreadsheet's. Column names ignore case.
    content = (
        "Name,Cron_Expression,URL,\r\n"
        "Padded,0 * * * *,https://e.x/,\r\n"
        ",,,\r\n"
        "Stray,0 * * * *,https://e.x/,oops\r\n"
        "Long,0 * * * *,https://e.x/,,also\r\n"
    )
    async with client_for(core_app, cast.alice.session) as alice:
        results, summary = await import_csv(alice, content)
    assert [(r["row"], r["name"], r["status"], r["error"]) for r in results] == [
        (1, "Padded", "created", None),
        (3, "Stray", "error", "the row has 1 value(s) outside the header's named columns"),
        (4, "Long", "error", "the row has 1 value(s) outside the header's named columns"),
    ]
    assert summary == {"created": 1, "updated": 0, "skipped": 0, "errors": 2}


async def test_a_byte_order_mark_is_accepted_and_a_missing_file_refused(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        results, _ = await import_csv(alice, "\ufeff" + to_csv([http_row("Marked")]))
        missing = await alice.post("/api/jobs/import", data={"on_collision": "skip"})
    assert [r["status"] for r in results] == ["created"]
    assert missing.status_code == 400
    assert missing.json() == {"error": "file is required (a multipart upload of the CSV)"}


async def test_an_upload_over_5_mib_is_refused_with_413(core_app: FastAPI, cast: Cast) -> None:
    head = to_csv([http_row("Big")])
    at_limit = head + "\n" * (MAX_UPLOAD - len(head))  # trailing blank lines are no rows
    async with client_for(core_app, cast.alice.session) as alice:
        too_big = await post_import(alice, at_limit + "\n")
        jobs_after_refusal = await jobs_by_name(alice)
        results, _ = await import_csv(alice, at_limit)
    assert too_big.status_code == 413
    assert too_big.json() == {"error": "the CSV file must be at most 5 MiB"}
    assert jobs_after_refusal == {}
    assert [r["status"] for r in results] == ["created"]


async def test_read_only_carol_may_export_but_not_import_or_fetch_the_template(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.carol.session) as carol:
        template = await carol.get("/api/jobs/import/template")
        imported = await post_import(carol, to_csv([http_row("Nope")]))
        exported = await carol.get("/api/jobs/export")
    assert (template.status_code, template.json()) == (403, FORBIDDEN)
    assert (imported.status_code, imported.json()) == (403, FORBIDDEN)
    assert exported.status_code == 200
    assert parse_csv(exported.text) == [EXPECTED_COLUMNS]


TOKEN = "s3cret-bearer-token"


async def build_catalogue(client: httpx.AsyncClient) -> None:
    """Jobs that use every kind of column: auth of each kind, each schedule type, a script
    with a volume and secret variables, notifications and non-default tuning."""
    volume = await client.post("/api/script-volumes", json={"name": "reports", "max_mode": "rw"})
    assert volume.status_code == 201, volume.text
    tomorrow = datetime.now(UTC).replace(microsecond=123456) + timedelta(days=1)
    common = {"cron_expression": "0 * * * *", "url": "https://example.com/api"}
    await create_job(
        client, **common, name="Report", group_name="Ops/Reports", http_method="POST",
        query_params={"a": "1"}, body={"k": [1, 2], "s": "x,y"}, headers={"X-Trace": "1"},
        auth_type="basic", auth_config={"username": "u", "password": "p"},
        timezone="Europe/Paris",
    )  # fmt: skip
    await create_job(
        client, name="Poll", schedule_type="rate", cron_expression="@every 5m",
        url="https://example.com/poll", body={}, auth_type="bearer",
        auth_config={"token": TOKEN}, enabled=False, loop_enabled=True,
        loop_response_path="data.left", loop_delay_ms=250, loop_jitter_ms=50,
        loop_max_iterations=7, retry_mode="fixed", retry_multiplier=1.5,
        retry_max_attempts=9, pool_count=3, overlap_policy="allow",
        on_failure_url="https://example.com/failed",
    )  # fmt: skip
    await create_job(
        client, **common, name="Keyed", auth_type="api_key",
        auth_config={"api_key": "k-123", "header_name": "X-Key"},
    )  # fmt: skip
    await create_job(
        client, name="Hook", group_name="Hooks", schedule_type="webhook",
        url="https://example.com/hook", notify_on="failure", notify_targets=[2, 1],
    )  # fmt: skip
    await create_job(
        client, name="Once", schedule_type="one_off", run_at=tomorrow.isoformat(),
        one_off_after_run="delete", url="https://example.com/once", body="plain text",
    )  # fmt: skip
    await create_job(
        client, name="Tidy", group_name="Ops", job_type="bash",
        script_body='#!/bin/sh\necho "a, b"\nrm -rf /tmp/old\n', cron_expression="15 2 * * *",
        script_args=["--dry-run", "a,b"], script_secret_vars=["API_TOKEN"],
        capabilities={"volumes": [{"name": "reports", "mode": "rw"}]}, exec_timeout_ms=300000,
        notify_all_targets=True, notify_on="both",
    )  # fmt: skip
    await create_job(client, **common, name="Rapport été", group_name="Équipe/Nuit")


async def test_an_export_imports_back_over_the_same_jobs_unchanged(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await build_catalogue(alice)
        before = await jobs_by_name(alice)
        exported = await alice.get("/api/jobs/export")
        results, summary = await import_csv(alice, exported.text, on_collision="overwrite")
        after = await jobs_by_name(alice)
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/csv")
    assert exported.headers["content-disposition"] == 'attachment; filename="zilean-jobs.csv"'
    header, *rows = parse_csv(exported.text)
    assert header == EXPECTED_COLUMNS
    assert len(rows) == len(before) == 7
    for secret in (TOKEN, "k-123", '"p"'):
        assert secret not in exported.text
    assert {(r["status"], r["error"]) for r in results} == {("updated", None)}
    assert {r["job_id"] for r in results} == {job["id"] for job in before.values()}
    assert summary == {"created": 0, "updated": 7, "skipped": 0, "errors": 0}
    assert {name: without(job, VOLATILE) for name, job in after.items()} == {
        name: without(job, VOLATILE) for name, job in before.items()
    }
    assert all(job["updated_at"] > before[name]["updated_at"] for name, job in after.items())


@pytest.fixture
async def elsewhere(
    postgres_admin_url: str, template_database: str
) -> AsyncIterator[tuple[FastAPI, Cast]]:
    """A second Zilean with a database of its own, as if installed on another host."""
    name = new_database(postgres_admin_url, template=template_database)
    url = with_database(postgres_admin_url, name)
    engine = create_engine(url)
    try:
        app = create_core_app(core_settings(url, PUBLIC_BASE_URL="https://two.example.com"), engine)
        yield app, await build_cast(engine)
    finally:
        await engine.dispose()
        drop_database(postgres_admin_url, name)


async def test_an_export_recreates_its_jobs_on_an_empty_instance_except_unexported_secrets(
    core_app: FastAPI, cast: Cast, elsewhere: tuple[FastAPI, Cast]
) -> None:
    other_app, other_cast = elsewhere
    async with client_for(core_app, cast.alice.session) as alice:
        await build_catalogue(alice)
        originals = await jobs_by_name(alice)
        exported = (await alice.get("/api/jobs/export")).text
    async with client_for(other_app, other_cast.alice.session) as other:
        volume = await other.post("/api/script-volumes", json={"name": "reports", "max_mode": "rw"})
        assert volume.status_code == 201
        results, summary = await import_csv(other, exported, on_collision="overwrite")
        copies = await jobs_by_name(other)
    outcomes = {r["name"]: (r["status"], r["error"]) for r in results}
    assert outcomes == {
        **dict.fromkeys(copies, ("created", None)),
        # Secrets never leave in an export, and these auth types cannot do without one.
        "Poll": ("error", "auth_config.token is required for bearer auth"),
        "Keyed": ("error", "auth_config.api_key is required for api_key auth"),
    }
    assert summary == {"created": 5, "updated": 0, "skipped": 0, "errors": 2}
    assert set(copies) == set(originals) - {"Poll", "Keyed"}
    assert {name: without(job, INSTANCE_OWN) for name, job in copies.items()} == {
        name: without(originals[name], INSTANCE_OWN) for name in copies
    }
    assert copies["Report"]["has_auth_secret"] is False  # its password stayed behind
    hook = next(r for r in results if r["name"] == "Hook")
    assert hook["webhook_url"].startswith(f"https://two.example.com/api/webhooks/{hook['job_id']}/")
    assert copies["Hook"]["webhook_token_hint"] == hook["webhook_token"][:8]


async def test_each_row_is_committed_before_the_next_one_is_read(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    rows = read_csv(to_csv([http_row("First"), http_row("Second")]).encode())
    async with engine.connect() as conn:
        principal = await session_principal(conn, cast.alice.session)
    assert principal is not None
    run = ImportRun(
        principal=principal,
        actor=Actor(user_id=principal.user_id, email=principal.email, ip=None),
        context=RegistryContext(BOX, "UTC", "https://zilean.example.com"),
    )
    stream = import_rows(engine, rows, run)
    first = await anext(stream)
    async with engine.connect() as conn:
        names = (await conn.execute(select(scheduled_jobs.c.name))).scalars().all()
    assert (first.status, names) == ("created", ["First"])
    second = await anext(stream)
    assert second.status == "created"
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_the_export_leaves_notify_columns_blank_without_notify_read(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        created = await alice.post(
            "/api/jobs",
            json={
                "name": "n",
                "url": "https://example.com",
                "cron_expression": "* * * * *",
                "notify_on": "failure",
            },
        )
        assert created.status_code == 201
        full = (await alice.get("/api/jobs/export")).text
    async with client_for(core_app, cast.carol.session) as carol:  # no notify:read
        limited = (await carol.get("/api/jobs/export")).text
    header, full_row = full.splitlines()[:2]
    limited_row = limited.splitlines()[1]
    notify_on = header.split(",").index("notify_on")
    assert full_row.split(",")[notify_on] == "failure"
    assert limited_row.split(",")[notify_on] == ""


async def test_a_body_cell_is_stored_as_written_and_kept_when_a_merge_leaves_it(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    body = '{"city":"Zürich",  "n": 1.50}'
    quoted = '"' + body.replace('"', '""') + '"'
    async with client_for(core_app, cast.alice.session) as alice:
        await import_csv(
            alice, f"name,url,cron_expression,body\nn,https://a.example/x,@daily,{quoted}\n"
        )
        await import_csv(
            alice, "name,retry_max_attempts\nn,3\n", on_collision="merge", merge_priority="source"
        )
    async with engine.connect() as conn:
        stored = (await conn.execute(select(scheduled_jobs.c.body))).scalars().all()
    assert stored == [body]


async def exported_names(client: httpx.AsyncClient, **query: str) -> list[str]:
    response = await client.get("/api/jobs/export", params=query)
    assert response.status_code == 200, response.text
    header, *rows = parse_csv(response.text)
    return [row[header.index("name")] for row in rows]


async def test_an_export_keeps_only_the_jobs_the_list_filters_keep(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        await build_catalogue(alice)
        gated = await alice.post("/api/groups/disable", json={"group_name": "Hooks"})
        assert gated.status_code == 200, gated.text
        everything = await exported_names(alice)
        ops = await exported_names(alice, group="Ops")
        ops_slash = await exported_names(alice, group="Ops/")
        reports = await exported_names(alice, group="Ops/Reports")
        bash = await exported_names(alice, job_type="bash")
        rate = await exported_names(alice, schedule_type="rate")
        disabled = await exported_names(alice, state="disabled")
        searched = await exported_names(alice, search="EXAMPLE.COM/ONCE")
        combined = await exported_names(alice, group="Ops", job_type="http", state="enabled")
        bad = {
            name: await alice.get("/api/jobs/export", params={name: "nope"})
            for name in ("job_type", "schedule_type", "state")
        }
    assert len(everything) == 7
    assert sorted(ops) == sorted(ops_slash) == ["Report", "Tidy"]
    assert reports == ["Report"]
    assert bash == ["Tidy"]
    assert rate == ["Poll"]
    # "Poll" is disabled itself; "Hook" is enabled but its group is not.
    assert sorted(disabled) == ["Hook", "Poll"]
    assert searched == ["Once"]
    assert combined == ["Report"]
    assert {name: (r.status_code, r.json()["error"].split(":")[0]) for name, r in bad.items()} == {
        name: (400, name) for name in bad
    }
    assert bad["state"].json() == {"error": "state: must be one of enabled, disabled"}
