"""footprint: resident memory of `zilean up`'s processes, idle and under the throughput load.

The real `zilean up` runs with DATABASE_URL pointing at the suite's Postgres (so Postgres
is not counted): its main process (core, ui, mcp and webhook in one) and its children
(the HTTP worker, and a script worker per interpreter found on PATH). RSS (psutil) of
each is sampled every `SAMPLE_INTERVAL` for `footprint_idle` seconds while nothing
runs, then for `footprint_load` seconds while run-now batches of the throughput jobs
keep the HTTP worker busy; each round's figure is the median of its samples ("steady"),
the peak is kept in `peak_mib`.

Baseline (worker figures): a bare `python -c 'import pgqueuer, aiohttp, psycopg'`
process (with PgQueuer's queue manager loaded), spawned fresh each round: the least a
worker on this engine and HTTP client pays before doing anything. The totals have no
baseline that makes sense (ratio null).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence

import psutil
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, at_most
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now, recorded_since
from benchmarks.processes import ManagedProcess, Processes
from benchmarks.queue import clear_queue_history, listening
from benchmarks.scenario import Scenario
from benchmarks.seeding import BENCH_KEY, api_client, create_job, http_job
from benchmarks.services import START_TIMEOUT, child_env, free_port
from benchmarks.stats import median
from zilean.db.engine import create_engine
from zilean.execution.queues import Queue

WORKER_IDLE = FigureSpec("footprint_worker_idle", "MiB", at_most(80.0))
WORKER_LOAD = FigureSpec("footprint_worker_load", "MiB", at_most(80.0))
TOTAL_IDLE = FigureSpec("footprint_up_total_idle", "MiB", at_most(300.0))
TOTAL_LOAD = FigureSpec("footprint_up_total_load", "MiB", at_most(300.0))
SAMPLE_INTERVAL = 0.1  # seconds between RSS samples
MIB = 1024 * 1024
BASELINE_CODE = (
    "import signal, aiohttp, psycopg, pgqueuer, pgqueuer.core.qm; "
    "print('imported', flush=True); signal.pause()"
)
LOAD_JOBS = 30  # jobs fired per run-now batch, each with the throughput pool size
BATCH_TIMEOUT = 60.0  # seconds


async def bare_import_rss(processes: Processes) -> float:
    """RSS in MiB of a fresh process that has only imported a worker's engine and client."""
    process = processes.spawn("bare-import", [sys.executable, "-c", BASELINE_CODE], child_env())
    try:
        await process.wait_for_output("imported", within=START_TIMEOUT)
        return process.process().memory_info().rss / MIB
    finally:
        processes.stop(process, timeout=5.0)


def _argv(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _role(process: psutil.Process) -> str:
    """Name a `zilean up` child by its command line: `worker`, `script-worker(bash+node)`."""
    argv = _argv(process)
    if "script-worker" in argv:
        runtimes = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--runtime"]
        return f"script-worker({'+'.join(runtimes)})"
    if "worker" in argv:
        return "worker"
    return " ".join(argv[-2:]) or f"pid-{process.pid}"


def _sample(up: ManagedProcess) -> dict[str, float]:
    """RSS in MiB of `zilean up`'s main process and of each child, by role."""
    rss = {"main": up.process().memory_info().rss / MIB}
    for child in up.children():
        try:
            rss[_role(child)] = child.memory_info().rss / MIB
        except psutil.Error:
            continue
    return rss


async def _sample_for(up: ManagedProcess, seconds: float) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = defaultdict(list)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for role, mib in _sample(up).items():
            samples[role].append(mib)
        await asyncio.sleep(SAMPLE_INTERVAL)
    return samples


async def run(ctx: BenchContext) -> list[Figure]:
    url = ctx.postgres.clone("footprint")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            results, roles = await _measure(ctx, engine, url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    return _figures(ctx, results, roles)


async def _start_up(ctx: BenchContext, engine: AsyncEngine, url: str) -> ManagedProcess:
    env = child_env(
        DATABASE_URL=url,
        SETTINGS_ENCRYPTION_KEY=BENCH_KEY,
        WORKER_MAX_CONCURRENCY=str(ctx.scale.concurrency),
    )
    argv = [
        sys.executable, "-m", "zilean", "up",
        "--data-dir", str(ctx.workdir / "up-data"), "--port", str(free_port()),
    ]  # fmt: skip
    up = ctx.processes.spawn("zilean-up", argv, env)
    await up.wait_for_output(r"Zilean is ready at", within=START_TIMEOUT)

    # The HTTP worker's listener is the sign the workers are up (it carries the load here).
    async def worker_listening() -> bool:
        if not up.alive():
            raise BenchError(f"zilean up exited:\n{up.tail()}")
        return await listening(engine, Queue.DEFAULT) > 0

    await wait_until(worker_listening, within=START_TIMEOUT, what="zilean up's HTTP worker")
    if "worker" not in {_role(child) for child in up.children()}:
        raise BenchError("zilean up started no HTTP worker")
    return up


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[str, list[dict[str, float]]], list[str]]:
    scale = ctx.scale
    async with api_client(engine, url, ctx.postgres.session) as client:
        jobs = [
            await create_job(
                client,
                **http_job(f"load {i:03d}", ctx.target_url + "/", pool_count=scale.throughput_pool),
            )
            for i in range(LOAD_JOBS)
        ]
    job_ids = [uuid.UUID(job["id"]) for job in jobs]
    up = await _start_up(ctx, engine, url)

    async def baseline() -> dict[str, float]:
        return {"bare": await bare_import_rss(ctx.processes)}

    async def idle() -> dict[str, float]:
        return {
            role: median(values)
            for role, values in (await _sample_for(up, scale.footprint_idle)).items()
        }

    async def load() -> dict[str, float]:
        stop = asyncio.Event()
        batches = asyncio.create_task(_keep_busy(engine, job_ids, stop))
        try:
            samples = await _sample_for(up, scale.footprint_load)
        finally:
            stop.set()
            fired = await batches
        if fired == 0:
            raise BenchError("no run-now batch completed while sampling under load")
        steady = {role: median(values) for role, values in samples.items()}
        steady["peak_worker"] = max(samples["worker"])
        steady["batches"] = float(fired)
        return steady

    results = await interleave(scale.pairs, [("bare", baseline), ("idle", idle), ("load", load)])
    return results, sorted({role for sample in results["idle"] for role in sample})


async def _keep_busy(engine: AsyncEngine, job_ids: Sequence[uuid.UUID], stop: asyncio.Event) -> int:
    """Fire run-now batches back to back until `stop`; return how many completed."""
    completed = 0
    while not stop.is_set():
        await clear_queue_history(engine)
        watermark = await attempt_watermark(engine)
        _, queued = await fire_run_now(engine, job_ids)

        async def recorded(watermark: int = watermark, queued: int = queued) -> bool:
            return (await recorded_since(engine, watermark))[0] >= queued

        await wait_until(recorded, within=BATCH_TIMEOUT, what="a run-now batch to be recorded")
        completed += 1
    return completed


def _figures(
    ctx: BenchContext, results: dict[str, list[dict[str, float]]], roles: list[str]
) -> list[Figure]:
    bare = [sample["bare"] for sample in results["bare"]]
    services = [role for role in roles if role not in {"peak_worker", "batches"}]

    def total(sample: dict[str, float]) -> float:
        return sum(sample.get(role, 0.0) for role in services)

    def breakdown(kind: str) -> str:
        parts = [
            f"{role} {median([s[role] for s in results[kind] if role in s]):.0f}"
            for role in services
        ]
        return "median MiB per process: " + ", ".join(parts)

    load_note = (
        f"run-now batches of {LOAD_JOBS} jobs x pool_count {ctx.scale.throughput_pool} back to "
        f"back, concurrency {ctx.scale.concurrency}; {breakdown('load')}"
    )
    peaks = [sample["peak_worker"] for sample in results["load"]]
    worker_baseline = "baseline: a bare `import pgqueuer, aiohttp, psycopg` process"
    no_baseline = (
        "Postgres excluded; ratio null: no bare process is comparable to the whole product "
        f"({len(services)} processes: {', '.join(services)})"
    )
    return [
        WORKER_IDLE.figure(
            [s["worker"] for s in results["idle"]], bare, note=f"{worker_baseline}; idle"
        ),
        WORKER_LOAD.figure(
            [s["worker"] for s in results["load"]],
            bare,
            note=f"{worker_baseline}; median of samples under load, peak {max(peaks):.0f} MiB; "
            + load_note,
            peak_mib=peaks,
        ),
        TOTAL_IDLE.figure(
            [total(s) for s in results["idle"]], note=f"{no_baseline}; {breakdown('idle')}"
        ),
        TOTAL_LOAD.figure([total(s) for s in results["load"]], note=f"{no_baseline}; {load_note}"),
    ]


SCENARIO = Scenario("footprint", (WORKER_IDLE, WORKER_LOAD, TOTAL_IDLE, TOTAL_LOAD), run)
