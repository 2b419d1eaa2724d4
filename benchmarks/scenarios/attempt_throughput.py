"""attempt_throughput: no-op HTTP jobs fired by run-now with pooling, attempts/s end to end.

Subject: `throughput_jobs` HTTP jobs with `pool_count` = `throughput_pool`, created
through the API and pointing at the local target, all fired by the run-now service in
one transaction; the real `zilean worker` (subprocess, WORKER_MAX_CONCURRENCY =
`concurrency`) runs them. Time runs from the database clock just before that commit to
the last `job_attempts.finalized_at` of the batch.

Baselines, in the same database and at the same concurrency, on a bare Procrastinate
worker (`baseline_worker.py`): the same number of jobs inserted in one transaction,
`pool` per statement as a firing does, doing (a) the same GET with the same HTTP client
and nothing recorded, (b) nothing at all. Time runs to their last `succeeded` event.
The three run interleaved, one at a time; the idle worker meanwhile only heartbeats and
polls every few seconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.baseline_worker import BASELINE_QUEUE, HTTP_TASK, NOOP_TASK
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, On, at_least
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now, last_recorded_at, recorded_since
from benchmarks.queue import defer_batch, delete_finished, finished_count, last_event_at, max_job_id
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_baseline_worker, start_worker
from zilean.db.engine import create_engine

VS_HTTP = FigureSpec("attempt_throughput_vs_http", "attempts/s", at_least(0.90, on=On.RATIO))
VS_NOOP = FigureSpec("attempt_throughput_vs_noop", "attempts/s", at_least(0.45, on=On.RATIO))
RUN_TIMEOUT = 120.0  # seconds one batch may take before the scenario is declared stuck


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    total = scale.throughput_jobs * scale.throughput_pool
    url = ctx.postgres.clone("throughput")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            results, cpu = await _measure(ctx, engine, url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    note = (
        f"{scale.throughput_jobs} jobs x pool_count {scale.throughput_pool} = {total} attempts "
        f"per round, concurrency {scale.concurrency}; subject {cpu['subject']}"
    )
    return [
        VS_HTTP.figure(
            results["subject"],
            results["http"],
            note=f"{note}; baseline: bare Procrastinate task making the same GET, nothing "
            f"recorded, {cpu['http']}",
        ),
        VS_NOOP.figure(
            results["subject"],
            results["noop"],
            note=f"{note}; baseline: bare Procrastinate no-op task, {cpu['noop']}",
        ),
    ]


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[str, list[float]], dict[str, str]]:
    scale = ctx.scale
    total = scale.throughput_jobs * scale.throughput_pool
    async with api_client(engine, url, ctx.postgres.session) as client:
        jobs = [
            await create_job(
                client,
                **http_job(
                    f"throughput {i:04d}", ctx.target_url + "/", pool_count=scale.throughput_pool
                ),
            )
            for i in range(scale.throughput_jobs)
        ]
    job_ids = [uuid.UUID(job["id"]) for job in jobs]
    worker = await start_worker(ctx.processes, engine, url, scale.concurrency)
    baseline = await start_baseline_worker(
        ctx.processes, engine, url, ctx.target_url, scale.concurrency
    )
    meters = {
        "subject": ctx.cpu_meter(worker=worker),
        "http": ctx.cpu_meter(worker=baseline),
        "noop": ctx.cpu_meter(worker=baseline),
    }

    async def subject() -> float:
        await delete_finished(engine)
        watermark = await attempt_watermark(engine)
        started = meters["subject"].start()
        committed, queued = await fire_run_now(engine, job_ids)
        if queued != total:
            raise BenchError(f"run-now queued {queued} attempts, expected {total}")

        async def done() -> bool:
            if not worker.alive():
                raise BenchError(f"zilean worker exited:\n{worker.tail()}")
            recorded, unsuccessful = await recorded_since(engine, watermark)
            if unsuccessful:
                raise BenchError(f"{unsuccessful} attempts did not succeed")
            return recorded >= total

        await wait_until(done, within=RUN_TIMEOUT, what=f"{total} recorded attempts")
        meters["subject"].stop(started)
        elapsed = (await last_recorded_at(engine, watermark) - committed).total_seconds()
        return total / elapsed

    def bare(kind: str, task_name: str) -> Callable[[], Awaitable[float]]:
        async def step() -> float:
            await delete_finished(engine)
            after = await max_job_id(engine)
            started = meters[kind].start()
            committed = await defer_batch(
                engine,
                task_name=task_name,
                queue=BASELINE_QUEUE,
                count=total,
                per_statement=scale.throughput_pool,
            )

            async def done() -> bool:
                if not baseline.alive():
                    raise BenchError(f"baseline worker exited:\n{baseline.tail()}")
                succeeded, other = await finished_count(engine, BASELINE_QUEUE, after)
                if other:
                    raise BenchError(f"{other} baseline jobs did not succeed")
                return succeeded >= total

            await wait_until(done, within=RUN_TIMEOUT, what=f"{total} {task_name} jobs")
            meters[kind].stop(started)
            last = await last_event_at(engine, BASELINE_QUEUE, after, "succeeded")
            return total / (last - committed).total_seconds()

        return step

    results = await interleave(
        scale.pairs,
        [
            ("noop", bare("noop", NOOP_TASK)),
            ("http", bare("http", HTTP_TASK)),
            ("subject", subject),
        ],
    )
    return results, {kind: meter.describe() for kind, meter in meters.items()}


SCENARIO = Scenario("attempt_throughput", (VS_HTTP, VS_NOOP), run)
