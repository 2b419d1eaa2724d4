"""The notification settings routes: targets, SMTP (and its test route's draft rules),
the Apprise server connection, metrics alarms and job alarms, with their audit entries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import audit_rows
from tests.support.jobs import create
from tests.support.notify import add_target, mail_server, set_smtp
from tests.support.servers import free_port
from zilean.db.tables import app_settings, notify_targets

SLACK = "slack://TokenA/TokenB/TokenC/#ops"


async def test_targets_keep_their_secrets_out_of_every_response_and_audit_entry(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    hook = await add_target(
        core_app, cast.alice.session, name="hook", kind="webhook",
        address="https://hooks.example.com/z", signing_secret="whsec-very-secret",
    )  # fmt: skip
    chat = await add_target(
        core_app, cast.alice.session, name="chat", kind="apprise", address=SLACK
    )
    assert hook["has_signing_secret"] is True
    assert hook["events"] == ["success", "failure", "retry_exhausted", "invocation_alarm"]
    assert chat["address"] == "slack://…"  # the scheme only: the host is a token here
    async with client_for(core_app, cast.alice.session) as alice:
        listed = (await alice.get("/api/notify/targets")).json()
        # A blank secret and a blank Apprise URL keep what is stored.
        kept = await alice.put(
            f"/api/notify/targets/{hook['id']}",
            json={**hook, "events": ["failure"], "signing_secret": ""},
        )
        renamed = await alice.put(
            f"/api/notify/targets/{chat['id']}", json={"name": "chat2", "kind": "apprise"}
        )
    assert [t["name"] for t in listed] == ["hook", "chat"]
    assert kept.json()["has_signing_secret"] is True
    assert kept.json()["events"] == ["failure"]
    assert renamed.json()["address"] == "slack://…"
    everything = json.dumps(
        [listed, kept.json(), renamed.json(), await audit_rows(engine)], default=str
    )
    assert "whsec-very-secret" not in everything
    assert "TokenA" not in everything
    assert "TokenB" not in everything
    async with engine.connect() as conn:
        stored = (await conn.execute(select(notify_targets))).mappings().all()
    assert all(b"TokenB" not in (row["sealed_url"] or b"") for row in stored)  # sealed
    actions = [row["action"] for row in await audit_rows(engine)]
    assert actions.count("notify_target.create") == 2
    assert actions.count("notify_target.update") == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "email", "address": "not-an-address"}, "address: must be an email address"),
        (
            {"kind": "webhook", "address": "ftp://x/y"},
            "address: must be an absolute http or https URL",
        ),
        (
            {"kind": "apprise", "address": "nosuchscheme://x"},
            "address: must be an Apprise service URL",
        ),
        (
            {"kind": "email", "address": "a@b.co", "signing_secret": "s"},
            "signing_secret: only webhook",
        ),
        ({"kind": "webhook", "address": "https://x/y", "events": ["sometimes"]}, "events.0:"),
        ({"kind": "pager", "address": "x"}, "kind:"),
    ],
)
async def test_an_invalid_target_is_a_400(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], message: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.post("/api/notify/targets", json={"name": "t", **body})
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith(message)


async def test_an_unknown_target_is_a_404_and_a_deleted_one_is_gone(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    target = await add_target(
        core_app, cast.alice.session, name="m", kind="email", address="a@b.co"
    )
    async with client_for(core_app, cast.alice.session) as alice:
        assert (await alice.delete(f"/api/notify/targets/{target['id']}")).status_code == 204
        assert (await alice.delete(f"/api/notify/targets/{target['id']}")).status_code == 404
        assert (await alice.post("/api/notify/targets/999/test")).status_code == 404
    assert "notify_target.delete" in [row["action"] for row in await audit_rows(engine)]


# --- SMTP --------------------------------------------------------------------------


async def test_the_smtp_password_is_sealed_never_returned_and_kept_when_left_blank(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    with mail_server() as mail:
        await set_smtp(core_app, cast.alice.session, mail)
        async with client_for(core_app, cast.alice.session) as alice:
            shown = (await alice.get("/api/settings/smtp")).json()
            again = await alice.put(
                "/api/settings/smtp", json={**shown, "password": "", "username": mail.user}
            )
            sent = await alice.post("/api/settings/smtp/test", json={"to": "ops@example.com"})
        [message] = await mail.wait_for(1)
    assert shown == {
        "host": "127.0.0.1", "port": mail.port, "username": "mailer",
        "from": "zilean@example.com", "enabled": True, "has_password": True,
    }  # fmt: skip
    assert again.json()["has_password"] is True
    assert (sent.status_code, sent.json()) == (200, {"ok": True})
    assert mail.logins == [(mail.user, mail.password)]  # the kept password still signs in
    assert message["To"] == "ops@example.com"
    assert message["From"] == "zilean@example.com"
    async with engine.connect() as conn:
        stored = (
            await conn.execute(select(app_settings.c.value).where(app_settings.c.key == "smtp"))
        ).scalar_one()
    audit = json.dumps(await audit_rows(engine), default=str)
    assert mail.password not in json.dumps(stored) + audit
    assert "settings.smtp" in audit


async def test_enabling_smtp_without_a_host_is_a_400(core_app: FastAPI, cast: Cast) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put("/api/settings/smtp", json={"enabled": True, "host": ""})
    assert (response.status_code, response.json()["error"]) == (
        400,
        "host is required when SMTP is enabled",
    )


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "fe80::1", "0.0.0.0", "::", "224.0.0.1"],  # noqa: S104 (refused)
)
async def test_link_local_unspecified_and_multicast_relays_are_refused(
    core_app: FastAPI, cast: Cast, host: str
) -> None:
    draft = {"host": host, "port": 25, "enabled": True}
    async with client_for(core_app, cast.alice.session) as alice:
        saved = await alice.put("/api/settings/smtp", json=draft)
        tested = await alice.post("/api/settings/smtp/test", json={"to": "a@b.co", "draft": draft})
    assert saved.status_code == tested.status_code == 400
    assert "link-local, unspecified and multicast" in saved.json()["error"]


@pytest.mark.parametrize("host", ["10.0.0.25", "192.168.1.10", "127.0.0.1", "mail.internal"])
async def test_private_and_loopback_relays_may_be_saved(
    core_app: FastAPI, cast: Cast, host: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put("/api/settings/smtp", json={"host": host, "enabled": True})
    assert response.status_code == 200, response.text


async def test_the_test_route_answers_409_without_settings_and_400_without_to(
    core_app: FastAPI, cast: Cast
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        unconfigured = await alice.post("/api/settings/smtp/test", json={"to": "a@b.co"})
        missing = await alice.post("/api/settings/smtp/test", json={})
    assert (unconfigured.status_code, unconfigured.json()) == (
        409,
        {"error": "SMTP is not configured"},
    )
    assert (missing.status_code, missing.json()) == (400, {"error": "to is required"})


async def test_a_draft_reuses_the_saved_password_only_for_the_saved_host_and_port(
    core_app: FastAPI, cast: Cast
) -> None:
    with mail_server() as mail, mail_server() as other:
        await set_smtp(core_app, cast.alice.session, mail)
        same = {"host": "127.0.0.1", "port": mail.port, "username": mail.user, "password": ""}
        moved = {**same, "port": other.port}
        async with client_for(core_app, cast.alice.session) as alice:
            reused = await alice.post(
                "/api/settings/smtp/test", json={"to": "a@b.co", "draft": same}
            )
            refused = await alice.post(
                "/api/settings/smtp/test", json={"to": "a@b.co", "draft": moved}
            )
            typed = await alice.post(
                "/api/settings/smtp/test",
                json={"to": "a@b.co", "draft": {**moved, "password": other.password}},
            )
        await mail.wait_for(1)
        await other.wait_for(1)
    assert reused.status_code == 200, reused.text
    assert refused.status_code == 400
    assert "password" in refused.json()["error"]
    assert typed.status_code == 200, typed.text


async def test_a_failed_send_is_a_502_carrying_the_smtp_error(
    core_app: FastAPI, cast: Cast
) -> None:
    with mail_server() as mail:
        draft = {"host": "127.0.0.1", "port": mail.port, "username": mail.user, "password": "wrong"}
        async with client_for(core_app, cast.alice.session) as alice:
            wrong = await alice.post(
                "/api/settings/smtp/test", json={"to": "a@b.co", "draft": draft}
            )
            closed = await alice.post(
                "/api/settings/smtp/test",
                json={"to": "a@b.co", "draft": {"host": "127.0.0.1", "port": free_port()}},
            )
    assert wrong.status_code == 502
    assert wrong.json()["error"].startswith("SMTP error: 535")
    assert "wrong" not in wrong.text
    assert closed.status_code == 502
    assert "could not reach the SMTP server" in closed.json()["error"]


async def test_an_invite_is_emailed_when_smtp_is_configured_and_says_so(
    core_app: FastAPI, cast: Cast
) -> None:
    role = str(cast.role_ids["read_only"])
    async with client_for(core_app, cast.alice.session) as alice:
        unsent = await alice.post(
            "/api/invites", json={"email": "x@example.com", "role_ids": [role]}
        )
    with mail_server() as mail:
        await set_smtp(core_app, cast.alice.session, mail)
        async with client_for(core_app, cast.alice.session) as alice:
            sent = await alice.post(
                "/api/invites", json={"email": "y@example.com", "role_ids": [role]}
            )
        [message] = await mail.wait_for(1)
    assert unsent.status_code == sent.status_code == 201
    assert unsent.json()["email_sent"] is False
    assert sent.json()["email_sent"] is True
    assert message["To"] == "y@example.com"
    assert sent.json()["link"] in message.get_payload(decode=True).decode()


# --- the Apprise server --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (
            {"enabled": True, "server_url": ""},
            400,
            "server_url is required when Apprise is enabled",
        ),
        (
            {"enabled": False, "server_url": "http://apprise:8000/"},
            400,
            "server_url: must end in /notify",
        ),
        ({"enabled": False, "server_url": ""}, 200, None),
        ({"enabled": True, "server_url": "http://apprise:8000/notify"}, 200, None),
    ],
)
async def test_the_apprise_server_url_must_end_in_notify(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], status: int, error: str | None
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put("/api/settings/apprise", json=body)
        shown = await alice.get("/api/settings/apprise")
    assert response.status_code == status, response.text
    if error is not None:
        assert response.json() == {"error": error}
    else:
        assert shown.json() == {**body, "verify_tls": True}


# --- metrics alarms ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "Set a CPU or memory threshold."),
        ({"cpu_percent": None, "memory_mb": None}, "Set a CPU or memory threshold."),
        ({"cpu_percent": -1}, "CPU threshold must be 0 or greater (for example 0.5)."),
        ({"cpu_percent": "lots"}, "CPU threshold must be 0 or greater (for example 0.5)."),
        ({"memory_mb": -0.5}, "Memory threshold must be 0 or greater (for example 256)."),
        ({"memory_mb": True}, "Memory threshold must be 0 or greater (for example 256)."),
    ],
)
async def test_a_metrics_alarm_needs_a_threshold_of_zero_or_more(
    core_app: FastAPI, cast: Cast, body: dict[str, Any], error: str
) -> None:
    async with client_for(core_app, cast.alice.session) as alice:
        response = await alice.put("/api/notify/thresholds/worker", json=body)
    assert (response.status_code, response.json()) == (400, {"error": error})


async def test_one_metrics_alarm_per_service_with_fractional_thresholds(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    mail = await add_target(core_app, cast.alice.session, name="m", kind="email", address="a@b.co")
    hook = await add_target(
        core_app, cast.alice.session, name="h", kind="webhook", address="https://x/y"
    )
    async with client_for(core_app, cast.alice.session) as alice:
        first = await alice.put("/api/notify/thresholds/core", json={"cpu_percent": 0.01})
        second = await alice.put(
            "/api/notify/thresholds/core",
            json={"cpu_percent": 0.5, "memory_mb": 256, "target_ids": [mail["id"]]},
        )
        webhook = await alice.put(
            "/api/notify/thresholds/core", json={"cpu_percent": 1, "target_ids": [hook["id"]]}
        )
        unknown = await alice.put("/api/notify/thresholds/printer", json={"cpu_percent": 1})
        listed = (await alice.get("/api/notify/thresholds")).json()
    assert first.status_code == second.status_code == 200
    assert webhook.status_code == 400
    assert "Apprise and email targets only" in webhook.json()["error"]
    assert unknown.status_code == 400
    [alarm] = listed
    shown = ("service", "cpu_percent", "memory_mb", "target_ids", "last_state")
    assert {k: alarm[k] for k in shown} == {
        "service": "core", "cpu_percent": 0.5, "memory_mb": 256.0, "target_ids": [mail["id"]],
        "last_state": "ok",
    }  # fmt: skip
    assert [r["action"] for r in await audit_rows(engine)].count("notify_threshold.update") == 2


# --- job alarms ------------------------------------------------------------------------

ALARM = {"enabled": True, "metric": "failed", "threshold": 5, "window_minutes": 30}


async def test_job_alarms_crud_with_the_spec_status_codes(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    job = await create(core_app, cast.alice.session)
    other = await create(core_app, cast.alice.session, name="other")
    base = f"/api/jobs/{job['id']}/alarms"
    async with client_for(core_app, cast.alice.session) as alice:
        empty = (await alice.get(base)).json()
        created = await alice.post(base, json=ALARM)
        alarm = created.json()
        updated = await alice.put(f"{base}/{alarm['id']}", json={**alarm, "threshold": 7})
        elsewhere = await alice.put(f"/api/jobs/{other['id']}/alarms/{alarm['id']}", json=ALARM)
        unknown_job = await alice.get("/api/jobs/00000000-0000-4000-8000-000000000000/alarms")
        invalid = [
            (await alice.post(base, json={**ALARM, **change})).status_code
            for change in ({"metric": "slow"}, {"threshold": 0}, {"window_minutes": 1441})
        ]
        listed = (await alice.get(base)).json()
        deleted = await alice.delete(f"{base}/{alarm['id']}")
        gone = await alice.delete(f"{base}/{alarm['id']}")
    assert empty == []
    assert created.status_code == 201
    assert {k: alarm[k] for k in ("metric", "threshold", "window_minutes", "last_state")} == {
        "metric": "failed", "threshold": 5, "window_minutes": 30, "last_state": "ok",
    }  # fmt: skip
    assert alarm["last_changed_at"] is None
    assert updated.status_code == 200
    assert updated.json()["threshold"] == 7
    assert elsewhere.status_code == unknown_job.status_code == 404
    assert invalid == [400, 400, 400]
    assert [a["threshold"] for a in listed] == [7]
    assert (deleted.status_code, gone.status_code) == (204, 404)
    actions = [row["action"] for row in await audit_rows(engine)]
    assert {"job_alarm.create", "job_alarm.update", "job_alarm.delete"} <= set(actions)
