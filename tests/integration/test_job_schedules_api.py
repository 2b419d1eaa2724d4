"""Job groups, next fire times and the schedule preview through the admin API."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import Cast, client_for
from tests.support.api import FORBIDDEN
from tests.support.jobs import BASE, create
from zilean.db.tables import disabled_groups, scheduled_jobs


async def test_disabling_a_group_checks_its_name_and_enabling_accepts_any_name(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    too_long = "x" * 256
    too_deep = "/".join(["l"] * 17)
    async with engine.begin() as conn:
        await conn.execute(insert(disabled_groups).values(group_name=too_long))
    async with client_for(core_app, cast.alice.session) as alice:

        async def disable(name: str) -> httpx.Response:
            return await alice.post("/api/groups/disable", json={"group_name": name})

        blank, long_, deep = [await disable(name) for name in (" / ", too_long, too_deep)]
        ops = await disable(" Ops / ")
        listed = (await alice.get("/api/groups/disabled")).json()
        reenabled = await alice.post("/api/groups/enable", json={"group_name": too_long})
        deep_enabled = await alice.post("/api/groups/enable", json={"group_name": too_deep})
        after = (await alice.get("/api/groups/disabled")).json()
    assert (blank.status_code, blank.json()) == (400, {"error": "group_name is required"})
    assert long_.json() == {"error": "group_name must be at most 255 bytes"}
    assert deep.json() == {"error": "group_name must be at most 16 levels deep"}
    assert (long_.status_code, deep.status_code) == (400, 400)
    assert ops.json() == {"group_name": "Ops", "disabled": True}
    assert listed == ["Ops", too_long]
    assert reenabled.json() == {"group_name": too_long, "disabled": False}
    assert deep_enabled.status_code == 200
    assert after == ["Ops"]


@pytest.mark.parametrize(
    ("disabled", "gated"),
    [
        ("Ops", True),  # the parent group gates its children
        ("Ops/Backups", True),  # the job's own group
        ("Op", False),  # a prefix that is not a parent
        ("Ops/Back", False),  # nor here
        ("Ops/Backups/Nightly", False),  # a child group does not gate its parent's jobs
    ],
)
async def test_a_disabled_group_gates_the_jobs_within_it(
    core_app: FastAPI, cast: Cast, disabled: str, gated: bool
) -> None:
    job = await create(core_app, cast.alice.session, group_name="Ops/Backups")
    async with client_for(core_app, cast.alice.session) as alice:
        await alice.post("/api/groups/disable", json={"group_name": disabled})
        while_disabled = (await alice.get(f"/api/jobs/{job['id']}")).json()
        listed = (await alice.get("/api/jobs")).json()
        await alice.post("/api/groups/enable", json={"group_name": disabled})
        reenabled = (await alice.get(f"/api/jobs/{job['id']}")).json()
    assert while_disabled["group_gated"] is gated
    assert while_disabled["next_run_at"] == (None if gated else job["next_run_at"])
    assert listed == [while_disabled]
    assert (reenabled["group_gated"], reenabled["next_run_at"]) == (False, job["next_run_at"])


async def test_a_job_stored_with_an_over_long_group_still_works_until_saved(
    core_app: FastAPI, engine: AsyncEngine, cast: Cast
) -> None:
    legacy = "x" * 300  # written before the limits existed
    job = await create(core_app, cast.alice.session)
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs).where(scheduled_jobs.c.id == job["id"]).values(group_name=legacy)
        )
    path = f"/api/jobs/{job['id']}"
    async with client_for(core_app, cast.alice.session) as alice:
        shown = (await alice.get(path)).json()
        disabled = await alice.post(f"{path}/disable")
        enabled = await alice.post(f"{path}/enable")
        resaved = await alice.put(path, json=shown)
        fixed = await alice.put(path, json={**shown, "group_name": "Legacy"})
        deleted = await alice.delete(path)
    assert shown["group_name"] == legacy
    assert (disabled.status_code, enabled.status_code) == (200, 200)
    assert resaved.json() == {"error": "group_name must be at most 255 bytes"}
    assert fixed.json()["group_name"] == "Legacy"
    assert deleted.status_code == 204


def next_nine_in_new_york(after: datetime) -> datetime:
    zone = ZoneInfo("America/New_York")
    day = after.astimezone(zone).date()
    while (fire := datetime.combine(day, time(9), tzinfo=zone)) <= after:
        day += timedelta(days=1)
    return fire.astimezone(UTC)


async def test_next_run_at_follows_the_jobs_own_time_zone(core_app: FastAPI, cast: Cast) -> None:
    before = datetime.now(UTC)
    job = await create(
        core_app, cast.alice.session, cron_expression="0 9 * * *", timezone="America/New_York"
    )
    after = datetime.now(UTC)
    fires = datetime.fromisoformat(job["next_run_at"])
    assert fires in {next_nine_in_new_york(before), next_nine_in_new_york(after)}
    assert fires.hour in (13, 14)  # 09:00 EDT or EST
    utc_job = await create(core_app, cast.alice.session, cron_expression="0 9 * * *")
    assert utc_job["next_run_at"].endswith("T09:00:00Z")  # the tests pin TZ=UTC


async def preview(app: FastAPI, session: str, **body: Any) -> httpx.Response:
    async with client_for(app, session) as client:
        return await client.post("/api/schedules/preview", json=body)


async def test_the_schedule_preview_lists_utc_fire_times_across_a_dst_change(
    core_app: FastAPI, cast: Cast
) -> None:
    response = await preview(
        core_app, cast.carol.session, cron_expression="0 9 * * *",
        timezone="America/New_York", count=3, **{"from": "2026-03-07T00:00:00Z"},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.json() == [
        "2026-03-07T14:00:00Z",  # EST
        "2026-03-08T13:00:00Z",  # EDT from 8 March
        "2026-03-09T13:00:00Z",
    ]
    rate = await preview(
        core_app, cast.carol.session, schedule_type="rate", cron_expression="@every 90m",
        count=2, **{"from": "2026-01-01T00:00:00Z"},
    )  # fmt: skip
    assert rate.json() == ["2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"]
    # A cron job's @every descriptor is the same interval, whatever its zone.
    every = await preview(
        core_app, cast.carol.session, cron_expression="@every 90m", timezone="Asia/Tokyo",
        count=2, **{"from": "2026-01-01T00:00:00Z"},
    )  # fmt: skip
    assert every.json() == rate.json()
    capped = await preview(core_app, cast.carol.session, cron_expression="* * * * *", count=500)
    assert len(capped.json()) == 100


@pytest.mark.parametrize(
    "schedule",
    [
        {"cron_expression": "61 * * * *"},  # a bad minute
        {"cron_expression": "0 0 3 * * *"},  # six fields
        {"cron_expression": "@every 5d"},  # an @every without a Go duration unit
        {"schedule_type": "rate", "cron_expression": "5m"},  # a rate without @every
        {"timezone": "Mars/Olympus_Mons"},  # an unknown zone
        {"schedule_type": "one_off"},  # a one-off without run_at
        {"schedule_type": "hourly"},  # an unknown schedule type
    ],
)
async def test_the_preview_rejects_a_schedule_with_the_job_apis_message(
    core_app: FastAPI, cast: Cast, schedule: dict[str, str]
) -> None:
    fields = {"cron_expression": BASE["cron_expression"], **schedule}
    response = await preview(core_app, cast.alice.session, **fields)
    async with client_for(core_app, cast.alice.session) as alice:
        job_response = await alice.post("/api/jobs", json={**BASE, **schedule})
    assert (response.status_code, job_response.status_code) == (400, 400)
    assert response.json() == job_response.json()


async def test_the_preview_needs_jobs_read(core_app: FastAPI, cast: Cast) -> None:
    response = await preview(core_app, cast.dave.session, cron_expression="@daily")
    assert (response.status_code, response.json()) == (403, FORBIDDEN)


async def test_a_cron_job_with_an_every_descriptor_runs_next_one_interval_from_now(
    core_app: FastAPI, cast: Cast
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    job = await create(
        core_app, cast.alice.session, cron_expression="@every 90m", timezone="Asia/Tokyo"
    )
    after = datetime.now(UTC)
    assert (job["schedule_type"], job["cron_expression"]) == ("cron", "@every 90m")
    fires = datetime.fromisoformat(job["next_run_at"])
    # Elapsed time, not Tokyo's clock: 90 minutes after a whole second of the request.
    assert before + timedelta(minutes=90) <= fires <= after + timedelta(minutes=90)
    assert fires.microsecond == 0
    async with client_for(core_app, cast.alice.session) as alice:
        shown = (await alice.get(f"/api/jobs/{job['id']}")).json()
    assert before + timedelta(minutes=90) <= datetime.fromisoformat(shown["next_run_at"])
