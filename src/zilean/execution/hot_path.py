"""The connections an attempt's two statements run on: a small pool of the worker's own.

An attempt reads its job and records its outcome, hundreds of times a second in one
process, so the statements go straight to psycopg (no SQLAlchemy: the HTTP worker never
loads it) on autocommit connections, each statement one round-trip. psycopg prepares a
statement on a connection after its fifth use, so the server plans each once.

No connection is checked before use (that would be a round-trip per statement), and a
connection is opened on demand, never by a background retry loop that could back off
for seconds after an outage. A statement whose connection turns out dead, or that
outlives `STATEMENT_TIMEOUT` on a half-open one (`db/deadline.py`), is sent once more on
a fresh connection; both statements are safe to repeat (the read stamps the member's
lock and inserts the start marker only once; the recording is idempotent per queue job).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

import psycopg
import structlog
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from zilean.db.deadline import deadline
from zilean.db.direct import connect

log = structlog.get_logger(__name__)

Params = Mapping[str, Any] | tuple[Any, ...]

STATEMENT_TIMEOUT = 5.0  # seconds; both statements normally take about a millisecond


class HotConnections:
    """Up to `max_size` autocommit connections, opened when first needed."""

    def __init__(
        self,
        database_url: str,
        *,
        max_size: int,
        statement_timeout: float = STATEMENT_TIMEOUT,
        lock_timeout: float | None = None,
        synchronous_commit: bool = True,
        application_name: str = "zilean-worker",
    ) -> None:
        """`lock_timeout` (seconds) bounds how long a statement waits for a row lock;
        `synchronous_commit` off lets commits return before the disk has them (see
        `db/direct.py`)."""
        self._database_url = database_url
        self._lock_timeout = lock_timeout
        self._synchronous_commit = synchronous_commit
        self._slots = asyncio.Semaphore(max_size)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._statement_timeout = statement_timeout
        self._application_name = application_name
        self.statements_sent = 0  # for tests: the hot path's own round-trips
        # Pools whose idle connections go too when one of this pool's turns out dead: a
        # restart or a frozen server takes them all, and each would otherwise cost an
        # attempt another statement deadline to find out. `join` makes a family.
        self.family: list[HotConnections] = [self]

    async def fetch_first(self, sql: str, params: Params) -> dict[str, Any] | None:
        """Send `sql`; return its first row (see `fetch_all`)."""
        rows = await self.fetch_all(sql, params)
        return rows[0] if rows else None

    async def fetch_all(self, sql: str, params: Params) -> list[dict[str, Any]]:
        """Send `sql`; return its rows. Once more on a fresh connection if it died.

        `params` is a mapping for `%(name)s` placeholders, or a tuple for `$1`-style ones.
        Either way the statement goes out as written, with `$n` placeholders: psycopg
        parses a long statement's `%(name)s` placeholders again on every execution (it
        caches only short ones), a third of a millisecond each for the attempt's
        statements, so `numbered` rewrites each statement once.

        Raise `psycopg.OperationalError` when the database cannot be reached.
        """
        if isinstance(params, tuple):
            text, args = sql, params
        else:
            text, names = numbered(sql)
            args = tuple(params[name] for name in names)
        async with self._slots:
            for last_try in (False, True):
                conn = self._idle.pop() if self._idle else await self._connect()
                try:
                    with deadline(conn, self._statement_timeout) as guard:
                        cursor = psycopg.AsyncRawCursor(conn, row_factory=dict_row)
                        self.statements_sent += 1
                        await cursor.execute(text, args)
                        rows = await cursor.fetchall()
                except psycopg.OperationalError as exc:
                    if not (conn.broken or conn.closed):
                        self._idle.append(conn)  # the statement failed, not the connection
                        raise
                    await _discard(conn)
                    for pool in self.family:  # they likely died with it (a restart)
                        await pool.drop_idle()
                    if last_try:
                        raise
                    log.info(
                        "database connection was dead; retrying once",
                        action="attempt.reconnect",
                        error="statement timed out" if guard.expired else type(exc).__name__,
                    )
                    continue
                except BaseException:
                    if conn.broken or conn.closed:
                        await _discard(conn)
                    else:
                        self._idle.append(conn)
                    raise
                self._idle.append(conn)
                return rows
        raise AssertionError("unreachable")

    async def drop_idle(self) -> None:
        """Close the idle connections: the next statement opens a fresh one."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await _discard(conn)

    async def close(self) -> None:
        await self.drop_idle()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await connect(
            self._database_url,
            application_name=self._application_name,
            lock_timeout=self._lock_timeout,
            synchronous_commit=self._synchronous_commit,
        )
        set_json_loads(_json_from_bytes, conn)
        return conn


def _json_from_bytes(data: str | bytes) -> Any:
    # psycopg hands JSON columns over as bytes, which `json.loads` first sniffs for UTF-16
    # and UTF-32; Postgres only ever sends UTF-8. A read has seven or so JSON columns.
    return json.loads(data if isinstance(data, str) else data.decode())


def join(*pools: HotConnections) -> None:
    """Make `pools` one family (`HotConnections.family`)."""
    family = list(pools)
    for pool in pools:
        pool.family = family


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


@functools.lru_cache(maxsize=128)
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with its `%(name)s` placeholders as `$1`, `$2`... (a name repeated keeps its
    number), and the names in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"  # `%%`, psycopg's escaped percent sign
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, sql), tuple(names)


async def _discard(conn: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        await conn.close()
