"""loop_rate: one job looping with `loop_delay_ms: 0`, iterations/s.

Subject: one HTTP job created through the API with `loop_enabled`, `loop_delay_ms: 0`,
`loop_max_iterations` = `loop_iterations`, pointing at the target's `/loop`, whose body
(`{"result":{"remaining":1}}`) always asks for more; fired once by run-now and run by
the real `zilean worker`. Each iteration is an attempt recorded together with the next
queue insert. Time runs from the run-now commit to the last iteration recorded.

Baselines, each in its own process, the same number of links making the same GET:

- the limit (`raw_queue.py`): one chain of rows in a plain table, each link claimed with
  `SKIP LOCKED`, its GET made with aiohttp, and the next link inserted by the statement
  that marks it finished; time to the last `finished_at`;
- the alternative (`alternative.py`, informational): a bare Procrastinate 3.10 task
  making the GET with httpx, then deferring the next link; time to the last `succeeded`.

The subject's worker runs at `loop_concurrency` (a deployment's default); the
alternative at 1: at concurrency above 1 Procrastinate 3.10's worker can lose a
wake-up (it fetches again as soon as a job starts, and a `job_inserted` notification
arriving during that fetch is cleared when it returns empty), so the next link waits
for its 5 s poll. Gaps >= `STALL` between iterations are counted for both.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import alternative, raw_queue
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, On, at_least
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now, last_recorded_at, recorded_since
from benchmarks.queue import clear_queue_history
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_alternative, start_limit, start_worker
from benchmarks.target import LOOP_PATH
from zilean.db.engine import create_engine

VS_LIMIT = FigureSpec("loop_rate_vs_limit", "iterations/s", at_least(0.5, on=On.RATIO))
VS_ALTERNATIVE = FigureSpec("loop_rate_vs_alternative", "iterations/s")
ISSUE_ITERATIONS = 1_000  # the issue's figure; --quick runs fewer
RUN_TIMEOUT = 180.0  # seconds one looping run may take
STALL = 4.0  # seconds: a gap between iterations this long is a lost wake-up
ALTERNATIVE_CONCURRENCY = 1  # see the module docstring

_ATTEMPT_STALLS = text(
    """
    SELECT count(*) FROM (
        SELECT attempted_at - lag(attempted_at) OVER (ORDER BY id) AS gap
          FROM job_attempts WHERE id > :after
    ) gaps WHERE gap >= make_interval(secs => :stall)
    """
)


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    url = ctx.postgres.clone("loop")
    alternative_url = ctx.postgres.empty("loop_alternative")
    engine = create_engine(url)
    alternative_engine = create_engine(alternative_url)
    try:
        with ctx.processes.scope():
            results, cpu, stalls = await _measure(
                ctx, engine, url, alternative_engine, alternative_url
            )
    finally:
        await engine.dispose()
        await alternative_engine.dispose()
        ctx.postgres.drop(url)
        ctx.postgres.drop(alternative_url)
    note = f"{scale.loop_iterations} iterations per run"
    if scale.loop_iterations != ISSUE_ITERATIONS:
        note += f" (the issue's figure is {ISSUE_ITERATIONS:,}; --quick runs fewer)"
    note += (
        f"; subject at concurrency {scale.loop_concurrency}, {cpu['subject']}; gaps >= "
        f"{STALL:g} s between iterations, warm-up included: subject {stalls['subject']}, "
        f"alternative {stalls['alternative']}"
    )
    return [
        VS_LIMIT.figure(
            results["subject"],
            results["limit"],
            note=f"{note}; baseline: the raw SKIP LOCKED loop as a chain, each link's GET "
            f"then one statement finishing it and inserting the next, {cpu['limit']}",
        ),
        VS_ALTERNATIVE.figure(
            results["subject"],
            results["alternative"],
            note=f"{note}; baseline: bare Procrastinate 3.10 tasks each making the GET with "
            f"httpx and deferring the next, at concurrency {ALTERNATIVE_CONCURRENCY}, "
            f"{cpu['alternative']}",
        ),
    ]


async def _measure(
    ctx: BenchContext,
    engine: AsyncEngine,
    url: str,
    alternative_engine: AsyncEngine,
    alternative_url: str,
) -> tuple[dict[str, list[float]], dict[str, str], dict[str, int]]:
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
    await raw_queue.create_table(engine)
    alternative.install_schema(alternative_url)
    worker = await start_worker(ctx.processes, engine, url, ctx.scale.loop_concurrency)
    bare = await start_alternative(
        ctx.processes, alternative_engine, alternative_url, ctx.target_url, ALTERNATIVE_CONCURRENCY
    )
    limit = await start_limit(ctx.processes, url, ctx.target_url, ctx.scale.concurrency)
    meters = {
        "subject": ctx.cpu_meter("iteration", worker=worker),
        "alternative": ctx.cpu_meter("iteration", worker=bare),
        "limit": ctx.cpu_meter("iteration", worker=limit),
    }
    stalls = {"subject": 0, "alternative": 0}

    async def subject() -> float:
        await clear_queue_history(engine)
        watermark = await attempt_watermark(engine)
        committed, _ = await fire_run_now(engine, [job_id])
        started = meters["subject"].start()

        async def done() -> bool:
            if not worker.alive():
                raise BenchError(f"zilean worker exited:\n{worker.tail()}")
            recorded, unsuccessful = await recorded_since(engine, watermark)
            if unsuccessful:
                raise BenchError(f"{unsuccessful} iterations did not succeed")
            return recorded >= iterations

        await wait_until(done, within=RUN_TIMEOUT, what=f"{iterations} loop iterations")
        elapsed = (await last_recorded_at(engine, watermark) - committed).total_seconds()
        meters["subject"].stop(started, iterations, busy=elapsed)
        async with engine.connect() as conn:
            gaps = await conn.scalar(_ATTEMPT_STALLS, {"after": watermark, "stall": STALL})
        stalls["subject"] += int(gaps or 0)
        return iterations / elapsed

    async def alternative_step() -> float:
        await alternative.delete_finished(alternative_engine)
        after = await alternative.max_job_id(alternative_engine)
        committed = await alternative.defer_batch(
            alternative_engine,
            task_name=alternative.CHAIN_TASK,
            count=1,
            per_statement=1,
            args={"remaining": iterations, "url": loop_url},
        )
        started = meters["alternative"].start()

        await alternative.wait_for_successes(
            alternative_engine, bare, after, iterations, within=RUN_TIMEOUT
        )
        last = await alternative.last_event_at(alternative_engine, after, "succeeded")
        elapsed = (last - committed).total_seconds()
        meters["alternative"].stop(started, iterations, busy=elapsed)
        stalls["alternative"] += await alternative.started_gaps(alternative_engine, after, STALL)
        return iterations / elapsed

    async def limit_step() -> float:
        await raw_queue.clear(engine)
        after = await raw_queue.watermark(engine)
        committed = await raw_queue.insert_batch(engine, 1, chain=iterations)
        started = meters["limit"].start()

        async def done() -> bool:
            if not limit.alive():
                raise BenchError(f"limit exited:\n{limit.tail()}")
            return (await raw_queue.finished_since(engine, after))[0] >= iterations

        await wait_until(done, within=RUN_TIMEOUT, what=f"{iterations} chained rows")
        _, last = await raw_queue.finished_since(engine, after)
        assert last is not None
        elapsed = (last - committed).total_seconds()
        meters["limit"].stop(started, iterations, busy=elapsed)
        return iterations / elapsed

    results = await interleave(
        ctx.scale.pairs,
        [("alternative", alternative_step), ("limit", limit_step), ("subject", subject)],
    )
    return results, {kind: meter.describe() for kind, meter in meters.items()}, stalls


SCENARIO = Scenario("loop_rate", (VS_LIMIT, VS_ALTERNATIVE), run)
