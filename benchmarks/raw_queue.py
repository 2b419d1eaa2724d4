"""The limit: the least a Postgres queue worker in Python can do per job.

One process, one asyncio loop on uvloop, a plain table of its own (`bench_raw_queue`,
created by `create_table`), psycopg in autocommit, no ORM, no queue library:

1. claim up to `--batch` rows in one statement (`UPDATE ... WHERE id IN (SELECT ...
   FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`);
2. make every row's GET at once with one aiohttp `ClientSession` (body read in full);
3. mark the batch finished in one `UPDATE`; a row whose payload holds a count above 1
   (a chain link) inserts the next link in that same statement, so a chain is a loop
   of claim, GET, finish-and-insert.

Wake-up: LISTEN on a second connection. The suite's producer sends `NOTIFY
bench_raw_queue` in the transaction that inserts rows; the loop claims until a claim
comes back empty, then waits for a notification (or `IDLE_RECHECK`, a backstop). A
chain never waits: the claim after each link finds the next one.

Nothing is recorded but `claimed_at` and `finished_at`, no lock, no retry, no history:
what is left is the queue's own round-trips and the HTTP call. Run as
`python -m benchmarks.raw_queue --concurrency C --url U --chain-url U2` with
DATABASE_URL set; it prints `ready` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from datetime import datetime
from typing import Any

import aiohttp
import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.queue import clock
from zilean.db.urls import libpq_url

TABLE = "bench_raw_queue"
CHANNEL = "bench_raw_queue"
IDLE_RECHECK = 1.0  # seconds an idle loop waits for a notification before claiming again

CREATE = (
    f"""
    CREATE TABLE IF NOT EXISTS {TABLE} (
        id bigserial PRIMARY KEY,
        payload bytea,
        due_at timestamptz NOT NULL DEFAULT now(),
        claimed_at timestamptz,
        finished_at timestamptz
    )
    """,
    f"CREATE INDEX IF NOT EXISTS {TABLE}_waiting ON {TABLE} (id) WHERE claimed_at IS NULL",
)
CLAIM = f"""
UPDATE {TABLE} SET claimed_at = now()
 WHERE id IN (SELECT id FROM {TABLE}
               WHERE claimed_at IS NULL AND due_at <= now()
               ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""  # noqa: S608 - the table name is a constant
FINISH = f"""
WITH finished AS (
    UPDATE {TABLE} SET finished_at = now() WHERE id = ANY(%(ids)s)
)
INSERT INTO {TABLE} (payload) SELECT unnest(%(next)s::bytea[])
"""  # noqa: S608


async def _get(session: aiohttp.ClientSession, url: str) -> None:
    async with session.get(url) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {url} answered {response.status}")


async def consume(database_url: str, concurrency: int, url: str, chain_url: str) -> None:
    """Claim, call and finish until SIGTERM; see the module docstring."""
    conninfo = libpq_url(database_url)
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    listener = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    await listener.execute(f"LISTEN {CHANNEL}")
    wake = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stop() -> None:
        stop.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop)

    async def listen() -> None:
        async for _ in listener.notifies():
            wake.set()

    listening = asyncio.create_task(listen())
    connector = aiohttp.TCPConnector(limit=concurrency)
    print("ready", flush=True)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            while not stop.is_set():
                wake.clear()  # before the claim: a notification during it is kept
                cursor = await conn.execute(CLAIM, {"batch": concurrency})
                rows: list[Any] = await cursor.fetchall()
                if not rows:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), IDLE_RECHECK)
                    continue
                links = [int(row[1]) for row in rows if row[1]]
                await asyncio.gather(*(_get(session, chain_url if row[1] else url) for row in rows))
                following = [str(n - 1).encode() for n in links if n > 1]
                await conn.execute(FINISH, {"ids": [row[0] for row in rows], "next": following})
    finally:
        listening.cancel()
        await conn.close()
        await listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="the raw queue loop, the limit")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--url", required=True, help="what a throughput row GETs")
    parser.add_argument("--chain-url", required=True, help="what a chain link GETs")
    args = parser.parse_args()
    import uvloop

    uvloop.run(consume(os.environ["DATABASE_URL"], args.concurrency, args.url, args.chain_url))


# --- The suite's side -------------------------------------------------------------------


async def create_table(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for statement in CREATE:
            await conn.execute(text(statement))


async def insert_batch(engine: AsyncEngine, count: int, *, chain: int = 0) -> datetime:
    """Insert `count` rows (or one chain of `chain` links) and notify, in one transaction.

    Return the database clock just before the commit, where a measurement starts.
    """
    async with engine.begin() as conn:
        if chain:
            await conn.execute(
                text(f"INSERT INTO {TABLE} (payload) VALUES (:payload)"),  # noqa: S608
                {"payload": str(chain).encode()},
            )
        else:
            await conn.execute(
                text(f"INSERT INTO {TABLE} (payload) SELECT NULL FROM generate_series(1, :n)"),  # noqa: S608
                {"n": count},
            )
        await conn.execute(text(f"NOTIFY {CHANNEL}"))
        return await clock(conn)


async def watermark(engine: AsyncEngine) -> int:
    """Return the newest row id (0 for none): later rows are above it."""
    async with engine.connect() as conn:
        value = await conn.scalar(text(f"SELECT max(id) FROM {TABLE}"))  # noqa: S608
    return int(value or 0)


async def finished_since(engine: AsyncEngine, after_id: int) -> tuple[int, datetime | None]:
    """Return (rows above `after_id` finished, the last `finished_at` among them)."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    f"SELECT count(finished_at), max(finished_at) FROM {TABLE} "  # noqa: S608
                    "WHERE id > :after"
                ),
                {"after": after_id},
            )
        ).one()
    return int(row[0]), row[1]


async def clear(engine: AsyncEngine) -> None:
    """Delete finished rows, so every round starts from an empty table."""
    async with engine.begin() as conn:
        await conn.execute(text(f"DELETE FROM {TABLE} WHERE finished_at IS NOT NULL"))  # noqa: S608


if __name__ == "__main__":
    main()
