"""burst: `burst_jobs` cron jobs due at the same instant; time until all are enqueued.

Subject: the real `Scheduler` (`scheduler/reconciler.py`) in process, driven exactly as
core's loop drives it once an instant falls due: `fire_due()` again and again, yielding
in between, until nothing is due (each firing writes its guard row, takes its overlap
locks and queues its attempt, batched as the scheduler sees fit). Its clock is
pinned through the `now` parameter the scheduler offers for tests, so every round fires
the same instant (09:00 UTC on a January day) without waiting for a wall-clock minute;
the time measured is the firing work itself, not the loop's wake-up (schedule_lag
covers that). Between rounds the guard rows, locks and queue jobs are reset. The jobs
are HTTP jobs spread over several expressions and zones that all mean 09:00 UTC then.

Baseline: the same number of queue jobs inserted through the engine's own enqueue,
PgQueuer's `Queries.enqueue`, one job per call (one transaction each, in autocommit),
`FIRE_CONCURRENCY` calls at a time on as many connections, on the same Postgres and
into the same table (on an entrypoint nothing consumes): what firing one job at a
time would cost in queue inserts alone, with no guard row and no lock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import raw_engine
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, at_most
from benchmarks.harness import BenchError, interleave
from benchmarks.scenario import Scenario
from benchmarks.seeding import ScheduleSpec, api_client, clone_jobs, create_job, http_job
from zilean.db.engine import create_engine, driver_connection
from zilean.db.tables import job_firings, scheduled_jobs
from zilean.queue_engine.statements import LOG_TABLE, QUEUE_TABLE, unfinished
from zilean.scheduler import Scheduler
from zilean.scheduler.reconciler import FIRE_CONCURRENCY
from zilean.schedules import ScheduleType

ISSUE_JOBS = 10_000  # the issue's figure
BURST = FigureSpec("burst_enqueue", "s", at_most(2.0))
DUE = datetime(2031, 1, 7, 9, 0, tzinfo=UTC)  # a January day: Europe/London is on UTC
# Expressions and zones that all fall due at exactly DUE.
EXPRESSIONS = (
    "0 9 * * *", "0 9 1-31 * *", "0 */9 * * *", "0 9,21 * * *", "0 8-10 * * *",
    "0 9 * 1 *", "0 9 * 1-3 *", "0 9 7 1 *",
)  # fmt: skip
ZONES = ("UTC", "Etc/UTC", "Europe/London", "Africa/Abidjan")


def burst_specs(count: int) -> list[ScheduleSpec]:
    pairs = [(e, z) for e in EXPRESSIONS for z in ZONES]
    return [ScheduleSpec(ScheduleType.CRON, *pairs[i % len(pairs)]) for i in range(count)]


async def run(ctx: BenchContext) -> list[Figure]:
    count = ctx.scale.burst_jobs
    url = ctx.postgres.clone("burst")
    engine = create_engine(url)
    try:
        results = await _measure(ctx, engine, url, count)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    note = (
        f"{count:,} jobs due at one instant, fired by the in-process Scheduler with a pinned "
        f"clock (FIRE_CONCURRENCY {FIRE_CONCURRENCY}); baseline: {count:,} PgQueuer "
        f"Queries.enqueue calls of one job each, {FIRE_CONCURRENCY} at a time"
    )
    scale = ISSUE_JOBS / count
    if count != ISSUE_JOBS:
        # Firing is one transaction per job, so its cost is linear in the number of jobs.
        note += (
            f"; --quick measured {count:,} jobs and the value and baseline are scaled "
            f"linearly to the issue's {ISSUE_JOBS:,} (raw seconds in measured_s)"
        )
    return [
        BURST.figure(
            [s * scale for s in results["subject"]],
            [s * scale for s in results["baseline"]],
            note=note,
            measured_jobs=count,
            measured_s=results["subject"],
            measured_baseline_s=results["baseline"],
        )
    ]


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str, count: int
) -> dict[str, list[float]]:
    async with api_client(engine, url, ctx.postgres.session) as client:
        template = await create_job(client, **http_job("burst template", ctx.target_url + "/"))
    await clone_jobs(engine, template["id"], burst_specs(count), "burst")

    async def subject() -> float:
        await _reset(engine)
        scheduler = Scheduler(engine, "UTC")
        await scheduler.reconcile_once(now=DUE - timedelta(seconds=30))
        if scheduler.next_due() != DUE:
            raise BenchError(f"the burst is due at {scheduler.next_due()}, not {DUE}")
        started = time.monotonic()
        # What SchedulerService._steps does once the instant has come: fire a batch,
        # yield, repeat until nothing is due.
        while True:
            if await scheduler.fire_due(now=DUE + timedelta(milliseconds=1)) == 0:
                break
            await asyncio.sleep(0)
        elapsed = time.monotonic() - started
        await _check(engine, count)
        return elapsed

    async def baseline() -> float:
        await _reset(engine)
        async with raw_engine.Enqueuer(url) as enqueuer:
            started = time.monotonic()
            await enqueuer.one_at_a_time(count)
            elapsed = time.monotonic() - started
        await _check(engine, count, fired=0)
        return elapsed

    return await interleave(ctx.scale.pairs, [("baseline", baseline), ("subject", subject)])


async def _reset(engine: AsyncEngine) -> None:
    """Undo a round: guard rows, overlap locks and queue jobs, so each round starts alike."""
    async with engine.begin() as conn:
        await conn.execute(delete(job_firings))
        await conn.execute(update(scheduled_jobs).values(running_since_by_pool={}))
        # Nothing consumes these queue jobs: both sides' are removed unrun, with their log.
        await conn.execute(text(f"DELETE FROM {QUEUE_TABLE}"))  # noqa: S608 - constants
        await conn.execute(text(f"DELETE FROM {LOG_TABLE}"))  # noqa: S608
    async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        await conn.execute(
            text(f"VACUUM ANALYZE job_firings, scheduled_jobs, {QUEUE_TABLE}, {LOG_TABLE}")
        )


async def _check(engine: AsyncEngine, count: int, *, fired: int | None = None) -> None:
    """Check that `count` queue jobs wait, after `fired` firings (default `count`)."""
    expected = count if fired is None else fired
    async with engine.connect() as conn:
        firings = (await conn.execute(select(func.count()).select_from(job_firings))).scalar_one()
        queued = await unfinished(await driver_connection(conn))
    if firings != expected or queued != count:
        raise BenchError(
            f"expected {expected} firings and {count} queue jobs, got {firings} and {queued}"
        )


SCENARIO = Scenario("burst", (BURST,), run)
