"""The raw engine: PgQueuer's own `QueueManager` with a no-op entrypoint, nothing of Zilean's.

It runs in the Zilean database's `pgqueuer` table on its own entrypoint (`bench-raw`),
at half the subject's concurrency per dequeue (PgQueuer caps its claims at twice its batch),
and listens on our channel for it
(`zilean.queue.bench-raw`): revision 0009 replaced PgQueuer's catch-all trigger with
per-queue ones. It is PgQueuer's stock worker, which Zilean's own consumer replaced:
stock `QueueManager`, stock `Queries`, stock psycopg driver class.

One change to the stock driver: LISTEN runs on a second connection. PgQueuer's
`PsycopgDriver` sends statements and waits for notifications on one connection, and
its notification watcher holds that connection's lock for up to a second while idle,
so a dequeue waits behind it. Measured here on six batches (1, 1, 1, 100, 100 and
1,000 jobs inserted at once), three started their first job 2.0 to 2.1 s after the
insert; with the listener on its own connection every batch's first job started within
18 ms and the 100-job batches ended within 46 ms. A baseline with such stalls would
hide everything it is compared with.

Run as `python -m benchmarks.raw_engine --concurrency C` with DATABASE_URL set. The
suite's side enqueues through PgQueuer's own `Queries.enqueue` and reads start times
from PgQueuer's log: a job's `queued` entry is stamped by its insert statement, its
`picked` entry by the dequeue that claimed it, both with the database's `now()`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
from pgqueuer.adapters.persistence.qb import (
    QueryBuilderEnvironment,
    QueryQueueBuilder,
    QuerySchedulerBuilder,
)
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.core.qm import QueueManager
from pgqueuer.domain import models
from pgqueuer.domain.types import Channel
from pgqueuer.ports.driver import NotifyCallback
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.urls import libpq_url
from zilean.queue_engine.statements import LOG_TABLE, QUEUE_TABLE, channel_for
from zilean.queue_engine.stock import batch_and_capacity, engine_settings

ENTRYPOINT = "bench-raw"
ENQUEUE_CONNECTIONS = 4  # the scheduler's FIRE_CONCURRENCY: firing transactions in flight


class SplitPsycopgDriver(PsycopgDriver):
    """PgQueuer's psycopg driver with LISTEN on a connection of its own (see above)."""

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], listener: psycopg.AsyncConnection[Any]
    ) -> None:
        super().__init__(connection)
        self._listener = listener

    async def add_listener(self, channel: str, callback: NotifyCallback) -> None:
        if channel not in self._listeners:
            await self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._listeners[channel] = []
        self._listeners[channel].append(callback)
        if self._watcher is None:
            self._watcher = asyncio.create_task(self.watch_notifies())
            self._tm.add(self._watcher)

    async def watch_notifies(self) -> None:
        while not self.shutdown.is_set():
            async for note in self._listener.notifies(timeout=1.0, stop_after=1):
                for callback in list(self._listeners.get(note.channel, [])):
                    callback(note.payload)

    async def remove_listener(self, channel: str, callback: NotifyCallback) -> None:
        callbacks = self._listeners.get(channel, [])
        if callback in callbacks:
            callbacks.remove(callback)


def queries(driver: PsycopgDriver) -> Queries:
    """PgQueuer's repository on `driver`, with Zilean's object names and our channel."""
    settings = engine_settings(channel_for(ENTRYPOINT))
    return Queries(
        driver,
        qbe=QueryBuilderEnvironment(settings),
        qbq=QueryQueueBuilder(settings),
        qbs=QuerySchedulerBuilder(settings),
    )


async def consume(database_url: str, concurrency: int) -> None:
    conninfo = libpq_url(database_url)
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    listener = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    manager = QueueManager(
        queries(SplitPsycopgDriver(conn, listener)), channel=Channel(channel_for(ENTRYPOINT))
    )

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: models.Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, manager.shutdown.set)
    batch, capacity = batch_and_capacity(concurrency)
    try:
        # Nothing reads pgqueuer_statistics, as in Zilean's consumer.
        await manager.run(
            batch_size=batch,
            max_concurrent_tasks=capacity,
            log_aggregation_interval=timedelta(0),
        )
    finally:
        await conn.close()
        await listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="PgQueuer's own worker, a no-op entrypoint")
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(consume(os.environ["DATABASE_URL"], args.concurrency))


# --- The suite's side -------------------------------------------------------------------


class Enqueuer:
    """PgQueuer's `Queries.enqueue` on `ENQUEUE_CONNECTIONS` connections of the suite's."""

    def __init__(self, database_url: str) -> None:
        self._conninfo = libpq_url(database_url)
        self._connections: list[psycopg.AsyncConnection[Any]] = []
        self._queries: list[Queries] = []

    async def __aenter__(self) -> Enqueuer:
        for _ in range(ENQUEUE_CONNECTIONS):
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            self._connections.append(conn)
            self._queries.append(queries(PsycopgDriver(conn)))
        return self

    async def __aexit__(self, *_: object) -> None:
        for conn in self._connections:
            await conn.close()

    async def enqueue(self, count: int, delay: timedelta | None = None) -> None:
        """Insert `count` jobs due after `delay`, split over the connections as the
        scheduler splits a due instant over its firing transactions."""
        size = -(-count // len(self._queries))  # ceiling division
        chunks = [min(size, count - start) for start in range(0, count, size)]
        await asyncio.gather(
            *(
                repository.enqueue(
                    [ENTRYPOINT] * chunk, [None] * chunk, [0] * chunk, [delay] * chunk
                )
                for repository, chunk in zip(self._queries, chunks, strict=False)
            )
        )

    async def enqueue_one(self, delay: timedelta | None = None) -> list[int]:
        """Insert one job due after `delay`; return its id (in a list, as PgQueuer does)."""
        return [
            int(job_id) for job_id in await self._queries[0].enqueue(ENTRYPOINT, None, 0, delay)
        ]

    async def one_at_a_time(self, count: int) -> None:
        """Insert `count` jobs, one per `Queries.enqueue` call, one call per connection
        at a time."""
        per_connection = [count // len(self._queries)] * len(self._queries)
        for index in range(count % len(self._queries)):
            per_connection[index] += 1

        async def insert(repository: Queries, jobs: int) -> None:
            for _ in range(jobs):
                await repository.enqueue(ENTRYPOINT, None)

        await asyncio.gather(
            *(insert(q, n) for q, n in zip(self._queries, per_connection, strict=True))
        )


async def waiting(engine: AsyncEngine) -> int:
    """Return how many raw jobs are still waiting to be picked."""
    async with engine.connect() as conn:
        value = await conn.scalar(
            text(
                f"SELECT count(*) FROM {QUEUE_TABLE} "  # noqa: S608 - a constant
                "WHERE entrypoint = :entrypoint AND status = 'queued'"
            ),
            {"entrypoint": ENTRYPOINT},
        )
    return int(value or 0)


_STARTS = text(
    f"""
    SELECT queued.job_id, queued.created AS queued_at, min(picked.created) AS picked_at
      FROM {LOG_TABLE} queued
      LEFT JOIN {LOG_TABLE} picked ON picked.job_id = queued.job_id AND picked.status = 'picked'
     WHERE queued.entrypoint = :entrypoint AND queued.status = 'queued'
       AND queued.created >= :start AND queued.created < :end
     GROUP BY queued.job_id, queued.created
    """  # noqa: S608 - the table name is a constant
)


_STARTS_OF = text(
    f"""
    SELECT queued.job_id, queued.created AS queued_at, min(picked.created) AS picked_at
      FROM {LOG_TABLE} queued
      LEFT JOIN {LOG_TABLE} picked ON picked.job_id = queued.job_id AND picked.status = 'picked'
     WHERE queued.job_id = ANY(:ids) AND queued.status = 'queued'
     GROUP BY queued.job_id, queued.created
    """  # noqa: S608 - the table name is a constant
)


async def starts(
    engine: AsyncEngine, job_ids: Sequence[int]
) -> dict[int, tuple[datetime, datetime | None]]:
    """(queued, picked) of each of these raw jobs; picked None: never."""
    async with engine.connect() as conn:
        rows = (await conn.execute(_STARTS_OF, {"ids": list(job_ids)})).all()
    return {int(row.job_id): (row.queued_at, row.picked_at) for row in rows}


async def enqueue_to_start(
    engine: AsyncEngine, start: datetime, end: datetime
) -> Sequence[tuple[datetime, datetime | None]]:
    """(queued, picked) of every raw job queued in [start, end); picked None: never."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(_STARTS, {"entrypoint": ENTRYPOINT, "start": start, "end": end})
        ).all()
    return [(row.queued_at, row.picked_at) for row in rows]


if __name__ == "__main__":
    main()
