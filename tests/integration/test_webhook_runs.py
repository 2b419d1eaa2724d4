"""Webhook-triggered runs end to end: a call to the real webhook service on loopback, a live
worker (the HTTP worker in process, or a spawned `zilean script-worker`), and what the job
then sent or saw. The payload must reach every attempt: retries and loop iterations too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast
from tests.support.attempts import (
    attempts,
    http_job,
    logged,
    remaining,
    run_now,
    settled,
    worker_for,
)
from tests.support.jobs import put
from tests.support.script_workers import create_script_job, run_and_wait, script_worker
from tests.support.target import HttpTarget, RecordedRequest, ScriptedResponse
from tests.support.webhooks import webhook_job, webhook_service

PAYLOAD = '{\n  "order": 42,\n  "note": "say \\"hi\\"\\tand $(echo no) `echo no`"\n}'
TEMPLATED = {
    "url": "{base}/work?event={{{{webhook_event}}}}&job={{{{ webhook_job_id }}}}",
    "http_method": "POST",
    "headers": {
        "X-Request": "{{webhook_request_id}}",
        "X-Received": "{{webhook_received_at}}",
        "X-Type": "{{webhook_content_type}}",
        "X-Payload": "{{webhook_body}}",
        # Zilean sets the hop header itself, whatever the job says.
        "X-Zilean-Webhook-Hops": "99",
    },
    "body": {"event": "{{webhook_event}}", "payload": "{{webhook_body}}"},
}


def templated_job(target: HttpTarget) -> dict[str, Any]:
    return {**TEMPLATED, "url": TEMPLATED["url"].format(base=target.base_url)}


async def call_webhook(base_url: str, path: str, body: str, **headers: str) -> str:
    """POST `body` as JSON to the webhook; return the request id of the 202."""
    sent = {"Content-Type": "application/json; charset=utf-8", **headers}
    async with httpx.AsyncClient(base_url=base_url) as client:
        response = await client.post(path, content=body.encode(), headers=sent)
    assert response.status_code == 202, response.text
    request_id: str = response.json()["request_id"]
    return request_id


def assert_templated(sent: RecordedRequest, job_id: str, request_id: str, hops_sent: str) -> None:
    """What a request of `templated_job` carries for a call of PAYLOAD."""
    assert sent.query == f"event=order.created&job={job_id}"
    headers = sent.headers
    assert headers["x-request"] == request_id
    assert headers["x-type"] == "application/json; charset=utf-8"
    assert headers["x-received"].endswith("Z")
    # Escaped as a JSON string's contents: no line break can split the header.
    assert json.loads(f'"{headers["x-payload"]}"') == PAYLOAD
    assert headers["x-zilean-webhook-hops"] == hops_sent
    body = json.loads(sent.body)
    assert body == {"event": "order.created", "payload": PAYLOAD}


async def test_an_http_job_gets_the_payload_on_its_first_attempt_and_its_retry(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, target: HttpTarget
) -> None:
    target.respond(ScriptedResponse(status=500, body=b"boom"))
    job, path = await webhook_job(
        core_app, cast.alice.session, **templated_job(target),
        retry_base_delay_ms=10, retry_max_attempts=2,
    )  # fmt: skip
    with webhook_service(database_url) as base_url:
        request_id = await call_webhook(
            base_url, path, PAYLOAD, **{"X-Zilean-Event": "order.created"},
            **{"X-Zilean-Webhook-Hops": "3"},
        )  # fmt: skip
    async with worker_for(database_url) as worker:
        await worker.drain(lambda: settled(engine))
    first, retry = target.wait_for_requests(2)
    for sent in (first, retry):
        assert_templated(sent, job["id"], request_id, hops_sent="4")
    rows = await attempts(engine, job["id"])
    assert [(row["attempt"], row["state"], row["trigger"]) for row in rows] == [
        (1, "retrying", "webhook"),
        (2, "succeeded", "webhook"),
    ]


async def test_the_payload_is_forward_copied_into_each_loop_iteration(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, target: HttpTarget
) -> None:
    target.respond(remaining(2), remaining(1), remaining(0))
    job, path = await webhook_job(
        core_app, cast.alice.session, **templated_job(target), loop_enabled=True, loop_delay_ms=0
    )
    with webhook_service(database_url) as base_url:
        request_id = await call_webhook(
            base_url, path, PAYLOAD, **{"X-Zilean-Event": "order.created"}
        )
    async with worker_for(database_url) as worker:
        await worker.drain(lambda: settled(engine))
    requests = target.wait_for_requests(3)
    assert len(requests) == 3
    for sent in requests:
        assert_templated(sent, job["id"], request_id, hops_sent="1")
    rows = await attempts(engine, job["id"])
    assert [(row["loop_iteration"], row["trigger"]) for row in rows] == [
        (0, "webhook"),
        (1, "webhook"),
        (2, "webhook"),
    ]


async def test_a_run_no_webhook_fired_leaves_the_placeholders_as_written(
    core_app: FastAPI, engine: AsyncEngine, database_url: str, cast: Cast, target: HttpTarget
) -> None:
    job = await http_job(
        core_app, cast.alice.session, target, http_method="POST", body=TEMPLATED["body"]
    )
    assert (await run_now(core_app, cast.alice.session, job["id"])).status_code == 200
    async with worker_for(database_url) as worker:
        await worker.drain(lambda: settled(engine))
    [sent] = target.wait_for_requests(1)
    assert json.loads(sent.body) == TEMPLATED["body"]
    assert sent.headers["x-zilean-webhook-hops"] == "1"


# Prints its stdin, then the webhook variables, then how many arguments it got.
SHOW_WEBHOOK = """\
printf 'stdin<%s>\\n' "$(cat)"
env | grep '^ZILEAN_WEBHOOK_' | sort
printf 'args=%s\\n' "$#"
"""


async def test_a_bash_job_reads_the_body_on_stdin_and_the_metadata_from_its_environment(
    core_app: FastAPI, database_url: str, cast: Cast, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    payload = json.dumps({"cmd": f"$(touch {marker})", "tick": f"`touch {marker}`", "n": 1})
    job = await create_script_job(
        core_app, cast.alice.session, schedule_type="webhook", job_type="bash",
        script_body=SHOW_WEBHOOK, script_args=["fixed"],
    )  # fmt: skip
    path = f"/api/webhooks/{job['id']}/{job['webhook_token']}"
    scheduled = await create_script_job(
        core_app, cast.alice.session, name="scheduled", script_body=SHOW_WEBHOOK, job_type="bash"
    )
    with script_worker("bash", database_url) as worker:
        with webhook_service(database_url) as base_url:
            request_id = await call_webhook(
                base_url, path, payload, **{"X-Gitlab-Event": "Push Hook"},
                **{"X-Zilean-Webhook-Hops": "5"},
            )  # fmt: skip
        [call] = await run_and_wait(core_app, cast.alice.session, job["id"], worker, run=False)
        [plain] = await run_and_wait(core_app, cast.alice.session, scheduled["id"], worker)
    assert call["state"] == "succeeded", call
    lines = call["last_call"]["stdout_snippet"].splitlines()
    assert lines[0] == f"stdin<{payload}>"  # as sent: nothing in it was run or expanded
    received_at = next(line for line in lines if line.startswith("ZILEAN_WEBHOOK_RECEIVED_AT="))
    assert received_at.endswith("Z")
    assert [line for line in lines[1:] if line != received_at] == [
        "ZILEAN_WEBHOOK_CONTENT_TYPE=application/json; charset=utf-8",
        "ZILEAN_WEBHOOK_EVENT=Push Hook",
        "ZILEAN_WEBHOOK_HOPS=5",
        f"ZILEAN_WEBHOOK_JOB_ID={job['id']}",
        f"ZILEAN_WEBHOOK_REQUEST_ID={request_id}",
        "args=1",
    ]
    assert call["last_call"]["script_args"] == ["fixed"]  # the payload never joins them
    assert not marker.exists()
    # A run no webhook fired: empty stdin, no webhook variables at all.
    assert plain["state"] == "succeeded", plain
    assert plain["last_call"]["stdout_snippet"] == "stdin<>\nargs=0\n"


async def test_two_jobs_calling_each_others_webhook_stop_at_eight_hops(
    core_app: FastAPI,
    engine: AsyncEngine,
    database_url: str,
    cast: Cast,
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice = cast.alice.session
    # `allow`: a run calls the other job while the previous run of it may still be
    # recording; retries off, so the refused call ends the chain at once.
    chained = {"overlap_policy": "allow", "retry_enabled": False, "http_method": "POST"}
    ping, ping_path = await webhook_job(core_app, alice, name="ping", **chained)
    pong, pong_path = await webhook_job(core_app, alice, name="pong", **chained)
    with webhook_service(database_url) as base_url:
        body = {"from": "{{webhook_job_id}}", "request": "{{webhook_request_id}}"}
        for job, other in ((ping, pong_path), (pong, ping_path)):
            saved = await put(core_app, alice, job, url=base_url + other, body=body)
            assert saved.status_code == 200, saved.text
        with caplog.at_level(logging.INFO):
            await call_webhook(base_url, ping_path, "{}")
            async with worker_for(database_url) as worker:

                async def chain_ended() -> bool:
                    rows = [
                        *await attempts(engine, ping["id"]),
                        *await attempts(engine, pong["id"]),
                    ]
                    return len(rows) == 8 and await settled(engine)

                await worker.drain(chain_ended)
    accepted = sorted(entry["hops"] for entry in logged(caplog, "webhook.accepted"))
    assert accepted == list(range(8))
    [refused] = logged(caplog, "webhook.hop_limit")
    assert (refused["hops"], refused["job_id"]) == (8, ping["id"])
    ping_rows, pong_rows = await attempts(engine, ping["id"]), await attempts(engine, pong["id"])
    assert [row["state"] for row in ping_rows] == ["succeeded"] * 4
    assert [row["state"] for row in pong_rows] == ["succeeded"] * 3 + ["cancelled"]
    assert pong_rows[-1]["error"].startswith("endpoint returned status 508")
    assert {row["trigger"] for row in [*ping_rows, *pong_rows]} == {"webhook"}
