"""api_latency: `GET /api/jobs` and `GET /api/jobs/heartbeats` with 1,000 jobs and a day of stats.

The database holds `api_jobs` HTTP jobs (cloned from one created through the API, never
due during the run) and `api_hours` hours of one-minute `job_call_stats` buckets for
every job (1.44 million rows at the issue's size). The real `zilean core` serves them
over loopback HTTP (uvicorn, its scheduler and sweeps running as in production); the
suite's client signs in with the benchmark admin's session cookie and sends
`api_requests` sequential requests per route per round; the figure is the median of the
per-round p50s. Baseline: `GET /healthz` on the same server and client (the HTTP and
framework floor).

The heartbeats route is checked against its documented shape (`window_start`,
`bucket_width_seconds`, `slot_count`, `jobs: [{job_id, buckets}]`); a route that answers
anything but 200 is reported as not measured, with the status, rather than failing the
other figures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, at_most
from benchmarks.harness import interleave, say
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, clone_jobs, create_job, cron_pool, http_job, rare_rates
from benchmarks.services import start_core
from benchmarks.stats import percentile
from zilean.auth.sessions import SESSION_COOKIE
from zilean.db.engine import create_engine

JOBS = FigureSpec("api_jobs_list_p50", "ms")
HEARTBEATS = FigureSpec("api_heartbeats_p50", "ms", at_most(100.0))
HEARTBEAT_KEYS = {"window_start", "bucket_width_seconds", "slot_count", "jobs"}
REQUEST_TIMEOUT = 30.0  # seconds


class RouteUnavailable(Exception):
    """The route answered something other than 200."""


_STATS = text(
    """
    INSERT INTO job_call_stats
        (job_id, bucket_start, total, completed, failed, duration_sum_ms, duration_max_ms)
    SELECT job.id, date_trunc('minute', now()) - make_interval(mins => minute),
           6, 5, 1, 6 * (20 + minute % 30), 20 + minute % 50
      FROM scheduled_jobs job CROSS JOIN generate_series(0, :minutes - 1) AS minute
    """
)


async def run(ctx: BenchContext) -> list[Figure]:
    url = ctx.postgres.clone("api")
    engine = create_engine(url)
    try:
        with ctx.processes.scope():
            started = time.monotonic()
            seeded = await _seed(ctx, engine, url)
            say(f"api_latency: {seeded:,} stats rows seeded in {time.monotonic() - started:.1f} s")
            _, base_url = await start_core(ctx.processes, url)
            figures = await _measure(ctx, base_url)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    return [figure.with_note(f"{seeded:,} stats rows") for figure in figures]


async def _seed(ctx: BenchContext, engine: AsyncEngine, url: str) -> int:
    """Register the jobs and their stats; return how many stats rows there are."""
    scale = ctx.scale
    rng = random.Random(11)  # noqa: S311 - reproducible schedules, not secrets
    async with api_client(engine, url, ctx.postgres.session) as client:
        template = await create_job(client, **http_job("api template", ctx.target_url + "/"))
    month = datetime.now(UTC).month
    far = [(month + offset - 1) % 12 + 1 for offset in (5, 6, 7)]
    crons = cron_pool(rng, months=far)
    rest = scale.api_jobs - 1
    specs = [crons[i % len(crons)] for i in range(rest * 8 // 10)]
    specs += rare_rates(rng, rest - len(specs))
    await clone_jobs(engine, template["id"], specs, "api")
    async with engine.begin() as conn:
        inserted = await conn.execute(_STATS, {"minutes": scale.api_hours * 60})
    async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        await conn.execute(text("VACUUM ANALYZE job_call_stats, scheduled_jobs"))
    return int(inserted.rowcount)


async def _measure(ctx: BenchContext, base_url: str) -> list[Figure]:
    scale = ctx.scale
    requests = scale.api_requests
    problems: dict[str, str] = {}
    shapes: dict[str, str] = {}

    async with httpx.AsyncClient(
        base_url=base_url,
        cookies={SESSION_COOKIE: ctx.postgres.session},
        timeout=REQUEST_TIMEOUT,
    ) as client:

        def p50_of(path: str, check: Callable[[Any], str]) -> Callable[[], Awaitable[float]]:
            async def step() -> float:
                times: list[float] = []
                for _ in range(requests):
                    started = time.perf_counter()
                    response = await client.get(path)
                    body = response.content
                    times.append((time.perf_counter() - started) * 1000.0)
                    if response.status_code != 200:
                        raise RouteUnavailable(
                            f"GET {path} answered {response.status_code}: {body[:200]!r}"
                        )
                shapes[path] = check(response.json())
                return percentile(times, 50)

            return step

        def guarded(
            name: str, step: Callable[[], Awaitable[float]]
        ) -> Callable[[], Awaitable[float]]:
            """Turn a route's failure into a note, so the other routes are still measured."""

            async def run_step() -> float:
                if name in problems:
                    return float("nan")
                try:
                    return await step()
                except (RouteUnavailable, httpx.HTTPError, ValueError) as exc:
                    problems[name] = str(exc)
                    return float("nan")

            return run_step

        results = await interleave(
            scale.pairs,
            [
                ("health", p50_of("/healthz", lambda body: "")),
                ("jobs", guarded("jobs", p50_of("/api/jobs", _check_jobs(scale.api_jobs)))),
                (
                    "heartbeats",
                    guarded(
                        "heartbeats",
                        p50_of("/api/jobs/heartbeats", _check_heartbeats(scale.api_jobs)),
                    ),
                ),
            ],
        )
    context = (
        f"{scale.api_jobs:,} jobs, {scale.api_hours} h of one-minute buckets each; "
        f"{requests} sequential requests per route per round over loopback to `zilean core`; "
        "baseline: GET /healthz p50"
    )
    figures: list[Figure] = []
    for key, spec in (("jobs", JOBS), ("heartbeats", HEARTBEATS)):
        if key in problems:
            figures.append(spec.failed(problems[key]))
            continue
        note = context
        path = "/api/jobs" if key == "jobs" else "/api/jobs/heartbeats"
        if shapes.get(path):
            note += f"; response shape: {shapes[path]}"
        figures.append(spec.figure(results[key], results["health"], note=note))
    return figures


def _check_jobs(expected: int) -> Callable[[Any], str]:
    def check(body: Any) -> str:
        count = len(body) if isinstance(body, list) else -1
        return "" if count == expected else f"{count} jobs listed, expected {expected}"

    return check


def _check_heartbeats(expected: int) -> Callable[[Any], str]:
    def check(body: Any) -> str:
        if not isinstance(body, dict) or not body.keys() >= HEARTBEAT_KEYS:
            keys = sorted(body) if isinstance(body, dict) else type(body).__name__
            return f"unexpected shape (keys {keys})"
        jobs = body["jobs"]
        if len(jobs) != expected or not all({"job_id", "buckets"} <= job.keys() for job in jobs):
            return f"{len(jobs)} job entries, expected {expected} with job_id and buckets"
        return ""

    return check


SCENARIO = Scenario("api_latency", (JOBS, HEARTBEATS), run)
