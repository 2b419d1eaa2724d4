"""The webhook service over a real socket: every answer it gives, and what a call queues.

Jobs are made through core's API; the webhook service is the real app served on
loopback with an engine of its own. No worker runs here, so what a call fires stays on
the queue to be read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import UNKNOWN_ID
from tests.support.attempts import logged, queued_args
from tests.support.jobs import create, put
from tests.support.webhooks import webhook_job, webhook_service
from zilean.execution.payload import Trigger

JSON = {"Content-Type": "application/json"}
NOT_FOUND = {"error": "webhook not found"}
PAYLOAD = b'{"order": 42,\n "note": "a \\"quoted\\" line"}'


@pytest.fixture
def service(database_url: str) -> Iterator[str]:
    with webhook_service(database_url) as base_url:
        yield base_url


@pytest.fixture
async def client(service: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service) as client:
        yield client


async def test_a_call_queues_the_job_with_its_body_and_answers_202_with_a_request_id(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job, path = await webhook_job(core_app, cast.alice.session, pool_count=2)
    headers = {**JSON, "X-Zilean-Webhook-Hops": "3", "X-GitHub-Event": "push"}
    with caplog.at_level(logging.INFO):
        response = await client.post(path, content=PAYLOAD, headers=headers)
    assert response.status_code == 202, response.text
    request_id = response.json()["request_id"]
    assert response.json() == {"request_id": str(uuid.UUID(request_id))}
    queued = await queued_args(engine)
    assert [args.pool_index for args in queued] == [0, 1]  # each member gets the payload
    for args in queued:
        assert (args.trigger, args.webhook_hops) == (Trigger.WEBHOOK, 3)
        assert args.webhook_payload == PAYLOAD.decode()
        assert args.webhook_metadata is not None
        received_at = args.webhook_metadata.pop("received_at")
        assert received_at.endswith("Z")
        assert args.webhook_metadata == {
            "event": "push",
            "content_type": "application/json",
            "request_id": request_id,
            "job_id": job["id"],
        }
    [accepted] = logged(caplog, "webhook.accepted")
    assert accepted["job_id"] == job["id"]
    assert accepted["size"] == len(PAYLOAD)
    assert accepted["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert accepted["content_type"] == "application/json"
    # Neither the payload nor the token ever reaches a log line of ours (the test's own
    # HTTP client logs the URL it called).
    ours = " ".join(str(r.msg) for r in caplog.records if r.name.startswith("zilean"))
    assert "webhook.accepted" in ours
    assert "quoted" not in ours
    assert job["webhook_token"] not in ours


async def _lookup_failures(core_app: FastAPI, cast: Cast) -> dict[str, str]:
    """A path for every way a webhook URL can fail to name a job its webhook may fire."""
    alice = cast.alice.session
    _, rotated_away = await webhook_job(core_app, alice, name="rotated")
    async with client_for(core_app, alice) as admin:
        rotated_id = rotated_away.split("/")[3]
        assert (await admin.post(f"/api/jobs/{rotated_id}/webhook/rotate")).status_code == 200
        disabled, disabled_path = await webhook_job(core_app, alice, name="disabled")
        assert (await admin.post(f"/api/jobs/{disabled['id']}/disable")).status_code == 200
        _, gated_path = await webhook_job(core_app, alice, name="gated", group_name="ops/eu")
        response = await admin.post("/api/groups/disable", json={"group_name": "ops"})
        assert response.status_code == 200
    # A job that was a webhook job, then became a cron job: its old token fires nothing.
    former, former_path = await webhook_job(core_app, alice, name="former")
    assert (await put(core_app, alice, former, schedule_type="cron")).status_code == 200
    cron = await create(core_app, alice, name="cron")
    live, live_path = await webhook_job(core_app, alice, name="live")
    token = live["webhook_token"]
    return {
        "malformed id": f"/api/webhooks/not-a-uuid/{token}",
        "unknown id": f"/api/webhooks/{UNKNOWN_ID}/{token}",
        "wrong token": f"/api/webhooks/{live['id']}/{'x' * len(token)}",
        "another job's token": f"/api/webhooks/{cron['id']}/{token}",
        "rotated-away token": rotated_away,
        "disabled job": disabled_path,
        "disabled group": gated_path,
        "no longer a webhook job": former_path,
        "valid": live_path,
    }


async def test_every_lookup_failure_is_the_same_404_even_past_the_hop_limit(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, client: httpx.AsyncClient
) -> None:
    paths = await _lookup_failures(core_app, cast)
    valid = paths.pop("valid")
    answers = {}
    for case, path in paths.items():
        for hops in ("0", "8", "100"):
            headers = {**JSON, "X-Zilean-Webhook-Hops": hops}
            response = await client.post(path, content=b"{}", headers=headers)
            answers[case, hops] = (response.status_code, response.content, response.headers)
    assert {(status, body) for status, body, _ in answers.values()} == {
        (404, json.dumps(NOT_FOUND, separators=(",", ":")).encode())
    }
    # The same headers too, bar the date: nothing tells the cases apart.
    assert (
        len({tuple(sorted(set(h.items()) - {("date", h["date"])})) for *_, h in answers.values()})
        == 1
    )
    assert await queued_args(engine) == []
    # The valid URL past the limit is the hop refusal; that is only ever shown to its holder.
    refused = await client.post(
        valid, content=b"{}", headers={**JSON, "X-Zilean-Webhook-Hops": "8"}
    )
    assert (refused.status_code, refused.json()) == (508, {"error": "webhook hop limit exceeded"})


@pytest.mark.parametrize(("sent", "counted"), [
    (None, 0), ("", 0), ("abc", 0), ("-1", 0), ("2.5", 0), ("7", 7), ("0", 0), ("+3", 0),
])  # fmt: skip
async def test_an_absent_or_malformed_hop_count_counts_as_zero_and_seven_still_fires(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    client: httpx.AsyncClient,
    sent: str | None,
    counted: int,
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    headers = JSON if sent is None else {**JSON, "X-Zilean-Webhook-Hops": sent}
    response = await client.post(path, content=b"{}", headers=headers)
    assert response.status_code == 202, response.text
    [args] = await queued_args(engine)
    assert args.webhook_hops == counted


@pytest.mark.parametrize("hops", ["8", "9", "1000"])
async def test_a_call_at_eight_hops_or_more_is_508_and_fires_nothing(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, client: httpx.AsyncClient, hops: str
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    headers = {**JSON, "X-Zilean-Webhook-Hops": hops}
    response = await client.post(path, content=b"{}", headers=headers)
    assert (response.status_code, response.json()) == (508, {"error": "webhook hop limit exceeded"})
    assert await queued_args(engine) == []


@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/jsonp", "text/json+xml",
])  # fmt: skip
async def test_a_body_that_does_not_say_json_is_415(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    client: httpx.AsyncClient,
    content_type: str | None,
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = await client.post(path, content=b"{}", headers=headers)
    assert response.status_code == 415
    assert response.json() == {
        "error": "the request must have a JSON Content-Type, such as application/json"
    }
    assert await queued_args(engine) == []


@pytest.mark.parametrize("content_type", [
    "application/json", "Application/JSON; charset=utf-8", "application/vnd.github+json",
    "application/cloudevents+json",
])  # fmt: skip
async def test_any_json_media_type_is_accepted(
    core_app: FastAPI,
    engine: AsyncEngine,
    cast: Cast,
    client: httpx.AsyncClient,
    content_type: str,
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    response = await client.post(path, content=b"[]", headers={"Content-Type": content_type})
    assert response.status_code == 202, response.text
    [args] = await queued_args(engine)
    assert args.webhook_metadata is not None
    assert args.webhook_metadata["content_type"] == content_type


async def test_a_body_over_256_kib_is_413_declared_or_streamed_and_the_cap_itself_fits(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, client: httpx.AsyncClient
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    cap = 256 * 1024
    too_large = {"error": "the request body is larger than the 256 KiB limit"}
    response = await client.post(path, content=b" " * (cap + 1), headers=JSON)
    assert (response.status_code, response.json()) == (413, too_large)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        for _ in range(5):
            yield b" " * (64 * 1024)

    response = await client.post(path, content=chunks(), headers=JSON)
    assert (response.status_code, response.json()) == (413, too_large)
    assert await queued_args(engine) == []
    body = b"[" + b" " * (cap - 2) + b"]"
    response = await client.post(path, content=body, headers=JSON)
    assert response.status_code == 202, response.text
    [args] = await queued_args(engine)
    assert args.webhook_payload == body.decode()


async def test_a_body_that_is_not_utf8_is_400(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, client: httpx.AsyncClient
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session)
    response = await client.post(path, content=b'"\xff"', headers=JSON)
    assert (response.status_code, response.json()) == (
        400,
        {"error": "the request body must be UTF-8 encoded JSON"},
    )
    assert await queued_args(engine) == []


async def test_a_call_while_the_previous_run_holds_the_pool_lock_is_409_under_skip(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, client: httpx.AsyncClient
) -> None:
    _, skipping = await webhook_job(core_app, cast.alice.session, name="skip")
    _, allowing = await webhook_job(
        core_app, cast.alice.session, name="allow", overlap_policy="allow"
    )
    # No worker runs: the first call's run holds its lock until the test ends.
    assert (await client.post(skipping, content=b"{}", headers=JSON)).status_code == 202
    busy = await client.post(skipping, content=b"{}", headers=JSON)
    assert busy.status_code == 409
    assert busy.json() == {
        "error": "run in progress: a previous call to this job is still running; retry later"
    }
    for _ in range(2):
        assert (await client.post(allowing, content=b"{}", headers=JSON)).status_code == 202
    assert len(await queued_args(engine)) == 3


async def test_the_per_address_limiter_answers_429_keyed_by_the_trusted_forwarded_address(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast, database_url: str
) -> None:
    _, path = await webhook_job(core_app, cast.alice.session, overlap_policy="allow")

    async def status(client: httpx.AsyncClient, forwarded: str) -> int:
        headers = {**JSON, "X-Forwarded-For": forwarded}
        return (await client.post(path, content=b"{}", headers=headers)).status_code

    trusted = {"WEBHOOK_TRUST_PROXY_HEADERS": "true"}
    with webhook_service(database_url, limits=(1, 2), **trusted) as base_url:
        async with httpx.AsyncClient(base_url=base_url) as client:
            # Leftmost entry counts; a /64 is one client.
            assert await status(client, "203.0.113.7, 10.0.0.1") == 202
            assert await status(client, "203.0.113.7") == 202
            limited = await client.post(
                path, content=b"{}", headers={**JSON, "X-Forwarded-For": "203.0.113.7"}
            )
            assert limited.status_code == 429
            assert limited.json() == {
                "error": "too many webhook calls from this address; retry later"
            }
            assert int(limited.headers["Retry-After"]) >= 1
            assert await status(client, "203.0.113.8") == 202  # another address, another bucket
            assert await status(client, "2001:db8:1:2::1") == 202
            assert await status(client, "2001:db8:1:2:ffff::9") == 202
            assert await status(client, "2001:db8:1:2:abcd::1") == 429  # the same /64
            assert await status(client, "2001:db8:1:3::1") == 202
            # A blank or invalid leftmost entry falls back to the peer (127.0.0.1).
            assert await status(client, "not-an-ip, 203.0.113.9") == 202
            assert await status(client, ", 203.0.113.9") == 202
            assert await status(client, "999.1.1.1") == 429
    # Untrusted, the header is ignored: forging it does not buy another bucket.
    with webhook_service(database_url, limits=(1, 2)) as base_url:
        async with httpx.AsyncClient(base_url=base_url) as client:
            assert [await status(client, f"198.51.100.{n}") for n in range(3)] == [202, 202, 429]
    assert len(await queued_args(engine)) == 10
