"""schedule_lag: due time to attempt start with 1,000 and 10,000 registered jobs.

A tenth of the jobs are `@every 1s` HTTP jobs pointing at the target. Cron has no
seconds field in Zilean (5-field robfig syntax), so every per-second job is a rate job;
cron schedules (800 distinct expressions over three zones, in months far from now) and
hourly-or-rarer rates make up the rest, which never fall due during the run. Rate
entries added by one reconcile share a phase, so each second opens with a burst of a
tenth of the jobs, the scheduler's worst case.

The real `zilean core` (scheduler) and `zilean worker` run as subprocesses. After a
warm-up, consecutive windows of `lag_window` whole seconds are the rounds; core is then
stopped and the worker given time to drain. Per window, for each firing of a
per-second job (`job_firings`, the duplicate guard):

- lag = `job_attempts.attempted_at` - `scheduled_for` (the attempt is matched through
  its queue job, deferred in the firing's own transaction); a firing whose queue job had
  not started by the end of the drain counts at its lower bound, and the note says so;
- scheduler lag = the firing transaction's start (`created_at`) - `scheduled_for`;
- baseline = Procrastinate's own `deferred` to `started` for the same queue jobs;
- missed = whole-second instants in the window with no firing row; duplicates = firings
  with more than one queue job or attempt; skipped = firings that queued nothing
  because the job's previous attempt still held its overlap lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, at_most
from benchmarks.harness import BenchError, wait_until
from benchmarks.processes import stop_soon
from benchmarks.queue import clock
from benchmarks.scales import FULL
from benchmarks.scenario import Scenario
from benchmarks.seeding import (
    ScheduleSpec,
    api_client,
    clone_jobs,
    create_job,
    cron_pool,
    http_job,
    rare_rates,
)
from benchmarks.services import start_core, start_worker
from benchmarks.stats import percentile
from zilean.db.engine import create_engine
from zilean.schedules import ScheduleType

P99_TARGETS = {1_000: 100.0, 10_000: 250.0}  # ms, from the issue
FIRST_FIRING_TIMEOUT = 60.0  # seconds from core's start to its first firing


def _label(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


@dataclass(frozen=True)
class SizeSpecs:
    """The figures reported for one number of registered jobs."""

    p50: FigureSpec
    p99: FigureSpec
    max: FigureSpec
    scheduler_p99: FigureSpec
    missed: FigureSpec
    duplicates: FigureSpec
    skipped: FigureSpec

    @classmethod
    def of(cls, size: int) -> SizeSpecs:
        name = f"schedule_lag_{_label(size)}"
        target = P99_TARGETS.get(size)
        return cls(
            p50=FigureSpec(f"{name}_p50", "ms"),
            p99=FigureSpec(f"{name}_p99", "ms", at_most(target) if target else None),
            max=FigureSpec(f"{name}_max", "ms"),
            scheduler_p99=FigureSpec(f"{name}_scheduler_p99", "ms"),
            missed=FigureSpec(f"{name}_missed", "firings", at_most(0)),
            duplicates=FigureSpec(f"{name}_duplicates", "firings", at_most(0)),
            skipped=FigureSpec(f"{name}_skipped", "firings"),
        )

    def all(self) -> tuple[FigureSpec, ...]:
        return (
            self.p50, self.p99, self.max, self.scheduler_p99, self.missed, self.duplicates,
            self.skipped,
        )  # fmt: skip


@dataclass
class Window:
    """One round: the firings of per-second jobs due in [start, end)."""

    start: datetime
    end: datetime
    lags: list[float] = field(default_factory=list)  # ms, censored ones at their bound
    censored: int = 0
    scheduler_lags: list[float] = field(default_factory=list)  # ms
    queue_lags: list[float] = field(default_factory=list)  # ms, Procrastinate's own
    missed: int = 0
    duplicates: int = 0
    skipped: int = 0
    firings: int = 0
    started: int = 0  # attempts of any job that started within the window


async def run(ctx: BenchContext) -> list[Figure]:
    figures: list[Figure] = []
    for size in ctx.scale.lag_sizes:
        specs = SizeSpecs.of(size)
        try:
            figures += await _run_size(ctx, size, specs)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            figures += [spec.failed(reason) for spec in specs.all()]
    return figures


async def _run_size(ctx: BenchContext, size: int, specs: SizeSpecs) -> list[Figure]:
    url = ctx.postgres.clone(f"lag_{_label(size)}")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            windows, fast, cpu = await _measure(ctx, engine, url, size)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    return _figures(ctx, specs, size, fast, windows, cpu)


async def _seed(ctx: BenchContext, engine: AsyncEngine, url: str, size: int) -> list[str]:
    """Register `size` jobs; return the ids of the per-second ones."""
    rng = random.Random(size)  # noqa: S311 - reproducible schedules, not secrets
    async with api_client(engine, url, ctx.postgres.session) as client:
        template = await create_job(client, **http_job("lag template", ctx.target_url + "/"))
    fast_count = size // 10
    rest = size - fast_count - 1  # the template is one of the rarely due jobs
    # Months five to seven ahead: never due during a run, whatever today's date.
    today = datetime.now(UTC).month
    far = [(today + offset - 1) % 12 + 1 for offset in (5, 6, 7)]
    crons = cron_pool(rng, months=far)
    slow = [crons[i % len(crons)] for i in range(rest * 6 // 10)]
    slow += rare_rates(rng, rest - len(slow))
    fast_specs = [ScheduleSpec(ScheduleType.RATE, "@every 1s")] * fast_count
    fast = await clone_jobs(engine, template["id"], fast_specs, "every second")
    await clone_jobs(engine, template["id"], slow, "rare")
    return [str(job_id) for job_id in fast]


async def _measure(
    ctx: BenchContext, engine: AsyncEngine, url: str, size: int
) -> tuple[list[Window], list[str], str]:
    scale = ctx.scale
    fast = await _seed(ctx, engine, url, size)
    worker = await start_worker(ctx.processes, engine, url, scale.concurrency)
    core, _ = await start_core(ctx.processes, url)
    meter = ctx.cpu_meter(core=core, worker=worker)

    async def first_firing() -> datetime | None:
        async with engine.connect() as conn:
            value: datetime | None = await conn.scalar(_FIRST_FIRING)
        return value

    async def fired() -> bool:
        if not core.alive():
            raise BenchError(f"zilean core exited:\n{core.tail()}")
        return await first_firing() is not None

    await wait_until(fired, within=FIRST_FIRING_TIMEOUT, what="the scheduler's first firing")
    first = await first_firing()
    assert first is not None
    width = timedelta(seconds=math.ceil(scale.lag_window))
    start = first + timedelta(seconds=math.ceil(scale.lag_warmup))
    windows = [Window(start + i * width, start + (i + 1) * width) for i in range(scale.pairs)]
    end = windows[-1].end
    # The windows are measured from the database afterwards; here we only let them pass.
    async with engine.connect() as conn:
        remaining = (end - await clock(conn)).total_seconds()
    started = meter.start()
    await asyncio.sleep(max(0.0, remaining) + 0.2)
    meter.stop(started)
    await stop_soon(ctx.processes, core)
    cutoff = await _drain(engine, end, scale.lag_drain, worker.alive)
    for window in windows:
        await _analyse(engine, window, fast, cutoff)
    return windows, fast, meter.describe()


_FIRST_FIRING = text("SELECT min(scheduled_for) FROM job_firings")

_WINDOW_ROWS = text(
    """
    WITH firing AS (
        SELECT job_id, scheduled_for, created_at FROM job_firings
         WHERE scheduled_for >= :start AND scheduled_for < :end
           AND job_id = ANY(CAST(:fast AS uuid[]))
    ), queued AS (
        SELECT job.id AS queue_id, CAST(job.args->>'job_id' AS uuid) AS job_id,
               deferred.at AS deferred_at, job.status
          FROM procrastinate_jobs job
          JOIN procrastinate_events deferred
            ON deferred.job_id = job.id AND deferred.type = 'deferred'
         WHERE job.queue_name = 'default' AND deferred.at >= :start
    )
    SELECT firing.job_id, firing.scheduled_for, firing.created_at, queued.queue_id,
           CAST(queued.status AS text) AS status, queued.deferred_at,
           started.at AS started_at, attempt.attempted_at, attempt.id AS attempt_id
      FROM firing
      LEFT JOIN queued
        ON queued.job_id = firing.job_id AND queued.deferred_at = firing.created_at
      LEFT JOIN procrastinate_events started
        ON started.job_id = queued.queue_id AND started.type = 'started'
      LEFT JOIN job_attempts attempt ON attempt.queue_job_id = queued.queue_id
    """
)

_STARTED = text(
    "SELECT count(*) FROM job_attempts WHERE attempted_at >= :start AND attempted_at < :end"
)

_PENDING = text(
    """
    SELECT count(*) FROM procrastinate_jobs job
      JOIN procrastinate_events deferred
        ON deferred.job_id = job.id AND deferred.type = 'deferred'
     WHERE job.queue_name = 'default' AND job.status IN ('todo', 'doing')
       AND deferred.at < :end
    """
)


async def _drain(
    engine: AsyncEngine, end: datetime, within: float, worker_alive: Callable[[], bool]
) -> datetime:
    """Give the worker `within` seconds to start what the windows queued; return the cutoff.

    Queue jobs still waiting at the cutoff are counted at their lower bound (cutoff - due).
    """

    async def drained() -> bool:
        if not worker_alive():
            raise BenchError("zilean worker exited during the drain")
        async with engine.connect() as conn:
            return int(await conn.scalar(_PENDING, {"end": end}) or 0) == 0

    # What is still waiting at the cutoff is censored in `_analyse`, and reported.
    with contextlib.suppress(BenchError):
        await wait_until(drained, within=within, what="the worker to drain")
    async with engine.connect() as conn:
        return await clock(conn)


async def _analyse(
    engine: AsyncEngine, window: Window, fast: Sequence[str], cutoff: datetime
) -> None:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                _WINDOW_ROWS, {"start": window.start, "end": window.end, "fast": list(fast)}
            )
        ).all()
        started = await conn.scalar(_STARTED, {"start": window.start, "end": window.end})
        window.started = int(started or 0)
    by_firing: dict[tuple[str, datetime], list[Any]] = defaultdict(list)
    for row in rows:
        by_firing[(str(row.job_id), row.scheduled_for)].append(row)
    seconds = round((window.end - window.start).total_seconds())
    window.firings = len(by_firing)
    window.missed = len(fast) * seconds - len(by_firing)
    for (_, due), matches in by_firing.items():
        first = matches[0]
        window.scheduler_lags.append(_ms(first.created_at - due))
        queue_ids = {row.queue_id for row in matches if row.queue_id is not None}
        attempts = {row.attempt_id for row in matches if row.attempt_id is not None}
        if len(queue_ids) > 1 or len(attempts) > 1:
            window.duplicates += 1
        if not queue_ids:
            window.skipped += 1  # the previous attempt still held the member's lock
            continue
        if first.attempted_at is not None:
            window.lags.append(_ms(first.attempted_at - due))
        else:
            window.lags.append(_ms(cutoff - due))
            window.censored += 1
        if first.started_at is not None:
            window.queue_lags.append(_ms(first.started_at - first.deferred_at))
        else:
            window.queue_lags.append(_ms(cutoff - first.deferred_at))


def _ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000.0


def _stat(windows: Sequence[Window], attribute: str, p: float) -> list[float]:
    values: list[float] = []
    for window in windows:
        samples = getattr(window, attribute)
        if samples:
            values.append(percentile(samples, p))
    return values


def _figures(
    ctx: BenchContext,
    specs: SizeSpecs,
    size: int,
    fast: Sequence[str],
    windows: Sequence[Window],
    cpu: str,
) -> list[Figure]:
    firings = sum(w.firings for w in windows)
    censored = sum(w.censored for w in windows)
    skipped = sum(w.skipped for w in windows)
    seconds = round((windows[0].end - windows[0].start).total_seconds())
    context = (
        f"{size:,} jobs, {len(fast):,} of them @every 1s; {len(windows)} windows of {seconds} s "
        f"after a {ctx.scale.lag_warmup:g} s warm-up; worker concurrency "
        f"{ctx.scale.concurrency}; {firings:,} firings"
    )
    lag_note = f"{context}; baseline: Procrastinate's deferred-to-started for the same jobs"
    if skipped:
        lag_note += f"; {skipped:,} firings skipped (see _skipped) have no lag"
    if censored:
        lag_note += (
            f"; {censored:,} attempts had not started {ctx.scale.lag_drain:g} s after core stopped "
            "and count at that lower bound"
        )
    scheduler_p99 = _stat(windows, "scheduler_lags", 99)
    worker_p99 = _stat(windows, "lags", 99)
    missed = sum(w.missed for w in windows)
    where: list[str] = []
    if scheduler_p99 and worker_p99:
        where.append(
            f"of the end-to-end p99 ({percentile(worker_p99, 50):.0f} ms), "
            f"{percentile(scheduler_p99, 50):.0f} ms is the scheduler's (due to queue insert), "
            "the rest waiting for and running in the worker"
        )
    if missed:
        where.append(
            f"the scheduler fell behind: it fires an overdue entry once, so {missed:,} "
            "instants were never fired"
        )
    if censored:
        where.append("p99 and max are lower bounds")
    window_seconds = sum((w.end - w.start).total_seconds() for w in windows)
    achieved = sum(w.started for w in windows) / window_seconds
    demand = (
        f"the per-second jobs ask for {len(fast):,} attempts/s and the worker started "
        f"{achieved:,.0f}/s during the windows"
    )
    if achieved < 0.95 * len(fast):
        demand += ": the worker is the bottleneck, and overlap locks shed the rest (_skipped)"
    where += [demand, cpu]
    return [
        specs.p50.figure(
            _stat(windows, "lags", 50), _stat(windows, "queue_lags", 50), note=lag_note
        ),
        specs.p99.figure(
            worker_p99, _stat(windows, "queue_lags", 99), note="; ".join([lag_note, *where])
        ),
        specs.max.figure(_stat(windows, "lags", 100), _stat(windows, "queue_lags", 100)),
        specs.scheduler_p99.figure(
            scheduler_p99,
            note="due time to the start of the firing transaction that queued it; p50 "
            f"{_fmt(_stat(windows, 'scheduler_lags', 50))} ms",
        ),
        specs.missed.figure(
            [float(w.missed) for w in windows],
            note="whole-second instants of per-second jobs with no firing row, per window",
        ),
        specs.duplicates.figure(
            [float(w.duplicates) for w in windows],
            note="firings with more than one queue job or attempt, per window",
        ),
        specs.skipped.figure(
            [float(w.skipped) for w in windows],
            note="firings that queued nothing because the job's previous attempt still held "
            "its overlap lock (overlap_policy skip), per window of "
            f"{len(fast) * seconds:,} due instants; they have no lag",
        ),
    ]


def _fmt(values: Sequence[float]) -> str:
    return f"{percentile(values, 50):.1f}" if values else "-"


SCENARIO = Scenario(
    "schedule_lag",
    tuple(spec for size in FULL.lag_sizes for spec in SizeSpecs.of(size).all()),
    run,
)
