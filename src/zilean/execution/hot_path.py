"""The attempt's two statements, on a psycopg pool of the worker's own.

An attempt reads its job and records its outcome: two statements, hundreds of times a
second in one process. Through SQLAlchemy's async engine and pool each cost about
0.85 ms of worker time against 0.45 ms sent straight to psycopg, most of the worker's
overhead over a bare queue task (docs/performance.md). So the same Core constructs are
compiled once (`RawStatement`) and sent on autocommit connections of this pool.

No connection is checked before use (that would be a round-trip per statement). A
statement that fails because its connection turns out dead is sent once more after the
pool drops its dead connections; both statements are safe to repeat (the read only
stamps the member's lock; the recording is idempotent per queue job).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
import structlog
from psycopg.rows import dict_row
from sqlalchemy import JSON
from sqlalchemy.dialects.postgresql.psycopg import PGDialectAsync_psycopg
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from zilean.db.engine import POOL_TIMEOUT
from zilean.db.urls import libpq_url

log = structlog.get_logger(__name__)

_DIALECT = PGDialectAsync_psycopg()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class RawStatement:
    """A Core construct compiled once for psycopg, with its own literal values."""

    sql: str
    constants: dict[str, Any]
    json_params: frozenset[str]  # parameters sent as JSON text

    @classmethod
    def of(cls, statement: ClauseElement) -> RawStatement:
        compiled = statement.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        names = compiled.bind_names  # bind -> its name in the SQL text
        return cls(
            sql=str(compiled),
            constants={names[b]: b.effective_value for b in names if not b.required},
            json_params=frozenset(
                names[b] for b in names if b.required and isinstance(b.type, JSON)
            ),
        )

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        values = dict(self.constants)
        for name, value in params.items():
            json_value = name in self.json_params and value is not None
            values[name] = json.dumps(value) if json_value else value
        return values


class HotConnections:
    """The worker's pool for the attempt statements; opened on first use."""

    def __init__(self, database_url: str, *, max_size: int) -> None:
        self._pool = psycopg_pool.AsyncConnectionPool(
            libpq_url(database_url),
            min_size=1,
            max_size=max_size,
            timeout=POOL_TIMEOUT,
            open=False,
            # Timestamps leave the database in UTC, as from the SQLAlchemy engine.
            kwargs={"autocommit": True, "options": "-c timezone=UTC"},
        )
        self._opened = False
        self._opening = asyncio.Lock()
        self.statements_sent = 0  # for tests: the hot path's own round-trips

    async def close(self) -> None:
        if self._opened:
            await self._pool.close()

    async def fetch_first(
        self, statement: RawStatement, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Send `statement`; return its first row. Once more if the connection was dead."""
        if not self._opened:
            async with self._opening:
                if not self._opened:
                    await self._pool.open(wait=False)
                    self._opened = True
        values = statement.values(params)
        try:
            return await self._send(statement.sql, values)
        except _DeadConnection:
            log.info("database connection was dead; retrying once", action="attempt.reconnect")
            await self._pool.check()  # drop every dead idle connection
        try:
            return await self._send(statement.sql, values)
        except _DeadConnection as dead:
            raise dead.error from None

    async def _send(self, sql: str, values: dict[str, Any]) -> dict[str, Any] | None:
        async with self._pool.connection() as conn:
            try:
                async with conn.cursor(row_factory=dict_row) as cursor:
                    self.statements_sent += 1
                    await cursor.execute(sql, values)
                    return await cursor.fetchone()
            except psycopg.OperationalError as exc:
                if conn.broken or conn.closed:
                    raise _DeadConnection(exc) from exc
                raise


class _DeadConnection(Exception):
    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error
