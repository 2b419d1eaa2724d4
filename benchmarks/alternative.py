"""The alternative: what a Python team would write instead of adopting Zilean.

A bare Procrastinate 3.10 app with its stock `PsycopgConnector` (pool sized to the
concurrency, everything else at its defaults) whose task makes the same GET with one
shared `httpx.AsyncClient` (default limits), body read in full, nothing recorded. It
runs in its own database (`install_schema`): Zilean's no longer has Procrastinate's
tables. Run as `python -m benchmarks.alternative --queue Q --concurrency C` with
DATABASE_URL and BENCH_TARGET_URL set. Tasks:

- `bench.http`: the GET;
- `bench.chain`: the GET to `url`, then defers the next link until `remaining` is 1.

httpcore asks `sniffio` which async library runs, on every request; when sniffio is not
installed (it is not in this project's dependencies) the failed import is retried each
time, a search of every path entry: at concurrency 20 here, 2.6 to 3.6 ms of CPU per
request without it against 2.0 to 2.7 ms with it. No team would keep paying that once
seen, and it is not httpx's own cost, so `_asyncio_only_sniffio` stands in for it when
it is missing.

The suite-side helpers below insert jobs in one transaction through Procrastinate's own
`procrastinate_defer_jobs_v1`, and read its `procrastinate_events` for timing (their `at`
is the writing transaction's `now()`, the same clock as Zilean's timestamps).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import sys
import types
from datetime import datetime
from typing import Any

import httpx
import procrastinate
import psycopg
from procrastinate.schema import SchemaManager
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.harness import BenchError, wait_until
from benchmarks.processes import ManagedProcess
from benchmarks.queue import clock
from zilean.db.urls import libpq_url

HTTP_TASK = "bench.http"
CHAIN_TASK = "bench.chain"
QUEUE = "bench-alternative"


def _asyncio_only_sniffio() -> None:
    """Make `import sniffio` succeed, answering "asyncio", when sniffio is not installed."""
    if importlib.util.find_spec("sniffio") is not None:
        return
    stub = types.ModuleType("sniffio")
    stub.current_async_library = lambda: "asyncio"  # type: ignore[attr-defined]
    sys.modules["sniffio"] = stub


def build_app(database_url: str, target_url: str, concurrency: int) -> procrastinate.App:
    # A pool as big as the concurrency plus Procrastinate's own fetch and listener;
    # its default of 4 was slower and unstable at concurrency 20.
    connector = procrastinate.PsycopgConnector(
        conninfo=libpq_url(database_url), min_size=1, max_size=concurrency + 2
    )
    app = procrastinate.App(connector=connector)
    client = httpx.AsyncClient()

    @app.task(name=HTTP_TASK)
    async def http() -> None:
        response = await client.get(target_url)
        await response.aread()

    @app.task(name=CHAIN_TASK, pass_context=True)
    async def chain(context: procrastinate.JobContext, remaining: int, url: str) -> None:
        response = await client.get(url)
        await response.aread()
        if remaining > 1:
            await app.configure_task(CHAIN_TASK, queue=context.job.queue).defer_async(
                remaining=remaining - 1, url=url
            )

    del http, chain  # registered on `app` by the decorators
    return app


async def run(queue: str, concurrency: int) -> None:
    _asyncio_only_sniffio()
    app = build_app(os.environ["DATABASE_URL"], os.environ["BENCH_TARGET_URL"], concurrency)
    async with app.open_async():
        await app.run_worker_async(queues=[queue], concurrency=concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description="bare Procrastinate worker, the alternative")
    parser.add_argument("--queue", default=QUEUE)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.queue, args.concurrency))


# --- The suite's side -------------------------------------------------------------------


def install_schema(database_url: str) -> None:
    """Apply Procrastinate 3.10's schema to an empty database."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())


_DEFER = text(
    """
    SELECT unnest(procrastinate_defer_jobs_v1(
        ARRAY(
            SELECT ROW(
                :queue, :task_name, 0, NULL, NULL, args::jsonb, NULL
            )::procrastinate_job_to_defer_v1
            FROM jsonb_array_elements_text(CAST(:jobs AS jsonb)) AS job(args)
        )
    ))
    """
)


async def defer_batch(
    engine: AsyncEngine,
    *,
    task_name: str,
    count: int,
    per_statement: int,
    args: dict[str, Any] | None = None,
    queue: str = QUEUE,
) -> datetime:
    """Insert `count` jobs in one transaction, `per_statement` per insert.

    Return the database clock just before the commit: no worker can see the jobs
    earlier, so it is where an end-to-end measurement starts.
    """
    payload = json.dumps(args or {})
    async with engine.begin() as conn:
        remaining = count
        while remaining > 0:
            size = min(per_statement, remaining)
            await conn.execute(
                _DEFER,
                {"queue": queue, "task_name": task_name, "jobs": json.dumps([payload] * size)},
            )
            remaining -= size
        return await clock(conn)


async def max_job_id(engine: AsyncEngine) -> int:
    """Return the newest job id (0 for none): later batches are above it."""
    async with engine.connect() as conn:
        value = await conn.scalar(text("SELECT max(id) FROM procrastinate_jobs"))
    return int(value or 0)


async def finished_count(engine: AsyncEngine, after_id: int) -> tuple[int, int]:
    """Return (succeeded, finished otherwise) among the jobs above `after_id`."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    """
                    SELECT count(*) FILTER (WHERE status = 'succeeded'),
                           count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted'))
                      FROM procrastinate_jobs WHERE id > :after
                    """
                ),
                {"after": after_id},
            )
        ).one()
    return int(row[0]), int(row[1])


async def wait_for_successes(
    engine: AsyncEngine, app: ManagedProcess, after_id: int, count: int, *, within: float
) -> None:
    """Wait until `count` jobs above `after_id` succeeded; fail if one did not, or `app`
    exited."""

    async def done() -> bool:
        if not app.alive():
            raise BenchError(f"alternative exited:\n{app.tail()}")
        succeeded, other = await finished_count(engine, after_id)
        if other:
            raise BenchError(f"{other} alternative jobs did not succeed")
        return succeeded >= count

    await wait_until(done, within=within, what=f"{count} alternative jobs")


async def last_event_at(engine: AsyncEngine, after_id: int, kind: str) -> datetime:
    """Return the latest `kind` event among the jobs above `after_id`."""
    async with engine.connect() as conn:
        value: datetime | None = await conn.scalar(
            text(
                "SELECT max(at) FROM procrastinate_events "
                "WHERE job_id > :after AND type = CAST(:kind AS procrastinate_job_event_type)"
            ),
            {"after": after_id, "kind": kind},
        )
    if value is None:
        raise ValueError(f"no {kind} event after job {after_id}")
    return value


async def started_gaps(engine: AsyncEngine, after_id: int, at_least: float) -> int:
    """Count gaps of `at_least` seconds between consecutive job starts above `after_id`."""
    async with engine.connect() as conn:
        value = await conn.scalar(
            text(
                """
                SELECT count(*) FROM (
                    SELECT at - lag(at) OVER (ORDER BY at) AS gap
                      FROM procrastinate_events WHERE job_id > :after AND type = 'started'
                ) gaps WHERE gap >= make_interval(secs => :gap)
                """
            ),
            {"after": after_id, "gap": at_least},
        )
    return int(value or 0)


async def delete_finished(engine: AsyncEngine) -> None:
    """Delete finished jobs (their events go with them), so rounds start alike."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "DELETE FROM procrastinate_jobs"
                " WHERE status IN ('succeeded', 'failed', 'cancelled', 'aborted')"
            )
        )


async def worker_count(engine: AsyncEngine) -> int:
    """Return how many Procrastinate workers are registered (alive ones heartbeat)."""
    async with engine.connect() as conn:
        value = await conn.scalar(text("SELECT count(*) FROM procrastinate_workers"))
    return int(value or 0)


if __name__ == "__main__":
    main()
