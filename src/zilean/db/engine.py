"""The async SQLAlchemy Core engine every service shares."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from zilean.db.urls import sqlalchemy_url

POOL_TIMEOUT = 5.0  # seconds: a stalled pool becomes an error, not a hang


def create_engine(database_url: str, *, pool_size: int = 5, max_overflow: int = 5) -> AsyncEngine:
    """The engine every service uses (the attempt's own statements use another pool:
    `execution/hot_path.py`)."""
    return create_async_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=POOL_TIMEOUT,
        pool_pre_ping=True,
        # Timestamps leave the database in UTC whatever the server's TimeZone setting.
        connect_args={"options": "-c timezone=UTC"},
    )


async def driver_connection(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection under `conn`, in the same transaction.

    For statements written for psycopg (the queue engine's), run inside a transaction
    that SQLAlchemy owns.
    """
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver
