"""delay_precision: how late loop iterations and retries start after their delay.

Jobs, created through the API, on the real `zilean worker`:

- loops: `/loop` answers `{"result":{"remaining":1}}`, so each run loops until its
  `loop_max_iterations`, every iteration queued `loop_delay_ms` (300 or 2,000) after
  the previous one was recorded;
- retries: `/unavailable` answers 503, `retry_mode: fixed`, `retry_base_delay_ms` 300
  or 2,000, and `retry_max_attempts`.

Every run makes `Scale.delay_attempts(delay)` attempts, so that its continuations span
about `delay_chain` seconds whatever the delay (21 attempts at 300 ms, 4 at 2 s).

Each continuation's queue job is inserted by the statement that records the attempt
before it, due `delay` after that statement's `now()`; its attempt stores that due
time as `scheduled_at` and its start as `attempted_at` (the start marker). Lateness =
`attempted_at - scheduled_at` for every continuation (attempt > 1, or iteration > 0).

Each round has three phases, one after another:

- raw: the raw engine (`raw_engine.py`, PgQueuer's own QueueManager with a no-op
  entrypoint) given jobs due 300 ms and 2 s ahead through `Queries.enqueue`; its
  lateness (`picked` log entry - due time) is the baseline of the idle figures;
- idle: `delay_jobs` runs of each kind and delay fired by run-now, staggered over
  `delay_stagger` seconds, nothing else running;
- load: the same runs while the attempt_throughput load keeps the same worker busy:
  `LOAD_JOBS` no-op HTTP jobs (overlap `allow`, pool `throughput_pool`) fired together
  by run-now whenever fewer attempts than one such batch wait or run.

p50, p99 and max per (kind, delay, phase) are per round, the figure the median over
rounds; `pooled` holds them over every round's samples. Targets from the issue: p99
within 20 ms idle, within 100 ms under load. 0 is ideal; the raw engine shows what
PgQueuer's own wait-until-due costs on this machine.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import raw_engine
from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, Target, at_most
from benchmarks.harness import BenchError, interleave, wait_until
from benchmarks.load import attempt_watermark, fire_run_now
from benchmarks.processes import ManagedProcess
from benchmarks.queue import clear_queue_history, pending
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_raw_engine, start_worker
from benchmarks.stats import percentile
from benchmarks.target import LOOP_PATH, UNAVAILABLE_PATH
from zilean.db.engine import create_engine

DELAYS_MS = (300, 2_000)
KINDS = ("loop", "retry")
PHASES = ("idle", "load")
P99_TARGETS = {"idle": 20.0, "load": 100.0}  # ms, from the issue
STATS = (("p50", 50.0), ("p99", 99.0), ("max", 100.0))
PHASE_TIMEOUT = 60.0  # seconds one phase may take
LOAD_JOBS = 30  # throughput jobs (x throughput_pool members) fired together as load
LOAD_POLL = 0.02  # seconds between checks of the load's backlog
RAW_JOBS = 8  # raw engine jobs per delay and round


@dataclass(frozen=True)
class Cell:
    kind: str
    delay_ms: int
    phase: str

    def spec(self, stat: str) -> FigureSpec:
        target: Target | None = None
        if stat == "p99":
            target = at_most(P99_TARGETS[self.phase])
        name = f"delay_precision_{self.kind}_{self.delay_ms}ms_{self.phase}_{stat}"
        return FigureSpec(name, "ms", target)


CELLS = [Cell(k, d, p) for p in PHASES for k in KINDS for d in DELAYS_MS]
SPECS = tuple(cell.spec(stat) for cell in CELLS for stat, _ in STATS)

_LATENESS = text(
    """
    SELECT job_id, extract(epoch FROM attempted_at - scheduled_at) * 1000 AS late_ms
      FROM job_attempts
     WHERE id > :after AND job_id = ANY(CAST(:jobs AS uuid[]))
       AND (attempt > 1 OR loop_iteration > 0)
    """
)
_FINISHED = text(
    """
    SELECT count(*) FROM job_attempts
     WHERE id > :after AND job_id = ANY(CAST(:jobs AS uuid[])) AND finalized_at IS NOT NULL
    """
)


async def run(ctx: BenchContext) -> list[Figure]:
    url = ctx.postgres.clone("delay")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            results, raw, notes = await _measure(ctx, engine, url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    return _figures(ctx, results, raw, notes)


async def _create_jobs(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[uuid.UUID, tuple[str, int]], list[uuid.UUID]]:
    """Create the delay jobs (id -> kind, delay) and the load jobs."""
    scale = ctx.scale
    delayed: dict[uuid.UUID, tuple[str, int]] = {}
    async with api_client(engine, url, ctx.postgres.session) as client:
        for kind, delay in itertools.product(KINDS, DELAYS_MS):
            for index in range(scale.delay_jobs):
                name = f"{kind} {delay}ms {index:02d}"
                if kind == "loop":
                    fields = http_job(
                        name,
                        ctx.target_url + LOOP_PATH,
                        loop_enabled=True,
                        loop_delay_ms=delay,
                        loop_max_iterations=scale.delay_attempts(delay),
                    )
                else:
                    fields = http_job(
                        name,
                        ctx.target_url + UNAVAILABLE_PATH,
                        retry_enabled=True,
                        retry_mode="fixed",
                        retry_base_delay_ms=delay,
                        retry_max_attempts=scale.delay_attempts(delay),
                    )
                job = await create_job(client, **fields)
                delayed[uuid.UUID(job["id"])] = (kind, delay)
        load = [
            await create_job(
                client,
                **http_job(
                    f"load {i:03d}",
                    ctx.target_url + "/",
                    pool_count=scale.throughput_pool,
                    overlap_policy="allow",
                ),
            )
            for i in range(LOAD_JOBS)
        ]
    return delayed, [uuid.UUID(job["id"]) for job in load]


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str
) -> tuple[dict[str, list[dict[str, list[float]]]], dict[int, list[list[float]]], dict[str, str]]:
    scale = ctx.scale
    delayed, load_jobs = await _create_jobs(ctx, engine, url)
    worker = await start_worker(ctx.processes, engine, url, scale.concurrency)
    raw = await start_raw_engine(ctx.processes, engine, url, scale.concurrency)
    expected = sum(scale.delay_attempts(delay) for _, delay in delayed.values())
    order = _staggered(delayed)
    load_rounds: list[int] = []
    meters = {"idle": ctx.cpu_meter(worker=worker), "load": ctx.cpu_meter(worker=worker)}

    async def phase(name: str) -> dict[str, list[float]]:
        await clear_queue_history(engine)
        watermark = await attempt_watermark(engine)
        stop = asyncio.Event()
        loader = (
            asyncio.create_task(_keep_loaded(engine, load_jobs, scale.throughput_pool, stop))
            if name == "load"
            else None
        )
        started = meters[name].start()
        try:
            gap = scale.delay_stagger / max(1, len(order) - 1)
            for job_id in order:
                await fire_run_now(engine, [job_id])
                await asyncio.sleep(gap)

            async def done() -> bool:
                if not worker.alive():
                    raise BenchError(f"zilean worker exited:\n{worker.tail()}")
                return await _finished(engine, watermark, delayed) >= expected

            await wait_until(done, within=PHASE_TIMEOUT, what=f"{expected} delay attempts")
        finally:
            stop.set()
            if loader is not None:
                load_rounds.append(await loader)
            meters[name].stop(started)
        await _settle(engine)
        return await _lateness(engine, watermark, delayed)

    async def raw_phase() -> dict[str, list[float]]:
        return await _raw_lateness(engine, url, raw)

    async def idle() -> dict[str, list[float]]:
        return await phase("idle")

    async def load() -> dict[str, list[float]]:
        return await phase("load")

    results = await interleave(scale.pairs, [("raw", raw_phase), ("idle", idle), ("load", load)])
    raw_rounds = results.pop("raw")
    raw_results = {delay: [round_[str(delay)] for round_ in raw_rounds] for delay in DELAYS_MS}
    notes = {
        "idle": meters["idle"].describe(),
        "load": f"{meters['load'].describe()}; load batches fired per round: "
        f"{min(load_rounds)}-{max(load_rounds)}",
    }
    return results, raw_results, notes


def _staggered(delayed: dict[uuid.UUID, tuple[str, int]]) -> list[uuid.UUID]:
    """The delay jobs in firing order, kinds and delays interleaved."""
    by_cell: dict[tuple[str, int], list[uuid.UUID]] = defaultdict(list)
    for job_id, cell in delayed.items():
        by_cell[cell].append(job_id)
    columns = [by_cell[cell] for cell in sorted(by_cell)]
    return [job_id for row in itertools.zip_longest(*columns) for job_id in row if job_id]


async def _keep_loaded(
    engine: AsyncEngine, job_ids: list[uuid.UUID], pool: int, stop: asyncio.Event
) -> int:
    """Fire the load jobs whenever the queue runs low, until `stop`; return the batches."""
    threshold = len(job_ids) * pool
    fired = 0
    while not stop.is_set():
        if await pending(engine) < threshold:
            # One transaction per job, as the API fires: a transaction locking many jobs'
            # rows deadlocks with the worker's batched statements, which lock several
            # each, and Postgres breaks a deadlock only after deadlock_timeout (1 s).
            for job_id in job_ids:
                await fire_run_now(engine, [job_id])
            fired += 1
        await asyncio.sleep(LOAD_POLL)
    return fired


async def _finished(
    engine: AsyncEngine, watermark: int, delayed: dict[uuid.UUID, tuple[str, int]]
) -> int:
    async with engine.connect() as conn:
        value = await conn.scalar(
            _FINISHED, {"after": watermark, "jobs": [str(job_id) for job_id in delayed]}
        )
    return int(value or 0)


async def _settle(engine: AsyncEngine) -> None:
    """Wait for the load's last attempts, so the next phase starts on an idle worker."""

    async def idle() -> bool:
        return await pending(engine) == 0

    await wait_until(idle, within=PHASE_TIMEOUT, what="the load to finish")


async def _lateness(
    engine: AsyncEngine, watermark: int, delayed: dict[uuid.UUID, tuple[str, int]]
) -> dict[str, list[float]]:
    """Lateness in ms of every continuation, by `kind_delay`."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                _LATENESS, {"after": watermark, "jobs": [str(job_id) for job_id in delayed]}
            )
        ).all()
    late: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        kind, delay = delayed[row.job_id]
        late[f"{kind}_{delay}"].append(float(row.late_ms))
    return dict(late)


async def _raw_lateness(
    engine: AsyncEngine, url: str, raw: ManagedProcess
) -> dict[str, list[float]]:
    """Enqueue `RAW_JOBS` raw jobs per delay, staggered; return lateness by delay."""
    due: dict[int, int] = {}
    async with raw_engine.Enqueuer(url) as enqueuer:
        for _ in range(RAW_JOBS):
            for delay in DELAYS_MS:
                for job_id in await enqueuer.enqueue_one(timedelta(milliseconds=delay)):
                    due[job_id] = delay
                await asyncio.sleep(0.05)

    async def picked() -> bool:
        if not raw.alive():
            raise BenchError(f"raw engine exited:\n{raw.tail()}")
        return await raw_engine.waiting(engine) == 0

    await wait_until(picked, within=PHASE_TIMEOUT, what="the raw engine's delayed jobs")
    starts = await raw_engine.starts(engine, list(due))
    late: dict[str, list[float]] = defaultdict(list)
    for job_id, (queued_at, picked_at) in starts.items():
        delay = due[job_id]
        if picked_at is None:
            raise BenchError(f"raw job {job_id} was never picked")
        lateness = (picked_at - queued_at).total_seconds() * 1000.0 - delay
        late[str(delay)].append(lateness)
    return dict(late)


def _per_round(rounds: Sequence[dict[str, list[float]]], key: str, p: float) -> list[float]:
    return [percentile(round_[key], p) for round_ in rounds if round_.get(key)]


def _figures(
    ctx: BenchContext,
    results: dict[str, list[dict[str, list[float]]]],
    raw: dict[int, list[list[float]]],
    notes: dict[str, str],
) -> list[Figure]:
    scale = ctx.scale
    figures: list[Figure] = []
    for cell in CELLS:
        key = f"{cell.kind}_{cell.delay_ms}"
        rounds = results[cell.phase]
        pooled_samples = [value for round_ in rounds for value in round_.get(key, [])]
        raw_rounds = raw[cell.delay_ms]
        pooled = (
            {name: percentile(pooled_samples, p) for name, p in STATS} if pooled_samples else {}
        )
        note = (
            f"{scale.delay_jobs} {cell.kind} runs of {scale.delay_attempts(cell.delay_ms)} "
            f"attempts, delay {cell.delay_ms} ms, "
            f"fired over {scale.delay_stagger:g} s; {len(pooled_samples)} continuations over "
            f"{len(rounds)} rounds; worker concurrency {scale.concurrency}; {notes[cell.phase]}"
        )
        if cell.phase == "idle":
            note += (
                f"; baseline: the raw engine's lateness for jobs due {cell.delay_ms} ms ahead "
                f"({RAW_JOBS} per round)"
            )
        else:
            note += "; no baseline (0 is ideal; the idle figures carry the raw engine's)"
        for stat, p in STATS:
            baseline = (
                [percentile(samples, p) for samples in raw_rounds if samples]
                if cell.phase == "idle"
                else []
            )
            figures.append(
                cell.spec(stat).figure(
                    _per_round(rounds, key, p),
                    baseline,
                    note=note if stat == "p99" else "",
                    pooled=pooled,
                )
            )
    return figures


SCENARIO = Scenario("delay_precision", SPECS, run)
