"""The scheduler's single steps against a real database, with a pinned clock:
`reconcile_once` reads the registry, `fire_due` queues attempts exactly once per instant."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.attempts import queued_args
from tests.support.queue_engine import accept_inserts, refuse_inserts
from zilean.db.tables import disabled_groups, job_firings, scheduled_jobs
from zilean.scheduler import Scheduler

# 13:00 UTC is 09:00 in New York (EDT, UTC-4) on this summer day.
SUMMER = datetime(2025, 7, 1, 13, 0, tzinfo=UTC)


async def a_job(engine: AsyncEngine, **columns: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    values = {"name": "j", "url": "https://example.com", "cron_expression": "*/5 * * * *"}
    async with engine.begin() as conn:
        await conn.execute(insert(scheduled_jobs).values(id=job_id, **{**values, **columns}))
    return job_id


async def queued(engine: AsyncEngine) -> list[tuple[str, int, str]]:
    """(job id, pool index, trigger) of every queue job, oldest first."""
    return [(args.job_id, args.pool_index, args.trigger) for args in await queued_args(engine)]


async def firings(engine: AsyncEngine) -> list[tuple[uuid.UUID, datetime]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_firings.c.job_id, job_firings.c.scheduled_for).order_by(
                job_firings.c.scheduled_for
            )
        )
        return [(row[0], row[1]) for row in rows]


def a_scheduler(engine: AsyncEngine, zone: str = "UTC") -> Scheduler:
    return Scheduler(engine, zone, catch_up=timedelta(0))


async def test_it_schedules_only_enabled_ungated_cron_and_rate_jobs(engine: AsyncEngine) -> None:
    cron = await a_job(engine)
    rate = await a_job(engine, schedule_type="rate", cron_expression="@every 5m")
    await a_job(engine, enabled=False)
    await a_job(engine, group_name="Ops/Backups")
    await a_job(engine, schedule_type="one_off", run_at=SUMMER + timedelta(days=1))
    await a_job(engine, schedule_type="webhook")
    async with engine.begin() as conn:
        await conn.execute(insert(disabled_groups).values(group_name="Ops"))
    scheduler = a_scheduler(engine)
    result = await scheduler.reconcile_once(SUMMER)
    assert set(scheduler.entries) == {cron, rate}
    assert (result.added, result.removed, result.invalid) == (2, 0, 0)


async def test_edits_in_the_registry_add_keep_re_add_and_remove_entries(
    engine: AsyncEngine,
) -> None:
    kept = await a_job(engine)
    edited = await a_job(engine)
    disabled = await a_job(engine)
    deleted = await a_job(engine)
    await a_job(engine, group_name="Ops")  # gated below
    to_one_off = await a_job(engine)
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER)
    before = dict(scheduler.entries)
    assert len(before) == 6

    added = await a_job(engine, schedule_type="rate", cron_expression="@every 1m")
    async with engine.begin() as conn:
        jobs = scheduled_jobs.c
        await conn.execute(
            update(scheduled_jobs).where(jobs.id == edited).values(cron_expression="0 * * * *")
        )
        await conn.execute(update(scheduled_jobs).where(jobs.id == disabled).values(enabled=False))
        await conn.execute(scheduled_jobs.delete().where(jobs.id == deleted))
        await conn.execute(insert(disabled_groups).values(group_name="Ops"))
        await conn.execute(
            update(scheduled_jobs)
            .where(jobs.id == to_one_off)
            .values(schedule_type="one_off", run_at=SUMMER + timedelta(days=1))
        )
        # An edit the scheduler does not read leaves the entry alone.
        await conn.execute(update(scheduled_jobs).where(jobs.id == kept).values(url="https://x"))
    later = SUMMER + timedelta(minutes=2)
    result = await scheduler.reconcile_once(later)

    assert set(scheduler.entries) == {kept, edited, added}
    assert scheduler.entries[kept] is before[kept]
    assert scheduler.entries[kept].next_fire == SUMMER + timedelta(minutes=5)
    assert scheduler.entries[edited].next_fire == SUMMER + timedelta(hours=1)
    assert scheduler.entries[added].next_fire == later + timedelta(minutes=1)
    assert (result.added, result.removed) == (2, 4)


async def test_an_invalid_stored_expression_is_skipped(engine: AsyncEngine) -> None:
    # Written straight to the table, past the API's validation.
    broken = await a_job(engine, cron_expression="every tuesday")
    fine = await a_job(engine)
    scheduler = a_scheduler(engine)
    result = await scheduler.reconcile_once(SUMMER)
    assert set(scheduler.entries) == {fine}
    assert set(scheduler.invalid) == {broken}
    assert result.invalid == 1
    again = await scheduler.reconcile_once(SUMMER + timedelta(seconds=30))
    assert not again.changed  # known to be invalid: not reported twice


async def test_a_new_york_cron_job_fires_at_the_matching_utc_instant(engine: AsyncEngine) -> None:
    job_id = await a_job(engine, cron_expression="30 9 * * *", timezone="America/New_York")
    scheduler = a_scheduler(engine, zone="Asia/Tokyo")
    await scheduler.reconcile_once(SUMMER)
    instant = datetime(2025, 7, 1, 13, 30, tzinfo=UTC)
    assert scheduler.entries[job_id].next_fire == instant

    assert await scheduler.fire_due(instant - timedelta(seconds=1)) == 0
    assert await queued(engine) == []
    assert await scheduler.fire_due(instant) == 1
    assert await queued(engine) == [(str(job_id), 0, "schedule")]
    assert await firings(engine) == [(job_id, instant)]
    # Advanced to the next day's 09:30 New York time.
    assert scheduler.entries[job_id].next_fire == instant + timedelta(days=1)


async def test_two_schedulers_on_one_database_never_fire_the_same_instant_twice(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, cron_expression="0 * * * *", pool_count=3)
    first, second = a_scheduler(engine), a_scheduler(engine)
    await first.reconcile_once(SUMMER - timedelta(minutes=1))
    await second.reconcile_once(SUMMER - timedelta(minutes=1))

    assert await first.fire_due(SUMMER) == 1
    members = await queued(engine)
    assert members == [(str(job_id), index, "schedule") for index in range(3)]
    # The second core reaches the same instant: the guard row is taken, nothing is queued.
    assert await second.fire_due(SUMMER + timedelta(seconds=1)) == 1
    assert await queued(engine) == members
    assert await firings(engine) == [(job_id, SUMMER)]
    # Both advance past the instant.
    assert first.entries[job_id].next_fire == second.entries[job_id].next_fire


async def test_two_schedulers_firing_the_same_instant_at_the_same_moment_queue_it_once(
    engine: AsyncEngine,
) -> None:
    job_ids = [await a_job(engine, cron_expression="0 * * * *", pool_count=2) for _ in range(5)]
    schedulers = [a_scheduler(engine) for _ in range(3)]
    for scheduler in schedulers:
        await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    await asyncio.gather(*(scheduler.fire_due(SUMMER) for scheduler in schedulers))
    members = await queued(engine)
    assert sorted(members) == sorted(
        (str(job_id), index, "schedule") for job_id in job_ids for index in range(2)
    )
    assert len(await firings(engine)) == 5


async def test_a_firing_does_nothing_once_the_row_no_longer_matches_its_entry(
    engine: AsyncEngine,
) -> None:
    disabled = await a_job(engine, cron_expression="0 * * * *")
    rescheduled = await a_job(engine, cron_expression="0 * * * *")
    deleted = await a_job(engine, cron_expression="0 * * * *")
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    async with engine.begin() as conn:
        jobs = scheduled_jobs.c
        await conn.execute(update(scheduled_jobs).where(jobs.id == disabled).values(enabled=False))
        await conn.execute(
            update(scheduled_jobs).where(jobs.id == rescheduled).values(cron_expression="@daily")
        )
        await conn.execute(scheduled_jobs.delete().where(jobs.id == deleted))
    assert await scheduler.fire_due(SUMMER) == 3
    assert await queued(engine) == []
    assert await firings(engine) == []


async def test_naming_the_default_zone_keeps_the_entry_and_it_still_fires(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, cron_expression="0 * * * *", timezone="")
    scheduler = a_scheduler(engine, zone="Europe/Paris")
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    entry = scheduler.entries[job_id]
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job_id)
            .values(timezone="Europe/Paris")
        )
    await scheduler.reconcile_once(SUMMER - timedelta(seconds=30))
    assert scheduler.entries[job_id] is entry
    assert await scheduler.fire_due(SUMMER) == 1
    assert await firings(engine) == [(job_id, SUMMER)]


@pytest.mark.parametrize(
    "schedule_type",
    [
        "rate",
        "cron",  # a cron job's @every descriptor is the same interval
    ],
)
async def test_an_every_job_is_measured_from_when_its_entry_was_added_and_last_fired(
    engine: AsyncEngine, schedule_type: str
) -> None:
    job_id = await a_job(
        engine,
        schedule_type=schedule_type,
        cron_expression="@every 90s",
        timezone="Asia/Tokyo",
        overlap_policy="allow",
    )
    scheduler = a_scheduler(engine)
    added_at = SUMMER + timedelta(seconds=7)
    await scheduler.reconcile_once(added_at)
    entry = scheduler.entries[job_id]
    assert entry.next_fire == added_at + timedelta(seconds=90)
    assert await scheduler.fire_due(added_at + timedelta(seconds=89)) == 0
    fired_at = added_at + timedelta(seconds=90, milliseconds=300)
    assert await scheduler.fire_due(fired_at) == 1
    assert entry.next_fire == added_at + timedelta(seconds=180)
    # An interval ignores zones: a zone edit neither stops the next firing (even before a
    # reconcile has seen it) nor restarts the interval.
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job_id)
            .values(timezone="Europe/Paris")
        )
    assert await scheduler.fire_due(added_at + timedelta(seconds=180)) == 1
    await scheduler.reconcile_once(added_at + timedelta(seconds=181))
    assert scheduler.entries[job_id] is entry
    assert entry.next_fire == added_at + timedelta(seconds=270)
    assert [fired for _, fired in await firings(engine)] == [
        added_at + timedelta(seconds=90),
        added_at + timedelta(seconds=180),
    ]
    assert len(await queued(engine)) == 2


async def test_a_late_scheduler_fires_an_overdue_entry_once_not_once_per_missed_instant(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine, cron_expression="* * * * *", overlap_policy="allow")
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER)
    late = SUMMER + timedelta(minutes=10, seconds=5)
    assert await scheduler.fire_due(late) == 1
    assert await scheduler.fire_due(late) == 0
    assert await firings(engine) == [(job_id, SUMMER + timedelta(minutes=1))]
    assert scheduler.entries[job_id].next_fire == SUMMER + timedelta(minutes=11)


async def test_a_backlog_is_fired_in_batches(engine: AsyncEngine) -> None:
    for _ in range(25):
        await a_job(engine, cron_expression="0 * * * *")
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    assert [await scheduler.fire_due(SUMMER, limit=10) for _ in range(4)] == [10, 10, 5, 0]
    assert len(await queued(engine)) == 25
    assert scheduler.next_due() == SUMMER + timedelta(hours=1)


async def test_a_failed_firing_is_retried_for_the_same_instant(engine: AsyncEngine) -> None:
    job_id = await a_job(engine, cron_expression="0 * * * *")
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    # Make the firing's transaction fail: the queue refuses every insert.
    await refuse_inserts(engine)
    assert await scheduler.fire_due(SUMMER) == 1
    assert await firings(engine) == []  # rolled back with the queue insert
    entry = scheduler.entries[job_id]
    assert entry.next_fire == SUMMER
    assert scheduler.next_due() == SUMMER + timedelta(seconds=5)
    await accept_inserts(engine)
    assert await scheduler.fire_due(SUMMER + timedelta(seconds=5)) == 1
    assert await firings(engine) == [(job_id, SUMMER)]


async def test_one_failing_firing_in_a_batch_does_not_hold_back_the_others(
    engine: AsyncEngine,
) -> None:
    bad = await a_job(engine, name="bad", cron_expression="0 * * * *")
    good = [await a_job(engine, name=f"good-{n}", cron_expression="0 * * * *") for n in range(9)]
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    # Only the bad job's queue insert is refused, so only its firing can fail.
    await refuse_inserts(engine, for_job=bad)
    assert await scheduler.fire_due(SUMMER) == 10
    assert sorted(job for job, _ in await firings(engine)) == sorted(good)
    assert sorted(uuid.UUID(job) for job, _, _ in await queued(engine)) == sorted(good)
    assert scheduler.entries[bad].next_fire == SUMMER  # retried for the same instant
    assert {scheduler.entries[job].next_fire for job in good} == {SUMMER + timedelta(hours=1)}


async def test_two_thousand_jobs_due_at_once_are_claimed_in_batches_of_few_statements(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO scheduled_jobs (id, name, url, cron_expression) "
                "SELECT gen_random_uuid(), 'j' || n, 'https://example.com', '0 * * * *' "
                "FROM generate_series(1, 2000) AS n"
            )
        )
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER - timedelta(minutes=1))
    statements: list[str] = []

    def count_statements(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", count_statements)
    try:
        taken = 0
        while fired := await scheduler.fire_due(SUMMER):
            taken += fired
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count_statements)
    assert taken == 2000
    assert len(await queued(engine)) == 2000
    # Per transaction: the claim, the locks and the queue inserts (plus BEGIN/COMMIT,
    # which the driver sends outside this hook): a few statements per hundreds of jobs.
    assert len(statements) <= 3 * 2000 // 250 + 3


async def test_reconciling_a_thousand_unchanged_jobs_reads_them_once_then_only_a_version(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs),
            [
                {
                    "id": uuid.uuid4(),
                    "name": f"j{n}",
                    "cron_expression": f"{n % 60} {n % 24} * * *",
                    "timezone": ("", "Europe/Paris", "America/New_York")[n % 3],
                }
                for n in range(1000)
            ],
        )
        count = (await conn.execute(select(func.count()).select_from(scheduled_jobs))).scalar()
    assert count == 1000
    scheduler = a_scheduler(engine)
    statements: list[str] = []

    def count_statements(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", count_statements)
    try:
        first = await scheduler.reconcile_once(SUMMER)
        tick = await scheduler.reconcile_once(SUMMER + timedelta(seconds=30))
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count_statements)
    assert first.added == 1000
    assert not tick.changed
    assert len(statements) == 2
    # The idle tick read the registry version alone, not the thousand rows.
    assert "scheduled_jobs" not in statements[1]
    assert "registry_version" in statements[1]


async def test_a_full_reconcile_rereads_the_jobs_only_when_a_scheduled_column_changed(
    engine: AsyncEngine,
) -> None:
    job_id = await a_job(engine)
    scheduler = a_scheduler(engine)
    await scheduler.reconcile_once(SUMMER)
    statements: list[str] = []

    def count_statements(*args: Any) -> None:
        statements.append(args[2])

    async def tick() -> int:
        statements.clear()
        event.listen(engine.sync_engine, "before_cursor_execute", count_statements)
        try:
            await scheduler.reconcile_once(SUMMER)
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count_statements)
        return len(statements)

    # What an attempt writes (counters, locks) leaves the version alone.
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job_id)
            .values(invocations_total=scheduled_jobs.c.invocations_total + 1)
        )
    assert await tick() == 1
    # A schedule edit whose notification nobody heard is still found by the next pass.
    async with engine.begin() as conn:
        await conn.execute(
            update(scheduled_jobs)
            .where(scheduled_jobs.c.id == job_id)
            .values(cron_expression="*/7 * * * *")
        )
    assert await tick() == 2
    assert scheduler.entries[job_id].key.expression == "*/7 * * * *"
    # So is a group being disabled, and then everything is idle again.
    async with engine.begin() as conn:
        await conn.execute(insert(disabled_groups).values(group_name=""))
    assert await tick() == 2
    assert job_id not in scheduler.entries
    assert await tick() == 1


async def test_one_transaction_bumps_the_registry_version_once_however_many_rows(
    engine: AsyncEngine,
) -> None:
    async def version() -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(text("SELECT version FROM registry_version"))).scalar())

    before = await version()
    async with engine.begin() as conn:
        await conn.execute(
            insert(scheduled_jobs),
            [
                {"id": uuid.uuid4(), "name": f"j{n}", "cron_expression": "* * * * *"}
                for n in range(50)
            ],
        )
        await conn.execute(update(scheduled_jobs).values(enabled=False))
    after_bulk = await version()
    await a_job(engine)
    await a_job(engine)
    assert after_bulk == before + 1
    assert await version() == before + 3  # two more transactions
