"""Notifications end to end: a live worker runs the job, core's notifier delivers to real
receivers (a signature-checking webhook receiver, an SMTP server, an Apprise `json://`
URL pointing at a local server). Conditions are waited on with timeouts."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.attempts import (
    LiveWorker,
    attempts,
    http_job,
    logged,
    remaining,
    run_now,
    settled,
    worker_for,
)
from tests.support.jobs import create
from tests.support.monitoring import by_label, eventually, insert_sample, parse_exposition
from tests.support.notify import (
    Receiver,
    add_target,
    hanging_receiver,
    mail_server,
    notifier_for,
    receiver,
    set_smtp,
)
from tests.support.target import HttpTarget, ScriptedResponse, http_target
from zilean.db.tables import job_events, notify_events
from zilean.notify.dispatcher import Notifier
from zilean.scheduler import SchedulerService

FAIL = ScriptedResponse(500, b"upstream exploded")
NO_RETRY = {"retry_enabled": False}
# An alarm window in minutes that still counts a run made just before a minute turned:
# a window of 1 is the current minute's bucket alone, empty again once it turns.
WINDOW_ACROSS_A_MINUTE = 2


async def outbox_empty(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        return (await conn.execute(select(func.count()).select_from(notify_events))).scalar() == 0


async def run_to_end(
    app: FastAPI,
    cast: Cast,
    engine: AsyncEngine,
    worker: LiveWorker,
    notifier: Notifier,
    job: dict[str, Any],
    *,
    settle: bool = True,
) -> None:
    """Run the job now, wait for its run to end and its events to be handed to targets
    (and, with `settle`, for those deliveries to finish)."""
    response = await run_now(app, cast.alice.session, job["id"])
    assert response.status_code == 200, response.text
    await worker.drain(lambda: settled(engine))
    await eventually(lambda: outbox_empty(engine), what="outbox drained")
    if settle:
        await notifier.settle()


async def arrived(received: list[float], count: int) -> bool:
    return len(received) >= count


async def webhook(app: FastAPI, cast: Cast, hooks: Receiver, path: str, **fields: Any) -> int:
    target = await add_target(
        app,
        cast.alice.session,
        name=path,
        kind="webhook",
        address=f"{hooks.base_url}{path}",
        **fields,
    )
    return int(target["id"])


async def test_a_signed_delivery_verifies_and_carries_the_job_fields(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        hooks.secrets["/signed"] = "whsec-shared"
        signed = await webhook(core_app, cast, hooks, "/signed", signing_secret="whsec-shared")
        plain = await webhook(core_app, cast, hooks, "/plain")
        job = await http_job(
            core_app, cast.alice.session, target, name="nightly-backup", group_name="Ops/Backups",
            notify_on="failure", notify_targets=[signed, plain], **NO_RETRY,
        )  # fmt: skip
        target.respond(FAIL)
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            await run_to_end(core_app, cast, engine, worker, notifier, job)
            [first, second] = await hooks.wait_for(2)
    by_path = {d.path: d for d in (first, second)}
    signed_delivery, plain_delivery = by_path["/signed"], by_path["/plain"]
    assert signed_delivery.verified is True
    assert "x-zilean-signature" not in plain_delivery.headers
    headers = signed_delivery.headers
    assert headers["x-zilean-event"] == "failure"
    assert headers["content-type"] == "application/json"
    assert uuid.UUID(headers["x-zilean-delivery"]) != uuid.UUID(
        plain_delivery.headers["x-zilean-delivery"]
    )
    assert abs(int(headers["x-zilean-timestamp"]) - time.time()) < 60
    body = signed_delivery.body
    assert {k: body[k] for k in ("event", "job_id", "job_name", "group_name", "job_type")} == {
        "event": "failure", "job_id": job["id"], "job_name": "nightly-backup",
        "group_name": "Ops/Backups", "job_type": "http",
    }  # fmt: skip
    assert body["occurred_at"].endswith("Z")
    assert "500" in body["snippet"]


async def test_each_event_filter_rule(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        for path, events in {
            "/success": ["success"], "/failure": ["failure"], "/exhausted": ["retry_exhausted"],
            "/all": [], "/alarm": ["invocation_alarm"],
        }.items():  # fmt: skip
            await webhook(core_app, cast, hooks, path, events=events)
        common = {"notify_on": "both", "notify_all_targets": True}
        exhausted = await http_job(
            core_app, cast.alice.session, target, name="exhausted", retry_max_attempts=2,
            retry_mode="fixed", retry_base_delay_ms=10, **common,
        )  # fmt: skip
        failed = await http_job(
            core_app, cast.alice.session, target, name="failed", **NO_RETRY, **common
        )
        succeeded = await http_job(core_app, cast.alice.session, target, name="ok", **common)
        gated = await http_job(
            core_app, cast.alice.session, target, name="gated", notify_on="success",
            notify_all_targets=True, **NO_RETRY,
        )  # fmt: skip
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            target.respond(FAIL, FAIL)
            await run_to_end(core_app, cast, engine, worker, notifier, exhausted)
            target.respond(FAIL)
            await run_to_end(core_app, cast, engine, worker, notifier, failed)
            await run_to_end(core_app, cast, engine, worker, notifier, succeeded)
            target.respond(FAIL)
            await run_to_end(core_app, cast, engine, worker, notifier, gated)
    received = {
        path: sorted(d.body["job_name"] + ":" + d.body["event"] for d in hooks.at(path))
        for path in ("/success", "/failure", "/exhausted", "/all", "/alarm")
    }
    assert received == {
        "/success": ["ok:success"],
        "/failure": ["exhausted:retry_exhausted", "failed:failure"],  # failure implies exhausted
        "/exhausted": ["exhausted:retry_exhausted"],
        "/all": ["exhausted:retry_exhausted", "failed:failure", "ok:success"],
        "/alarm": [],
    }


async def test_notify_after_failures_waits_for_the_nth_failure_then_reports_the_recovery(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        hook = await webhook(core_app, cast, hooks, "/ops")
        job = await http_job(
            core_app, cast.alice.session, target, name="flaky", notify_on="failure",
            notify_targets=[hook], notify_after_failures=3, **NO_RETRY,
        )  # fmt: skip
        seen = []
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            for outcome in ("fail", "fail", "fail", "fail", "ok", "ok"):
                if outcome == "fail":
                    target.respond(FAIL)
                await run_to_end(core_app, cast, engine, worker, notifier, job)
                seen.append(len(hooks.deliveries))
    assert seen == [0, 0, 1, 2, 3, 3]  # silent until the third, quiet again once recovered
    third, fourth, recovery = (d.body for d in hooks.deliveries)
    assert (third["event"], third["consecutive_failures"]) == ("failure", 3)
    assert (fourth["event"], fourth["consecutive_failures"]) == ("failure", 4)
    assert (recovery["event"], recovery["recovered"]) == ("success", True)
    assert hooks.deliveries[2].headers["x-zilean-event"] == "success"


async def test_a_reminder_interval_spaces_out_the_notices_of_one_streak(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        hook = await webhook(core_app, cast, hooks, "/ops")
        job = await http_job(
            core_app, cast.alice.session, target, notify_on="failure", notify_targets=[hook],
            notify_reminder_minutes=60, **NO_RETRY,
        )  # fmt: skip
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            for _ in range(3):
                target.respond(FAIL)
                await run_to_end(core_app, cast, engine, worker, notifier, job)
    assert [d.body["consecutive_failures"] for d in hooks.deliveries] == [1]


async def test_pool_members_failing_in_one_firing_make_one_notice_naming_them(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        hook = await webhook(core_app, cast, hooks, "/ops")
        job = await http_job(
            core_app, cast.alice.session, target, name="fanout", pool_count=3, notify_on="both",
            notify_targets=[hook], **NO_RETRY,
        )  # fmt: skip
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            target.respond(FAIL, FAIL, FAIL)
            await run_to_end(core_app, cast, engine, worker, notifier, job)
            await run_to_end(core_app, cast, engine, worker, notifier, job)
    assert len(await attempts(engine, job["id"])) == 6
    failure, success = (d.body for d in hooks.deliveries)
    assert (failure["event"], failure["pool_members"]) == ("failure", [0, 1, 2])
    assert (success["event"], success["pool_members"]) == ("success", [0, 1, 2])


async def test_an_apprise_json_url_and_an_email_target_receive_the_notice(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with http_target() as chat, mail_server() as mail:
        await set_smtp(core_app, cast.alice.session, mail)
        port = chat.base_url.rsplit(":", 1)[1]
        apprise = await add_target(
            core_app, cast.alice.session, name="chat", kind="apprise",
            address=f"json://127.0.0.1:{port}/notify-here",
        )  # fmt: skip
        email = await add_target(
            core_app, cast.alice.session, name="ops", kind="email", address="ops@example.com"
        )
        job = await http_job(
            core_app, cast.alice.session, target, name="billing", notify_on="failure",
            notify_targets=[apprise["id"], email["id"]], **NO_RETRY,
        )  # fmt: skip
        target.respond(FAIL)
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            await run_to_end(core_app, cast, engine, worker, notifier, job)
            [posted] = chat.wait_for_requests(1)
            [message] = await mail.wait_for(1)
    sent = json.loads(posted.body)
    assert posted.path == "/notify-here"
    assert sent["title"] == "Zilean: billing failed"
    assert "billing failed after 1 attempt(s)" in sent["message"]
    assert message["Subject"] == "Zilean: billing failed"
    assert message["To"] == "ops@example.com"


async def test_a_target_that_hangs_never_delays_the_next_attempt(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    """One worker slot, a webhook that never answers and a delivery allowed two minutes:
    the next run still starts at once, and its own notice is handed over meanwhile."""
    with hanging_receiver() as (hang_url, received):
        hung = await add_target(
            core_app, cast.alice.session, name="hung", kind="webhook", address=hang_url
        )
        job = await http_job(
            core_app, cast.alice.session, target, notify_on="both", notify_targets=[hung["id"]]
        )
        async with (
            worker_for(database_url, concurrency=1) as worker,
            notifier_for(engine, delivery_timeout=120.0) as notifier,
        ):
            await run_to_end(core_app, cast, engine, worker, notifier, job, settle=False)
            await eventually(lambda: arrived(received, 1), what="the hanging delivery")
            asked = time.monotonic()
            await run_to_end(core_app, cast, engine, worker, notifier, job, settle=False)
            waited = time.monotonic() - asked
            await eventually(lambda: arrived(received, 2), what="the second delivery")
            in_flight = len(notifier._in_flight)
    assert waited < 5.0  # seconds: the run took milliseconds; the hang would be 120 s
    assert in_flight == 2  # both deliveries still hanging, neither in the worker's way
    rows = await attempts(engine, job["id"])
    assert [row["state"] for row in rows] == ["succeeded", "succeeded"]
    assert [len(target.requests)] == [2]


async def test_an_invocation_alarm_notifies_on_breach_and_recovery_only(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks, http_target() as chat:
        alarm_hook = await webhook(core_app, cast, hooks, "/alarm", events=["invocation_alarm"])
        failure_hook = await webhook(core_app, cast, hooks, "/failure", events=["failure"])
        port = chat.base_url.rsplit(":", 1)[1]
        apprise = await add_target(
            core_app, cast.alice.session, name="chat", kind="apprise",
            address=f"json://127.0.0.1:{port}/chat",
        )  # fmt: skip
        # notify_on none: alarms are not gated by it.
        job = await http_job(
            core_app, cast.alice.session, target, name="busy", notify_on="none",
            notify_targets=[alarm_hook, failure_hook, apprise["id"]],
        )  # fmt: skip
        base = f"/api/jobs/{job['id']}/alarms"
        async with client_for(core_app, cast.alice.session) as alice:
            alarm = (
                await alice.post(
                    base,
                    json={
                        "metric": "total",
                        "threshold": 2,
                        "window_minutes": WINDOW_ACROSS_A_MINUTE,
                    },
                )
            ).json()
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            for _ in range(2):
                await run_to_end(core_app, cast, engine, worker, notifier, job)
            breached = await notifier.evaluate_alarms()
            again = await notifier.evaluate_alarms()
            await notifier.settle()
            async with client_for(core_app, cast.alice.session) as alice:
                shown = (await alice.get(base)).json()
            async with engine.begin() as conn:  # the minute passes: the buckets age out
                await conn.execute(
                    text(
                        "UPDATE job_call_stats SET bucket_start = bucket_start - interval '1 hour'"
                    )
                )
            recovered = await notifier.evaluate_alarms()
            await notifier.settle()
            [_, _] = chat.wait_for_requests(2)
    assert (breached, again, recovered) == (1, 0, 1)
    assert shown[0]["id"] == alarm["id"]
    assert shown[0]["last_state"] == "breached"
    assert shown[0]["last_changed_at"] is not None
    assert hooks.at("/failure") == []
    up, down = (d.body for d in hooks.at("/alarm"))
    alarm_keys = (
        "alarm_state",
        "alarm_metric",
        "alarm_count",
        "alarm_threshold",
        "alarm_window_minutes",
    )
    assert {k: up[k] for k in alarm_keys} == {
        "alarm_state": "breached", "alarm_metric": "total", "alarm_count": "2",
        "alarm_threshold": "2", "alarm_window_minutes": "2",
    }  # fmt: skip
    assert (down["alarm_state"], down["alarm_count"]) == ("ok", "0")
    assert hooks.at("/alarm")[0].headers["x-zilean-event"] == "invocation_alarm"
    titles = [json.loads(r.body)["title"] for r in chat.requests]
    assert titles == ["Zilean: invocation alarm breached", "Zilean: invocation alarm recovered"]
    assert json.loads(chat.requests[0].body)["message"] == (
        "busy had 2 invocations in the last 2 minutes (alarm at >= 2)."
    )


async def test_a_metrics_alarm_notifies_apprise_and_email_on_each_transition(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    with mail_server() as mail:
        await set_smtp(core_app, cast.alice.session, mail)
        email = await add_target(
            core_app, cast.alice.session, name="ops", kind="email", address="ops@example.com"
        )
        async with client_for(core_app, cast.alice.session) as alice:
            response = await alice.put(
                "/api/notify/thresholds/worker",
                json={"cpu_percent": 10.5, "target_ids": [email["id"]]},
            )
        assert response.status_code == 200, response.text
        async with notifier_for(engine) as notifier:
            await insert_sample(engine, "worker", cpu_percent=50.0, age=timedelta(minutes=1))
            up = await notifier.evaluate_thresholds()
            still = await notifier.evaluate_thresholds()
            await insert_sample(engine, "worker", cpu_percent=1.0)
            down = await notifier.evaluate_thresholds()
            await notifier.settle()
            messages = {m["Subject"]: m for m in await mail.wait_for(2)}  # sent concurrently
    assert (up, still, down) == (1, 0, 1)
    assert set(messages) == {
        "Zilean: worker crossed its metrics alarm",
        "Zilean: worker is back under its metrics alarm",
    }
    breached = messages["Zilean: worker crossed its metrics alarm"].get_payload(decode=True)
    assert "CPU 50.00% (alarm at >= 10.5%)" in breached.decode()


async def test_a_capped_loop_is_an_event_on_the_job_and_reaches_subscribed_targets(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        capped = await webhook(core_app, cast, hooks, "/capped", events=["loop_capped"])
        default = await webhook(core_app, cast, hooks, "/default")
        job = await http_job(
            core_app, cast.alice.session, target, name="drainer", loop_enabled=True,
            loop_max_iterations=2, loop_delay_ms=0, notify_targets=[capped, default],
        )  # fmt: skip
        target.respond(remaining(5), remaining(5))
        async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
            await run_to_end(core_app, cast, engine, worker, notifier, job)
            [delivery] = await hooks.wait_for(1)
    assert delivery.path == "/capped"
    assert delivery.headers["x-zilean-event"] == "loop_capped"
    assert (delivery.body["loop_iterations"], delivery.body["loop_cap"]) == (2, 2)
    async with engine.connect() as conn:
        kept = (await conn.execute(select(job_events.c.kind))).scalars().all()
    assert kept == ["loop_capped"]


async def test_skipped_firings_are_one_event_per_run_of_skips(
    core_app: FastAPI,
    cast: Cast,
    engine: AsyncEngine,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A member still running makes the scheduler's next firings skip: the first skip of
    each run of skips is an event (history, activity, Prometheus, subscribed targets)."""
    with receiver() as hooks, hanging_receiver() as (slow_url, started):
        skipped = await webhook(core_app, cast, hooks, "/skips", events=["firing_skipped"])
        # Fires every second; each run hangs until its 2.5 s timeout: two skips per run.
        job = await create(
            core_app, cast.alice.session, name="slow", url=slow_url, http_method="POST",
            cron_expression="@every 1s", exec_timeout_ms=2500, notify_targets=[skipped],
            **NO_RETRY,
        )  # fmt: skip
        scheduler = SchedulerService(engine, database_url, "UTC")
        stop = asyncio.Event()
        with caplog.at_level(logging.INFO):
            async with worker_for(database_url) as worker, notifier_for(engine) as notifier:
                scheduling = asyncio.create_task(scheduler.run(stop))
                await hooks.wait_for(2, within=30.0)
                stop.set()
                await scheduling
                await worker.drain(lambda: settled(engine))
                await notifier.settle()
        async with client_for(core_app, cast.alice.session) as alice:
            events = (await alice.get(f"/api/jobs/{job['id']}/events")).json()
            activity = (await alice.get(f"/api/jobs/{job['id']}/activity")).json()
    skips = [e for e in logged(caplog, "firing.members_skipped") if e["job_id"] == job["id"]]
    exporter = core_app.state.metrics_exporter
    await exporter.refresh()
    exposition = parse_exposition(exporter.exposition().decode())
    counted = by_label(exposition, "zilean_job_events_total", "kind")
    assert len(skips) > len(events) >= 2  # several skips, one event per run of them
    assert len(events) <= len(started)  # at most one per run that was still going
    assert {e["kind"] for e in events} == {"firing_skipped"}
    assert events[0]["detail"] == {"skipped_members": [0]}
    assert [e["kind"] for e in activity["events"]] == [e["kind"] for e in events]
    assert counted["firing_skipped"] == len(events)
    assert {d.headers["x-zilean-event"] for d in hooks.deliveries} == {"firing_skipped"}
    assert hooks.deliveries[0].body["skipped_members"] == [0]


async def test_only_the_leading_core_evaluates_alarms_on_its_interval(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine, database_url: str, target: HttpTarget
) -> None:
    with receiver() as hooks:
        hook = await webhook(core_app, cast, hooks, "/alarm", events=["invocation_alarm"])
        job = await http_job(core_app, cast.alice.session, target, notify_targets=[hook])
        async with client_for(core_app, cast.alice.session) as alice:
            created = await alice.post(
                f"/api/jobs/{job['id']}/alarms",
                json={"metric": "total", "threshold": 1, "window_minutes": WINDOW_ACROSS_A_MINUTE},
            )
        assert created.status_code == 201, created.text
        leading = False
        async with (
            worker_for(database_url) as worker,
            notifier_for(engine, alarm_interval=0.05, leading=lambda: leading) as notifier,
        ):
            await run_to_end(core_app, cast, engine, worker, notifier, job)
            await eventually(lambda: passes(notifier, 20), what="passes while standing by")
            standing_by = (notifier.evaluations, len(hooks.deliveries))
            leading = True
            [delivery] = await hooks.wait_for(1)
            await eventually(lambda: evaluated(notifier, 3), what="evaluations while leading")
    assert standing_by == (0, 0)
    assert delivery.body["alarm_state"] == "breached"
    assert len(hooks.deliveries) == 1  # evaluated again and again: notified once


async def passes(notifier: Notifier, count: int) -> bool:
    return notifier.passes >= count


async def evaluated(notifier: Notifier, count: int) -> bool:
    return notifier.evaluations >= count


async def test_the_target_test_route_reports_what_the_target_did(
    core_app: FastAPI, cast: Cast, engine: AsyncEngine
) -> None:
    with receiver() as hooks, http_target() as server:
        hooks.secrets["/ok"] = "s3cret"
        ok = await webhook(core_app, cast, hooks, "/ok", signing_secret="s3cret")
        moved = await add_target(
            core_app, cast.alice.session, name="moved", kind="webhook",
            address=f"{server.base_url}/moved",
        )  # fmt: skip
        apprise = await add_target(
            core_app, cast.alice.session, name="via server", kind="apprise",
            address="json://127.0.0.1:9/never-called-directly",
        )  # fmt: skip
        server.respond(ScriptedResponse(302, b"", {"Location": f"{hooks.base_url}/ok"}))
        async with client_for(core_app, cast.alice.session) as alice:
            sent = await alice.post(f"/api/notify/targets/{ok}/test")
            redirected = await alice.post(f"/api/notify/targets/{moved['id']}/test")
            configured = await alice.put(
                "/api/settings/apprise",
                json={"enabled": True, "server_url": f"{server.base_url}/notify"},
            )
            through_server = await alice.post(f"/api/notify/targets/{apprise['id']}/test")
            probed = await alice.post(
                "/api/settings/apprise/test", json={"server_url": f"{server.base_url}/notify"}
            )
    assert (sent.status_code, sent.json()) == (200, {"ok": True})
    assert hooks.deliveries[0].verified is True
    assert (redirected.status_code, redirected.json()) == (502, {"error": "answered 302"})
    assert len(hooks.deliveries) == 1  # the redirect was not followed
    assert configured.status_code == through_server.status_code == 200
    notify_call = next(r for r in server.requests if r.path == "/notify")
    assert json.loads(notify_call.body) == {
        "urls": "json://127.0.0.1:9/never-called-directly",
        "title": "Zilean: test notification",
        "body": "This is a test notification from Zilean.",
    }
    assert probed.json() == {"ok": True, "status_code": 200, "error": None}
