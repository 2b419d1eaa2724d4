"""Zilean's queue as the suite sees it: the database clock, readiness, and queue history.

Zilean's queue is PgQueuer 1.6 (`zilean/queue_engine/`). A worker is ready once its
listener connection has run `LISTEN` on its queue's channel (`channel_for`): that is
read from `pg_stat_activity`, so readiness needs no log parsing and counts several
workers alike. Finished queue jobs are deleted by PgQueuer itself; their history is
in `pgqueuer_log`, which `clear_queue_history` empties between rounds (retention does
that in production), so every round starts from tables of the same size.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.db.engine import driver_connection
from zilean.queue_engine.statements import LOG_TABLE, channel_for, unfinished

_CLOCK = text("SELECT clock_timestamp()")
# The listener's last statement is its LISTEN, for as long as it lives (`driver.py`).
_LISTENING = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = :listen"
)


async def clock(conn: AsyncConnection) -> datetime:
    """Return the database's wall clock now (not the transaction's start)."""
    value: datetime = (await conn.execute(_CLOCK)).scalar_one()
    return value


async def listening(engine: AsyncEngine, queue: str) -> int:
    """Return how many connections listen on `queue`'s channel (one per live consumer)."""
    async with engine.connect() as conn:
        value = await conn.scalar(_LISTENING, {"listen": f'LISTEN "{channel_for(queue)}"'})
    return int(value or 0)


async def pending(engine: AsyncEngine) -> int:
    """Return how many queue jobs wait or run, on every queue."""
    async with engine.connect() as conn:
        return await unfinished(await driver_connection(conn))


async def clear_queue_history(engine: AsyncEngine) -> None:
    """Empty the queue's log of finished jobs, so every round starts alike."""
    async with engine.begin() as conn:
        await conn.execute(text(f"DELETE FROM {LOG_TABLE}"))  # noqa: S608 - a constant
