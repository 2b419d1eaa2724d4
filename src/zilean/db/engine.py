"""The async SQLAlchemy Core engine every service shares."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

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
