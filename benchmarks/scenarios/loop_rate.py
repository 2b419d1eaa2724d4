"""loop_rate: one job looping with `loop_delay_ms: 0`, iterations/s.

Subject: one HTTP job created through the API with `loop_enabled`, `loop_delay_ms: 0`,
`loop_max_iterations` = `loop_iterations`, pointing at the target's `/loop`, whose body
(`{"result":{"remaining":1}}`) always asks for more; fired once by run-now and run by
the real `zilean worker`. Each iteration is an attempt recorded together with the next
queue insert. Time runs from the run-now commit to the last iteration recorded.

Baselines, on the bare worker: the same number of Procrastinate tasks each deferring
the next (`bench.chain`), from the first commit to the last `succeeded`; (a) deferring
at once, as the issue asks, (b) after the same GET the subject makes.

Both workers run at `loop_concurrency` (1): one run loops, so one slot is all it can
use. At concurrency > 1 Procrastinate 3.10's worker can lose a wake-up: it fetches
again as soon as a job starts, and a `job_inserted` notification arriving during that
fetch is cleared when it returns empty, so the next link waits for the 5 s fetch poll.
A stall like that (counted below as gaps >= `STALL`) would swamp the figure.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.baseline_worker import BASELINE_QUEUE, CHAIN_TASK
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, On, at_least
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now, last_recorded_at, recorded_since
from benchmarks.queue import defer_batch, delete_finished, finished_count, last_event_at, max_job_id
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_baseline_worker, start_worker
from benchmarks.target import LOOP_PATH
from zilean.db.engine import create_engine

VS_CHAIN = FigureSpec("loop_rate_vs_chain", "iterations/s", at_least(0.8, on=On.RATIO))
VS_CHAIN_HTTP = FigureSpec("loop_rate_vs_chain_http", "iterations/s")
ISSUE_ITERATIONS = 1_000  # the issue's figure; --quick runs fewer
RUN_TIMEOUT = 180.0  # seconds one looping run may take
STALL = 4.0  # seconds: a gap between iterations this long is a lost wake-up

# Gaps between consecutive iterations: the attempts' start times, the chain's starts.
_ATTEMPT_STALLS = text(
    """
    SELECT count(*) FROM (
        SELECT attempted_at - lag(attempted_at) OVER (ORDER BY id) AS gap
          FROM job_attempts WHERE id > :after
    ) gaps WHERE gap >= make_interval(secs => :stall)
    """
)
_CHAIN_STALLS = text(
    """
    SELECT count(*) FROM (
        SELECT at - lag(at) OVER (ORDER BY at) AS gap
          FROM procrastinate_events WHERE job_id > :after AND type = 'started'
    ) gaps WHERE gap >= make_interval(secs => :stall)
    """
)


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    url = ctx.postgres.clone("loop")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            results, cpu, stalls = await _measure(ctx, engine, url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    note = f"{scale.loop_iterations} iterations per run"
    if scale.loop_iterations != ISSUE_ITERATIONS:
        note += f" (the issue's figure is {ISSUE_ITERATIONS:,}; --quick runs fewer)"
    note += (
        f"; both workers at concurrency {scale.loop_concurrency}: above 1, Procrastinate "
        "3.10's worker can clear a job-inserted notification with an in-flight empty fetch "
        f"and the next link waits for its 5 s poll; gaps >= {STALL:g} s between iterations, "
        f"warm-up included: subject {stalls['subject']}, baselines "
        f"{stalls['chain'] + stalls['chain_http']}; subject {cpu}"
    )
    return [
        VS_CHAIN.figure(
            results["subject"],
            results["chain"],
            note=f"{note}; baseline: bare Procrastinate tasks each deferring the next",
        ),
        VS_CHAIN_HTTP.figure(
            results["subject"],
            results["chain_http"],
            note=f"{note}; baseline: the same chain making the subject's GET first",
        ),
    ]


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[str, list[float]], str, dict[str, int]]:
    iterations = ctx.scale.loop_iterations
    loop_url = ctx.target_url + LOOP_PATH
    async with api_client(engine, url, ctx.postgres.session) as client:
        job = await create_job(
            client,
            **http_job(
                "loop",
                loop_url,
                loop_enabled=True,
                loop_delay_ms=0,
                loop_max_iterations=iterations,
            ),
        )
    job_id = uuid.UUID(job["id"])
    concurrency = ctx.scale.loop_concurrency
    worker = await start_worker(ctx.processes, engine, url, concurrency)
    baseline = await start_baseline_worker(ctx.processes, engine, url, ctx.target_url, concurrency)
    meter = ctx.cpu_meter(worker=worker)
    stalls = {"subject": 0, "chain": 0, "chain_http": 0}

    async def subject() -> float:
        await delete_finished(engine)
        watermark = await attempt_watermark(engine)
        started = meter.start()
        committed, _ = await fire_run_now(engine, [job_id])

        async def done() -> bool:
            if not worker.alive():
                raise BenchError(f"zilean worker exited:\n{worker.tail()}")
            recorded, unsuccessful = await recorded_since(engine, watermark)
            if unsuccessful:
                raise BenchError(f"{unsuccessful} iterations did not succeed")
            return recorded >= iterations

        await wait_until(done, within=RUN_TIMEOUT, what=f"{iterations} loop iterations")
        meter.stop(started)
        stalls["subject"] += await _stalls(engine, _ATTEMPT_STALLS, watermark)
        elapsed = (await last_recorded_at(engine, watermark) - committed).total_seconds()
        return iterations / elapsed

    def chain(kind: str, call: str | None) -> Callable[[], Awaitable[float]]:
        async def step() -> float:
            await delete_finished(engine)
            after = await max_job_id(engine)
            committed = await defer_batch(
                engine,
                task_name=CHAIN_TASK,
                queue=BASELINE_QUEUE,
                count=1,
                per_statement=1,
                args={"remaining": iterations, "url": call},
            )

            async def done() -> bool:
                if not baseline.alive():
                    raise BenchError(f"baseline worker exited:\n{baseline.tail()}")
                succeeded, other = await finished_count(engine, BASELINE_QUEUE, after)
                if other:
                    raise BenchError(f"{other} chained tasks did not succeed")
                return succeeded >= iterations

            await wait_until(done, within=RUN_TIMEOUT, what=f"{iterations} chained tasks")
            stalls[kind] += await _stalls(engine, _CHAIN_STALLS, after)
            last = await last_event_at(engine, BASELINE_QUEUE, after, "succeeded")
            return iterations / (last - committed).total_seconds()

        return step

    results = await interleave(
        ctx.scale.pairs,
        [
            ("chain", chain("chain", None)),
            ("chain_http", chain("chain_http", loop_url)),
            ("subject", subject),
        ],
    )
    return results, meter.describe(), stalls


async def _stalls(engine: AsyncEngine, query: TextClause, after: int) -> int:
    """Count gaps between iterations long enough to be a fetch poll after a lost wake-up."""
    async with engine.connect() as conn:
        value = await conn.scalar(query, {"after": after, "stall": STALL})
    return int(value or 0)


SCENARIO = Scenario("loop_rate", (VS_CHAIN, VS_CHAIN_HTTP), run)
