"""scale_out: the throughput batch on two `zilean worker` processes against one.

The same jobs and run-now batch as attempt_throughput (`throughput_jobs` x
`throughput_pool` attempts, WORKER_MAX_CONCURRENCY = `concurrency` per worker). One
worker runs throughout; for the two-worker rounds a second one is started before the
batch and stopped after it, so both kinds of round share the first worker and its warm
caches. The figure is two workers' attempts/s; its baseline is one worker's in the
same run, and the ratio is the scaling.

No target: the workers share nothing but Postgres, but on this machine they also share
two cores with Postgres, the target and the suite, so the ratio is bounded by the CPU
left over when one worker runs (the note gives each process's share).
"""

from __future__ import annotations

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec
from benchmarks.harness import interleave
from benchmarks.processes import stop_soon
from benchmarks.scenario import Scenario
from benchmarks.scenarios.attempt_throughput import run_batch, throughput_jobs
from benchmarks.services import start_worker
from zilean.db.engine import create_engine

TWO_VS_ONE = FigureSpec("scale_out_two_workers_vs_one", "attempts/s")
SHORT_BATCH = 1_000  # attempts; --quick's 300 take well under a second on one worker


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    url = ctx.postgres.clone("scale_out")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            job_ids = await throughput_jobs(ctx, engine, url, scale.throughput_jobs)
            first = await start_worker(ctx.processes, engine, url, scale.concurrency)
            one_meter = ctx.cpu_meter(worker=first)
            two_meters: list[str] = []

            async def one() -> float:
                return await run_batch(engine, job_ids, [first], one_meter)

            async def two() -> float:
                second = await start_worker(
                    ctx.processes, engine, url, scale.concurrency, name="zilean-worker-2"
                )
                meter = ctx.cpu_meter(worker=first, worker_2=second)
                try:
                    rate = await run_batch(engine, job_ids, [first, second], meter)
                finally:
                    await stop_soon(ctx.processes, second)
                two_meters.append(meter.describe())
                return rate

            results = await interleave(scale.pairs, [("one", one), ("two", two)])
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    total = scale.throughput_jobs * scale.throughput_pool
    note = (
        f"{scale.throughput_jobs} jobs x pool_count {scale.throughput_pool} = {total} attempts "
        f"per round, concurrency {scale.concurrency} per worker; baseline: one worker, "
        f"{one_meter.describe()}; two workers, last round: {two_meters[-1]}"
    )
    if total < SHORT_BATCH:
        note += f"; a batch under {SHORT_BATCH:,} attempts lasts under a second: the ratio is rough"
    return [TWO_VS_ONE.figure(results["two"], results["one"], note=note)]


SCENARIO = Scenario("scale_out", (TWO_VS_ONE,), run)
