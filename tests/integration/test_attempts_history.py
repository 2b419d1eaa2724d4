"""What the call history says about each attempt, read through `GET /api/jobs/{id}/calls`:
its state, its `last_call`, what is redacted from both, and the body that was sent."""

from __future__ import annotations

import base64
import json
from typing import Any

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import add_variable, calls, http_job, run_now, settled, worker_for
from tests.support.jobs import create
from tests.support.target import ScriptedResponse, http_target
from zilean.jobkinds.redaction import REDACTED

FAIL = ScriptedResponse(status=500, body=b"boom")
# Every key of an HTTP attempt's `last_call`: the four every job kind records, then HTTP's.
LAST_CALL_KEYS = {
    "job_name", "timeout_ms", "duration_ms", "error",
    "method", "url", "status_code", "response_snippet",
}  # fmt: skip


async def history(app: FastAPI, session: str, job_id: str) -> list[dict[str, Any]]:
    """The job's calls through the API, oldest first."""
    response = await calls(app, session, job_id)
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()
    return entries[::-1]


async def test_each_failure_reads_retrying_failed_or_cancelled(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    with http_target() as target:
        target.respond(FAIL, FAIL, FAIL)  # then 200
        budget = await http_job(
            core_app, cast.alice.session, target, name="budget", retry_max_attempts=2,
            retry_base_delay_ms=10, exec_timeout_ms=7_000,
        )  # fmt: skip
        async with worker_for(database_url) as worker:
            await run_now(core_app, cast.alice.session, budget["id"])
            await worker.drain(lambda: settled(engine))
            no_retries = await http_job(
                core_app, cast.alice.session, target, name="once", retry_enabled=False
            )
            await run_now(core_app, cast.alice.session, no_retries["id"])
            await worker.drain(lambda: settled(engine))
            succeeds = await http_job(core_app, cast.alice.session, target, name="fine")
            await run_now(core_app, cast.alice.session, succeeds["id"])
            misconfigured = await create(
                core_app, cast.alice.session, name="bad url", url="http://{{HOST}}:99999/x"
            )
            await run_now(core_app, cast.alice.session, misconfigured["id"])
            await worker.drain(lambda: settled(engine))
        alice = cast.alice.session
        budget_calls = await history(core_app, alice, budget["id"])
        once = await history(core_app, alice, no_retries["id"])
        fine = await history(core_app, alice, succeeds["id"])
        bad = await history(core_app, alice, misconfigured["id"])

    url = f"{target.base_url}/work"
    # A failure that is retried, then the one that spends the budget.
    assert [(entry["attempt"], entry["state"]) for entry in budget_calls] == [
        (1, "retrying"),
        (2, "failed"),
    ]
    for entry in budget_calls:
        assert set(entry["last_call"]) == LAST_CALL_KEYS
        assert entry["last_call"] == {
            "job_name": "budget",
            "timeout_ms": 7_000,
            "duration_ms": entry["duration_ms"],
            "error": "endpoint returned status 500: boom",
            "method": "GET",
            "url": url,
            "status_code": 500,
            "response_snippet": "boom",
        }
        assert entry["last_error"] == entry["last_call"]["error"]
        assert isinstance(entry["duration_ms"], int)
    # Retries off: the failure is a cancellation.
    [cancelled] = once
    assert (cancelled["state"], cancelled["last_call"]["status_code"]) == ("cancelled", 500)
    [succeeded] = fine
    assert succeeded["state"] == "succeeded"
    assert (succeeded["last_error"], succeeded["last_call"]["error"]) == (None, None)
    assert succeeded["last_call"]["timeout_ms"] == 60_000  # the default timeout
    # A configuration error is a cancellation too, and no request was ever built.
    [never_sent] = bad
    assert never_sent["state"] == "cancelled"
    assert never_sent["last_error"].startswith("url 'http://{{HOST}}:99999/x'")
    assert never_sent["last_call"] == {
        "job_name": "bad url",
        "timeout_ms": 60_000,
        "duration_ms": None,
        "error": never_sent["last_error"],
        "method": None,
        "url": None,
        "status_code": None,
        "response_snippet": None,
    }


TOKEN = "tok-5ecret-value"  # a secret variable the job references
UNUSED = "unused-s3cret"  # a secret variable no job references
SHORT = "Zq"  # a secret variable too short to have been redacted before
PASSWORD = "Xj"  # the job's own basic-auth password, not a variable


async def test_every_secret_and_credential_is_redacted_wherever_it_is_recorded(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    for name, value in [("TOKEN", TOKEN), ("UNUSED", UNUSED), ("SHORT", SHORT)]:
        await add_variable(core_app, cast.alice.session, name, value, secret=True)
    pair = base64.b64encode(f"svc:{PASSWORD}".encode()).decode()
    echoed = [TOKEN, UNUSED, SHORT, PASSWORD, pair]
    with http_target() as target, http_target() as callbacks:
        # The endpoint echoes every value back, as a misbehaving one might.
        target.respond(ScriptedResponse(status=401, body=json.dumps(echoed).encode()))
        job = await create(
            core_app, cast.alice.session, name="echo", retry_enabled=False,
            url=f"{target.base_url}/work/{{{{TOKEN}}}}", query_params={"s": "{{SHORT}}"},
            auth_type="basic", auth_config={"username": "svc", "password": PASSWORD},
            on_failure_url=f"{callbacks.base_url}/failed",
        )  # fmt: skip
        await run_now(core_app, cast.alice.session, job["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
        response = await calls(core_app, cast.alice.session, job["id"])
    [sent] = target.requests
    assert (sent.path, sent.query) == (f"/work/{TOKEN}", f"s={SHORT}")  # the real values
    assert sent.headers["authorization"] == f"Basic {pair}"
    [entry] = response.json()
    snippet = json.dumps([REDACTED] * len(echoed))
    assert entry["last_error"] == f"endpoint returned status 401: {snippet}"
    assert entry["last_call"]["error"] == entry["last_error"]
    assert entry["last_call"]["url"] == f"{target.base_url}/work/{REDACTED}?s={REDACTED}"
    assert entry["last_call"]["response_snippet"] == snippet
    [callback] = callbacks.requests
    assert json.loads(callback.body)["last_error"] == entry["last_error"]
    async with engine.connect() as conn:
        stored = await conn.scalar(
            text("SELECT row_to_json(job_attempts)::text FROM job_attempts WHERE job_id = :id"),
            {"id": job["id"]},
        )
    for recorded in (response.text, callback.body.decode(), stored):
        assert not any(value in recorded for value in echoed), recorded


async def test_the_body_is_sent_as_the_client_wrote_it_after_substitution(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast
) -> None:
    """Byte for byte: non-ASCII characters unescaped, spacing and number spelling kept,
    through a create, a PATCH of another field and a PUT of the job as GET showed it; a
    PATCH that sets a new body is sent as that patch wrote it."""
    await add_variable(core_app, cast.alice.session, "WHO", "Ünal")
    raw = '{"city":"Zürich",  "n": 1.50, "who": "{{ WHO }}", "kept": "\\u00e9"}'
    new_raw = '[1.0,  "ü"]'
    with http_target() as target:
        job_text = (
            f'{{"name": "as written", "url": "{target.base_url}/work", "http_method": "POST",'
            f' "cron_expression": "@daily", "body":  {raw} }}'
        )
        async with client_for(core_app, cast.alice.session) as alice:
            created = await alice.post(
                "/api/jobs", content=job_text.encode(), headers={"content-type": "application/json"}
            )
            path = f"/api/jobs/{created.json()['id']}"
            patched = await alice.patch(path, json={"retry_max_attempts": 2})
            shown = (await alice.get(path)).json()
            replaced = await alice.put(path, json=shown)
        assert (created.status_code, patched.status_code, replaced.status_code) == (201, 200, 200)
        await run_now(core_app, cast.alice.session, shown["id"])
        async with worker_for(database_url) as worker:
            await worker.drain(lambda: settled(engine))
            async with client_for(core_app, cast.alice.session) as alice:
                new_body = await alice.patch(
                    path,
                    content=f'{{"body": {new_raw}}}'.encode(),
                    headers={"content-type": "application/merge-patch+json"},
                )
            assert new_body.status_code == 200, new_body.text
            await run_now(core_app, cast.alice.session, shown["id"])

            async def second_sent() -> bool:
                return len(target.requests) == 2 and await settled(engine)

            await worker.drain(second_sent)
    first, second = target.requests
    assert first.body == raw.replace("{{ WHO }}", "Ünal").encode()
    assert first.headers["content-type"] == "application/json"
    assert second.body == new_raw.encode()
