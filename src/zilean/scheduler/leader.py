"""Scheduler leadership: a Postgres advisory lock held on a dedicated connection.

Several cores may run against one database; only the one holding the session-level
advisory lock `LEADER_LOCK_KEY` schedules. The same connection LISTENs on the
`zilean_jobs` channel, so leadership and the change feed are lost and regained together.

Guarantees and non-guarantees:
* Postgres releases the lock the moment the leader's session ends (process exit, a
  killed backend, a closed socket), and a standby retrying every `LEADER_RETRY_INTERVAL`
  takes over within that interval.
* The leader learns that its connection died from the next read on it: at once when
  the server closes it, within `LIVENESS_INTERVAL` plus `LIVENESS_TIMEOUT` otherwise.
  Between the loss and that moment the old leader may still fire; the `job_firings`
  guard keeps such overlap from firing any cron instant twice.
* A silently dropped connection (no FIN or RST) is noticed by TCP keepalives or the
  liveness query's timeout on this side, and by the server's own keepalive settings on
  the other; until the server notices, no standby can take the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
import structlog
from psycopg.conninfo import make_conninfo

from zilean.db.urls import libpq_url

log = structlog.get_logger(__name__)

# "ZILSCH" in ASCII; distinct from the migration lock.
LEADER_LOCK_KEY = 0x5A494C534348
CHANNEL = "zilean_jobs"
LEADER_RETRY_INTERVAL = 2.0  # seconds between a standby's attempts to take the lock
LIVENESS_INTERVAL = 5.0  # seconds of silence before the leader checks its connection
LIVENESS_TIMEOUT = 5.0  # seconds a liveness query may take before the connection is dropped
CONNECT_TIMEOUT = 5  # seconds (libpq's connect_timeout)
APPLICATION_NAME = "zilean-scheduler"
_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds
    "keepalives_interval": 5,  # seconds
    "keepalives_count": 3,
}


class LeadershipLost(Exception):
    """The leader's connection failed, so the advisory lock is no longer held."""


class Leadership:
    """The dedicated connection, the lock on it, and the notifications it receives."""

    def __init__(self, database_url: str) -> None:
        self._conninfo = make_conninfo(
            libpq_url(database_url),
            connect_timeout=CONNECT_TIMEOUT,
            application_name=APPLICATION_NAME,
            **_KEEPALIVES,
        )
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._unreachable = False
        self.leading = False

    @property
    def backend_pid(self) -> int | None:
        """The Postgres backend behind the dedicated connection, if one is open."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def try_acquire(self) -> bool:
        """Take the lock if it is free; return whether this process now leads.

        Opens the dedicated connection first when there is none (or it broke). On
        success the connection is already listening on `CHANNEL`. A failure to
        connect is logged and reported as not leading.
        """
        if self.leading:
            return True
        try:
            conn = await self._connection()
            acquired = await conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,))
            row = await acquired.fetchone()
            self._unreachable = False
            if not (row and row[0]):
                return False  # another core leads
            await conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            # Logged once per outage, not on every retry.
            if not self._unreachable:
                log.warning(
                    "cannot reach the database to contend for scheduler leadership",
                    action="scheduler.leader_connect_failed",
                    error=str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc),
                )
            self._unreachable = True
            await self.close()
            return False
        self.leading = True
        log.info("scheduler leadership acquired", action="scheduler.leader_acquired")
        return True

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        await self.close()
        self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        return self._conn

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Pass each notification's payload to `on_notify` until the connection fails.

        Raises LeadershipLost when it does. Between notifications the connection is
        checked with a trivial query every `LIVENESS_INTERVAL`: a live session still
        holds its advisory lock.
        """
        conn = self._conn
        if conn is None or not self.leading:
            raise LeadershipLost()
        try:
            while True:
                async for notification in conn.notifies(timeout=LIVENESS_INTERVAL):
                    on_notify(notification.payload)
                await asyncio.wait_for(conn.execute("SELECT 1"), timeout=LIVENESS_TIMEOUT)
        except (psycopg.Error, TimeoutError) as exc:
            raise LeadershipLost() from exc

    async def release(self) -> None:
        """Give up leadership by closing the connection (the lock goes with the session)."""
        if self.leading:
            log.info("scheduler leadership released", action="scheduler.leader_released")
        await self.close()

    async def close(self) -> None:
        self.leading = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
