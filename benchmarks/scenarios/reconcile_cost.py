"""reconcile_cost: the scheduler's idle reconcile tick and full resync, at 1,000 and 10,000 jobs.

The real `Scheduler` runs in process against databases holding docs/scheduling.md's
mix (80% cron over 800 distinct expression/zone pairs in three zones, 20% rate), each
size in its own database, all steps interleaved within every round:

- idle tick: `reconcile_once()` on a full map with nothing changed (the 30 s backstop);
  the median of `reconcile_ticks` ticks per round;
- full resync: a fresh `Scheduler`'s first `reconcile_once()` (a new leader), with the
  expressions already parsed (`compile_cron`'s cache warm, as in a running core); the
  same with the cache cleared (a process's first start) is reported in `cold_ms`;
- baseline: the same rows read through the same engine with nothing applied, i.e. the
  database's share of the tick.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, at_most
from benchmarks.harness import interleave
from benchmarks.scales import FULL
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, clone_jobs, create_job, http_job, reconcile_mix
from benchmarks.stats import median
from zilean.db.engine import create_engine
from zilean.scheduler import Scheduler
from zilean.schedules import compile_cron

IDLE_TARGET = 1.0  # ms
SCALING_TARGET = 1.3  # idle tick at the larger size / at the smaller
FULL_TARGET = 1_000.0  # ms, at 10,000 jobs
FULL_TARGET_SIZE = 10_000

# The read a reconcile does, minus the disabled-groups test and everything after it.
_ROWS = text(
    "SELECT id, schedule_type, cron_expression, timezone, updated_at FROM scheduled_jobs "
    "WHERE enabled AND schedule_type IN ('cron', 'rate')"
)


def _label(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def _specs(sizes: tuple[int, ...]) -> dict[str, FigureSpec]:
    specs: dict[str, FigureSpec] = {}
    for size in sizes:
        label = _label(size)
        specs[f"idle_{size}"] = FigureSpec(
            f"reconcile_idle_tick_{label}", "ms", at_most(IDLE_TARGET)
        )
        specs[f"full_{size}"] = FigureSpec(
            f"reconcile_full_resync_{label}",
            "ms",
            at_most(FULL_TARGET) if size == FULL_TARGET_SIZE else None,
        )
    specs["scaling"] = FigureSpec(
        f"reconcile_idle_scaling_{_label(sizes[-1])}_vs_{_label(sizes[0])}",
        "x",
        at_most(SCALING_TARGET),
    )
    return specs


@dataclass
class Sized:
    """One database of `size` jobs and a scheduler holding its full map."""

    size: int
    url: str
    engine: AsyncEngine
    scheduler: Scheduler


async def run(ctx: BenchContext) -> list[Figure]:
    sizes = ctx.scale.reconcile_sizes
    specs = _specs(sizes)
    prepared: list[Sized] = []
    try:
        for size in sizes:
            url = ctx.postgres.clone(f"reconcile_{_label(size)}")
            engine = create_engine(url)
            prepared.append(Sized(size, url, engine, Scheduler(engine, "UTC")))
            await _seed(ctx, prepared[-1])
        results = await _measure(ctx, prepared)
    finally:
        for sized in prepared:
            await sized.engine.dispose()
            ctx.postgres.drop(sized.url)
    return _figures(ctx, specs, results)


async def _seed(ctx: BenchContext, sized: Sized) -> None:
    # One seed for every size: the same 800 expression/zone pairs, so a "warm" resync at
    # either size finds them all in compile_cron's cache of 1,024.
    rng = random.Random(7)  # noqa: S311 - reproducible schedules, not secrets
    async with api_client(sized.engine, sized.url, ctx.postgres.session) as client:
        template = await create_job(client, **http_job("reconcile template", ctx.target_url))
    await clone_jobs(sized.engine, template["id"], reconcile_mix(sized.size - 1, rng), "job")
    async with sized.engine.connect() as conn:
        await conn.execute(text("ANALYZE scheduled_jobs"))
        await conn.commit()
    await sized.scheduler.reconcile_once()
    if len(sized.scheduler.entries) != sized.size:
        raise RuntimeError(f"{len(sized.scheduler.entries)} entries for {sized.size} jobs")


async def _measure(ctx: BenchContext, prepared: list[Sized]) -> dict[str, list[float]]:
    ticks = ctx.scale.reconcile_ticks

    def timed_many(step: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[float]]:
        async def median_ms() -> float:
            times: list[float] = []
            for _ in range(ticks):
                started = time.perf_counter()
                await step()
                times.append((time.perf_counter() - started) * 1000.0)
            return median(times)

        return median_ms

    def read(sized: Sized) -> Callable[[], Awaitable[object]]:
        async def rows() -> object:
            async with sized.engine.connect() as conn:
                return (await conn.execute(_ROWS)).all()

        return rows

    def full(sized: Sized, *, cold: bool) -> Callable[[], Awaitable[float]]:
        async def resync_ms() -> float:
            if cold:
                compile_cron.cache_clear()
            fresh = Scheduler(sized.engine, "UTC")
            started = time.perf_counter()
            await fresh.reconcile_once()
            return (time.perf_counter() - started) * 1000.0

        return resync_ms

    steps: list[tuple[str, Callable[[], Awaitable[float]]]] = []
    for sized in prepared:
        steps += [
            (f"read_{sized.size}", timed_many(read(sized))),
            (f"idle_{sized.size}", timed_many(sized.scheduler.reconcile_once)),
            (f"full_{sized.size}", full(sized, cold=False)),
            (f"cold_{sized.size}", full(sized, cold=True)),
        ]
    return await interleave(ctx.scale.pairs, steps)


def _figures(
    ctx: BenchContext, specs: dict[str, FigureSpec], results: dict[str, list[float]]
) -> list[Figure]:
    sizes = ctx.scale.reconcile_sizes
    mix = "80% cron (800 distinct expression/zone pairs, 3 zones), 20% rate"
    figures: list[Figure] = []
    for size in sizes:
        read = results[f"read_{size}"]
        figures.append(
            specs[f"idle_{size}"].figure(
                results[f"idle_{size}"],
                read,
                note=f"{size:,} jobs ({mix}); median of {ctx.scale.reconcile_ticks} ticks per "
                "round; baseline: the same rows read with nothing applied",
            )
        )
        figures.append(
            specs[f"full_{size}"].figure(
                results[f"full_{size}"],
                read,
                note="a fresh scheduler's first reconcile, expressions already parsed; "
                f"with compile_cron's cache cleared (first start): median "
                f"{median(results[f'cold_{size}']):.1f} ms",
                cold_ms=results[f"cold_{size}"],
            )
        )
    small, large = sizes[0], sizes[-1]
    figures.append(
        specs["scaling"].figure(
            [
                b / a
                for a, b in zip(results[f"idle_{small}"], results[f"idle_{large}"], strict=True)
            ],
            [
                b / a
                for a, b in zip(results[f"read_{small}"], results[f"read_{large}"], strict=True)
            ],
            note=f"idle tick at {large:,} jobs / at {small:,}, per round; baseline: the same "
            "ratio for the bare read",
        )
    )
    return figures


SCENARIO = Scenario("reconcile_cost", tuple(_specs(FULL.reconcile_sizes).values()), run)
