"""Plain psycopg connections, for the code that runs without SQLAlchemy.

Workers never load SQLAlchemy (about 14 MiB per process): their attempt statements,
queue engine, samples and status reports all use connections made here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from zilean.db.urls import libpq_url

CONNECT_TIMEOUT = 5  # seconds (libpq takes whole seconds)


async def connect(
    database_url: str,
    *,
    application_name: str,
    synchronous_commit: bool = True,
    lock_timeout: float | None = None,
) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection whose timestamps come back in UTC, as from the engine.

    With `synchronous_commit` off, a commit returns before its WAL reaches the disk: a
    Postgres crash (not a restart) can lose the last fraction of a second of them, never
    half of one. Only for writes that are safe to lose that way (see the callers).
    `lock_timeout` (seconds) makes a statement that waits longer for a lock fail.
    """
    options = "-c timezone=UTC"
    if not synchronous_commit:
        options += " -c synchronous_commit=off"
    if lock_timeout is not None:
        options += f" -c lock_timeout={round(lock_timeout * 1000)}"
    return await psycopg.AsyncConnection.connect(
        libpq_url(database_url),
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        application_name=application_name,
        options=options,
    )


@asynccontextmanager
async def short_connection(
    database_url: str, *, application_name: str
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection for one write now and then (a sample, a status report), then closed."""
    conn = await connect(database_url, application_name=application_name)
    try:
        yield conn
    finally:
        await conn.close()
