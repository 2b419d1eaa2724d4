"""script_throughput: trivial bash script jobs fired by run-now, attempts/s, and the worker's RSS.

Subject: `throughput_jobs` bash jobs whose body is `exit 0`, with pool_count =
`throughput_pool`, created through the API and all fired by the run-now service in one
transaction; the real `zilean script-worker --runtime bash` (subprocess, its default
concurrency, `SCRIPT_WORKER_CONCURRENCY`, and no sandbox, the default) runs them. Time
runs from the database clock just before that commit to the last
`job_attempts.finalized_at` of the batch, as in attempt_throughput.

Baselines, run in every round just before the subject: the bare loop
(`bare_scripts.py`), a process of its own that runs as many `bash <file>` at the same
concurrency, each in a fresh temporary directory, with no database and no queue; time
from its start signal to its last removed directory. It runs twice, as two processes:
on the standard library's asyncio loop (`script_throughput`, the bare minimum) and on
uvloop, the worker's own loop (`script_throughput_vs_uvloop`), which spawns and reaps
children differently; the two ratios tell the event loop's share of the gap from the
rest of Zilean's.

Memory: the script worker's own RSS (psutil; its bash children not counted), sampled
every `SAMPLE_INTERVAL` for `footprint_idle` seconds while nothing runs, and through
every subject batch ("load"); each round's figure is the median of its samples, the
peak is kept in `peak_mib`. Baseline: footprint's bare `import pgqueuer, aiohttp,
psycopg` process, the least a worker on this engine pays before doing anything (the
script worker loads aiohttp too, for failure callbacks).

The issue sets no target for any of these figures.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import psutil
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import bare_scripts
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec
from benchmarks.harness import BenchError, interleave
from benchmarks.load import attempt_watermark
from benchmarks.processes import ManagedProcess
from benchmarks.scenario import Scenario
from benchmarks.scenarios.attempt_throughput import RUN_TIMEOUT, run_batch
from benchmarks.scenarios.footprint import MIB, SAMPLE_INTERVAL, bare_import_rss
from benchmarks.seeding import api_client, create_job, script_job
from benchmarks.services import start_bare_scripts, start_script_worker
from benchmarks.stats import median
from zilean.config import SCRIPT_WORKER_CONCURRENCY, ScriptRuntime
from zilean.db.engine import create_engine
from zilean.db.tables import job_attempts

THROUGHPUT = FigureSpec("script_throughput", "attempts/s")
VS_UVLOOP = FigureSpec("script_throughput_vs_uvloop", "attempts/s")
RSS_IDLE = FigureSpec("script_worker_rss_idle", "MiB")
RSS_LOAD = FigureSpec("script_worker_rss_load", "MiB")
SCRIPT_BODY = "exit 0"


async def script_jobs(ctx: BenchContext, engine: AsyncEngine, url: str) -> list[uuid.UUID]:
    """Create `throughput_jobs` bash jobs of `throughput_pool` members each."""
    async with api_client(engine, url, ctx.postgres.session) as client:
        jobs = [
            await create_job(
                client,
                **script_job(
                    f"script {i:04d}", "bash", SCRIPT_BODY, pool_count=ctx.scale.throughput_pool
                ),
            )
            for i in range(ctx.scale.throughput_jobs)
        ]
    return [uuid.UUID(job["id"]) for job in jobs]


async def rss_samples(process: psutil.Process, stop: asyncio.Event) -> list[float]:
    """Sample `process`'s RSS in MiB every `SAMPLE_INTERVAL` until `stop` (at least once)."""
    samples: list[float] = []
    while True:
        samples.append(process.memory_info().rss / MIB)
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_INTERVAL)
        except TimeoutError:
            continue
        return samples


async def slot_use(engine: AsyncEngine, watermark: int) -> dict[str, float]:
    """For the attempts above `watermark`: `busy`, how many ran at once on average (from
    start marker to record, over the batch's span); `attempt_ms`, that span's median; and
    `script_ms`, the median duration_ms (the runner's own clock, from spawn to exit)."""
    span = func.extract("epoch", job_attempts.c.finalized_at - job_attempts.c.attempted_at)
    async with engine.connect() as conn:
        busy, first, last, attempt_s, script_ms = (
            await conn.execute(
                select(
                    func.sum(span),
                    func.min(job_attempts.c.attempted_at),
                    func.max(job_attempts.c.finalized_at),
                    func.percentile_cont(0.5).within_group(span),
                    func.percentile_cont(0.5).within_group(job_attempts.c.duration_ms),
                ).where(job_attempts.c.id > watermark)
            )
        ).one()
    return {
        "busy": float(busy) / (last - first).total_seconds(),
        "attempt_ms": float(attempt_s) * 1000,
        "script_ms": float(script_ms),
    }


async def bare_round(process: ManagedProcess, number: int, within: float) -> float:
    """Start round `number` of the bare loop by signal; return its scripts/s."""
    process.popen.send_signal(bare_scripts.SIGNAL)
    pattern = bare_scripts.ROUND_LINE.format(number=number)
    match = await process.wait_for_output(pattern, within=within)
    count, failed, seconds = int(match.group(1)), int(match.group(2)), float(match.group(3))
    if failed:
        raise BenchError(f"{failed} of the bare loop's {count} scripts did not exit 0")
    return count / seconds


async def run(ctx: BenchContext) -> list[Figure]:
    url = ctx.postgres.clone("scripts")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            results, cpu = await _measure(ctx, engine, url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    return _figures(ctx, results, cpu)


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[str, list[dict[str, float]]], dict[str, str]]:
    scale = ctx.scale
    total = scale.throughput_jobs * scale.throughput_pool
    job_ids = await script_jobs(ctx, engine, url)
    worker = await start_script_worker(ctx.processes, engine, url, ScriptRuntime.BASH)
    worker_process = worker.process()
    meters = {"subject": ctx.cpu_meter(worker=worker)}

    async def bare_import() -> dict[str, float]:
        return {"mib": await bare_import_rss(ctx.processes)}

    async def idle() -> dict[str, float]:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(scale.footprint_idle, stop.set)
        return {"mib": median(await rss_samples(worker_process, stop))}

    async def bare_step(loop: str) -> Callable[[], Awaitable[dict[str, float]]]:
        process = await start_bare_scripts(
            ctx.processes, loop, SCRIPT_BODY, total, SCRIPT_WORKER_CONCURRENCY
        )
        meter = meters[loop] = ctx.cpu_meter("script", bare=process)
        rounds = 0

        async def step() -> dict[str, float]:
            nonlocal rounds
            rounds += 1
            started = meter.start()
            rate = await bare_round(process, rounds, within=RUN_TIMEOUT)
            meter.stop(started, total)
            return {"rate": rate}

        return step

    async def subject() -> dict[str, float]:
        stop = asyncio.Event()
        sampling = asyncio.create_task(rss_samples(worker_process, stop))
        watermark = await attempt_watermark(engine)
        try:
            rate = await run_batch(engine, job_ids, [worker], meters["subject"])
        finally:
            stop.set()
            samples = await sampling
        slots = await slot_use(engine, watermark)
        return {"rate": rate, "mib": median(samples), "peak": max(samples), **slots}

    steps: list[tuple[str, Callable[[], Awaitable[dict[str, float]]]]]
    steps = [("bare_import", bare_import), ("idle", idle)]
    steps += [(loop, await bare_step(loop)) for loop in bare_scripts.LOOPS]
    results = await interleave(scale.pairs, [*steps, ("subject", subject)])
    return results, {kind: meter.describe() for kind, meter in meters.items()}


def _figures(
    ctx: BenchContext, results: dict[str, list[dict[str, float]]], cpu: dict[str, str]
) -> list[Figure]:
    scale = ctx.scale

    def of(kind: str, key: str) -> list[float]:
        return [sample[key] for sample in results[kind]]

    load = (
        f"{scale.throughput_jobs} bash jobs (`{SCRIPT_BODY}`) x pool_count "
        f"{scale.throughput_pool} = {scale.throughput_jobs * scale.throughput_pool} attempts "
        "per round, fired by run-now in one transaction, the script worker's default "
        f"concurrency {SCRIPT_WORKER_CONCURRENCY}, no sandbox"
    )
    subject = (
        f"{load}; slots busy (start marker to record) {median(of('subject', 'busy')):.2f} of "
        f"{SCRIPT_WORKER_CONCURRENCY} on average, p50 {median(of('subject', 'attempt_ms')):.0f} "
        f"ms each, of which the script's own duration_ms {median(of('subject', 'script_ms')):.0f}"
        f"; subject {cpu['subject']}"
    )

    def baseline(loop: str, what: str) -> str:
        return (
            f"baseline: as many `bash <file>` from a bare {what}, {SCRIPT_WORKER_CONCURRENCY} "
            f"at a time, a fresh temporary directory per run, no database or queue, "
            f"scripts/s, {cpu[loop]}; CPU figures leave out the bash processes themselves"
        )

    memory = (
        "the script worker's own RSS, its bash children not counted; baseline: a bare "
        "`import pgqueuer, aiohttp, psycopg` process"
    )
    peaks = of("subject", "peak")
    slot_extras = {
        "busy_slots": of("subject", "busy"),
        "attempt_ms_p50": of("subject", "attempt_ms"),
        "script_ms_p50": of("subject", "script_ms"),
    }
    return [
        THROUGHPUT.figure(
            of("subject", "rate"),
            of("asyncio", "rate"),
            note=f"{subject}; {baseline('asyncio', 'standard-library asyncio loop')}",
            **slot_extras,
        ),
        VS_UVLOOP.figure(
            of("subject", "rate"),
            of("uvloop", "rate"),
            note=f"{subject}; {baseline('uvloop', 'asyncio loop on uvloop, as the worker')}",
        ),
        RSS_IDLE.figure(of("idle", "mib"), of("bare_import", "mib"), note=f"{memory}; idle"),
        RSS_LOAD.figure(
            of("subject", "mib"),
            of("bare_import", "mib"),
            note=f"{memory}; median of samples through each batch, peak {max(peaks):.0f} MiB; "
            + load,
            peak_mib=peaks,
        ),
    ]


SCENARIO = Scenario("script_throughput", (THROUGHPUT, VS_UVLOOP, RSS_IDLE, RSS_LOAD), run)
