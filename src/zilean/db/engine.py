"""The async SQLAlchemy Core engine every service shares."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from zilean.db.urls import sqlalchemy_url

POOL_TIMEOUT = 5.0  # seconds: a stalled pool becomes an error, not a hang


def create_engine(
    database_url: str, *, pool_size: int = 5, max_overflow: int = 5, pre_ping: bool = True
) -> AsyncEngine:
    """The engine every service uses; `pre_ping=False` only where callers retry instead.

    The pre-ping costs a round-trip per checkout; the attempt path skips it and retries a
    statement once on a connection found dead (`execution/attempt.py`).
    """
    return create_async_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=POOL_TIMEOUT,
        pool_pre_ping=pre_ping,
        # Timestamps leave the database in UTC whatever the server's TimeZone setting.
        connect_args={"options": "-c timezone=UTC"},
    )
