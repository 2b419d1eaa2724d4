"""attempt_throughput: HTTP jobs fired by run-now with pooling, attempts/s end to end.

Subject: `throughput_jobs` HTTP jobs with `pool_count` = `throughput_pool`, created
through the API and pointing at the local target, all fired by the run-now service in
one transaction; the real `zilean worker` (subprocess, WORKER_MAX_CONCURRENCY =
`concurrency`) runs them. Time runs from the database clock just before that commit to
the last `job_attempts.finalized_at` of the batch.

Baselines, as many jobs inserted in one transaction and run at the same concurrency,
each in a process of its own:

- the alternative (`alternative.py`): a bare Procrastinate 3.10 task making the same GET
  with httpx, in a database of its own; time to its last `succeeded` event;
- the limit (`raw_queue.py`): a raw loop claiming rows of a plain table in batches with
  `SKIP LOCKED`, making the same GET with aiohttp, marking the batch finished; time to
  its last `finished_at`.

The three run interleaved, one at a time; an idle process meanwhile only waits on its
listener (and heartbeats, for the workers).
"""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import alternative, raw_queue
from benchmarks.context import BenchContext
from benchmarks.cpu import CpuMeter
from benchmarks.figures import Figure, FigureSpec, On, at_least
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now, last_recorded_at, recorded_since
from benchmarks.processes import ManagedProcess
from benchmarks.queue import clear_queue_history
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_alternative, start_limit, start_worker
from zilean.db.engine import create_engine

VS_ALTERNATIVE = FigureSpec(
    "attempt_throughput_vs_alternative", "attempts/s", at_least(3.0, on=On.RATIO)
)
VS_LIMIT = FigureSpec("attempt_throughput_vs_limit", "attempts/s", at_least(0.5, on=On.RATIO))
RUN_TIMEOUT = 120.0  # seconds one batch may take before the scenario is declared stuck


async def throughput_jobs(
    ctx: BenchContext, engine: AsyncEngine, url: str, count: int
) -> list[uuid.UUID]:
    """Create `count` HTTP jobs of `throughput_pool` members each, GETting the target."""
    async with api_client(engine, url, ctx.postgres.session) as client:
        jobs = [
            await create_job(
                client,
                **http_job(
                    f"throughput {i:04d}",
                    ctx.target_url + "/",
                    pool_count=ctx.scale.throughput_pool,
                ),
            )
            for i in range(count)
        ]
    return [uuid.UUID(job["id"]) for job in jobs]


async def run_batch(
    engine: AsyncEngine,
    job_ids: list[uuid.UUID],
    workers: list[ManagedProcess],
    meter: CpuMeter | None = None,
) -> float:
    """Fire every job by run-now in one transaction; return attempts/s until all are recorded.

    `meter` counts the CPU used from the commit on (the firing itself is the suite's).
    """
    await clear_queue_history(engine)
    watermark = await attempt_watermark(engine)
    committed, queued = await fire_run_now(engine, job_ids)
    started = meter.start() if meter is not None else None

    async def done() -> bool:
        for worker in workers:
            if not worker.alive():
                raise BenchError(f"{worker.name} exited:\n{worker.tail()}")
        recorded, unsuccessful = await recorded_since(engine, watermark)
        if unsuccessful:
            raise BenchError(f"{unsuccessful} attempts did not succeed")
        return recorded >= queued

    await wait_until(done, within=RUN_TIMEOUT, what=f"{queued} recorded attempts")
    elapsed = (await last_recorded_at(engine, watermark) - committed).total_seconds()
    if meter is not None and started is not None:
        meter.stop(started, queued, busy=elapsed)
    return queued / elapsed


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    total = scale.throughput_jobs * scale.throughput_pool
    url = ctx.postgres.clone("throughput")
    alternative_url = ctx.postgres.empty("throughput_alternative")
    engine = create_engine(url)
    alternative_engine = create_engine(alternative_url)
    try:
        with ctx.processes.scope():
            results, cpu = await _measure(ctx, engine, url, alternative_engine, alternative_url)
    finally:
        await engine.dispose()
        await alternative_engine.dispose()
        ctx.postgres.drop(url)
        ctx.postgres.drop(alternative_url)
    note = (
        f"{scale.throughput_jobs} jobs x pool_count {scale.throughput_pool} = {total} attempts "
        f"per round, concurrency {scale.concurrency}; subject {cpu['subject']}"
    )
    return [
        VS_ALTERNATIVE.figure(
            results["subject"],
            results["alternative"],
            note=f"{note}; baseline: a bare Procrastinate 3.10 task making the same GET with "
            f"httpx, nothing recorded, in its own database, {cpu['alternative']}",
        ),
        VS_LIMIT.figure(
            results["subject"],
            results["limit"],
            note=f"{note}; baseline: the raw SKIP LOCKED loop (batches of {scale.concurrency}, "
            f"the same GET with aiohttp on uvloop, one UPDATE per batch), {cpu['limit']}",
        ),
    ]


async def _measure(
    ctx: BenchContext,
    engine: AsyncEngine,
    url: str,
    alternative_engine: AsyncEngine,
    alternative_url: str,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    scale = ctx.scale
    total = scale.throughput_jobs * scale.throughput_pool
    job_ids = await throughput_jobs(ctx, engine, url, scale.throughput_jobs)
    await raw_queue.create_table(engine)
    alternative.install_schema(alternative_url)
    worker = await start_worker(ctx.processes, engine, url, scale.concurrency)
    bare = await start_alternative(
        ctx.processes, alternative_engine, alternative_url, ctx.target_url, scale.concurrency
    )
    limit = await start_limit(ctx.processes, url, ctx.target_url, scale.concurrency)
    meters = {
        "subject": ctx.cpu_meter(worker=worker),
        "alternative": ctx.cpu_meter(worker=bare),
        "limit": ctx.cpu_meter(worker=limit),
    }

    async def subject() -> float:
        return await run_batch(engine, job_ids, [worker], meters["subject"])

    async def alternative_step() -> float:
        await alternative.delete_finished(alternative_engine)
        after = await alternative.max_job_id(alternative_engine)
        committed = await alternative.defer_batch(
            alternative_engine,
            task_name=alternative.HTTP_TASK,
            count=total,
            per_statement=scale.throughput_pool,
        )
        started = meters["alternative"].start()

        await alternative.wait_for_successes(
            alternative_engine, bare, after, total, within=RUN_TIMEOUT
        )
        last = await alternative.last_event_at(alternative_engine, after, "succeeded")
        elapsed = (last - committed).total_seconds()
        meters["alternative"].stop(started, total, busy=elapsed)
        return total / elapsed

    async def limit_step() -> float:
        await raw_queue.clear(engine)
        after = await raw_queue.watermark(engine)
        committed = await raw_queue.insert_batch(engine, total)
        started = meters["limit"].start()

        async def done() -> bool:
            if not limit.alive():
                raise BenchError(f"limit exited:\n{limit.tail()}")
            return (await raw_queue.finished_since(engine, after))[0] >= total

        await wait_until(done, within=RUN_TIMEOUT, what=f"{total} raw rows", interval=0.01)
        _, last = await raw_queue.finished_since(engine, after)
        assert last is not None
        elapsed = (last - committed).total_seconds()
        meters["limit"].stop(started, total, busy=elapsed)
        return total / elapsed

    results = await interleave(
        scale.pairs,
        [("alternative", alternative_step), ("limit", limit_step), ("subject", subject)],
    )
    return results, {kind: meter.describe() for kind, meter in meters.items()}


SCENARIO = Scenario("attempt_throughput", (VS_ALTERNATIVE, VS_LIMIT), run)
