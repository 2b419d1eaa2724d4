"""Which schema revision the database is at, and waiting for core to reach ours.

Every service but core only waits, so this module reads `alembic_version` with plain
SQL on psycopg: loading Alembic, or even SQLAlchemy, would cost each worker process
megabytes. `tests/integration/test_migrations.py` checks `HEAD_REVISION` against
Alembic's head.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import structlog

from zilean.db.urls import libpq_url, redacted
from zilean.errors import SchemaError
from zilean.loops import wait_for_stop

log = structlog.get_logger(__name__)

HEAD_REVISION = "0015"  # the newest revision in db/migrations/versions
SCHEMA_POLL_INTERVAL = 2.0  # seconds between checks while waiting for core


def recorded_revisions(connection: psycopg.Connection[Any]) -> list[str]:
    """The revisions `alembic_version` records (none when the table does not exist)."""
    if connection.execute("SELECT to_regclass('alembic_version')").fetchone() == (None,):
        return []
    return [str(row[0]) for row in connection.execute("SELECT version_num FROM alembic_version")]


def single_revision(heads: list[str]) -> str | None:
    """The one recorded revision, None for none; several is a database to fix by hand."""
    if len(heads) > 1:
        raise SchemaError(
            f"the database records several schema revisions ({', '.join(sorted(heads))}); "
            "resolve by hand before starting"
        )
    return heads[0] if heads else None


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def schema_status(database_url: str) -> str | None:
    """Return None when the schema is at the head revision, else why it is not ready."""
    try:
        with psycopg.connect(libpq_url(database_url), connect_timeout=5) as connection:
            current = single_revision(recorded_revisions(connection))
    except psycopg.OperationalError as exc:
        return f"database unreachable: {first_line(exc)}"
    if current == HEAD_REVISION:
        return None
    return f"schema at revision {current or 'none'}, waiting for revision {HEAD_REVISION}"


async def wait_for_schema(
    database_url: str,
    *,
    interval: float = SCHEMA_POLL_INTERVAL,
    give_up_after: float | None = None,
    stop: asyncio.Event | None = None,
) -> bool:
    """Wait until core has applied every migration this code expects; False if `stop` was set.

    Services other than core never migrate; they log why they are waiting and retry,
    rather than exiting and being restarted in a loop.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    deadline = None if give_up_after is None else loop.time() + give_up_after
    while (reason := await asyncio.to_thread(schema_status, database_url)) is not None:
        log.info(
            "waiting for core to apply migrations",
            action="db.waiting_for_schema",
            reason=reason,
            database=redacted(database_url),
        )
        if deadline is not None and loop.time() >= deadline:
            raise SchemaError(f"gave up waiting for the schema: {reason}")
        await wait_for_stop(stop, interval)
        if stop.is_set():
            return False
    return True
