"""The consumer's database driver on psycopg, made to outlive its connections.

It implements PgQueuer's small driver protocol, so PgQueuer's own worker (the benchmarks'
raw engine) can run on it too. PgQueuer's own psycopg driver runs queries and LISTEN
on one connection it cannot replace: once Postgres restarts or kills that backend, the
worker dies, and with its pool driver it lives on deaf, falling back to a 30 s poll
(`docs/faults.md`). This driver keeps two connections of its own, one for statements
and one for LISTEN, and replaces either the moment it breaks:

- A statement whose connection breaks is sent again on a new connection. Every
  statement the consumer sends is safe to repeat: a claim whose answer was lost leaves
  jobs claimed by nobody alive, which are claimed again after the heartbeat timeout
  (and the attempt runner sees were never started); deleting finished jobs and
  stamping heartbeats are idempotent. While Postgres is unreachable, statements wait
  and reconnect every `RECONNECT_BACKOFF[-1]` seconds at most, so work resumes within a
  second of Postgres coming back. Once `stop_retrying` is called they fail instead.
- Every statement has a deadline (`db/deadline.py`): a half-open connection is severed
  after `STATEMENT_TIMEOUT` and replaced, instead of hanging the worker.
- Its commits do not wait for the disk (`synchronous_commit` off): a claim, a completion
  or a heartbeat that a Postgres crash loses is harmless. WAL is written in order, so the
  attempt's start marker, committed synchronously on the worker's other connections
  before any call is made, makes every claim before it durable too; a lost completion
  makes the job come back, already recorded, and it only finishes.
- The listener re-attaches after any loss and then wakes every subscriber once, since
  notifications sent while it was deaf are gone. When it has heard nothing for
  `PROBE_INTERVAL`, it sends itself a notification; one that does not arrive within
  `PROBE_TIMEOUT` means a half-open listener, which is severed and replaced; so does a
  probe whose own statement found its connection dead or half-open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import structlog
from pgqueuer.core.tm import TaskManager
from pgqueuer.ports.driver import NotifyCallback
from psycopg import sql
from psycopg.rows import dict_row

from zilean.db.deadline import deadline, sever
from zilean.db.direct import connect
from zilean.queue_engine.statements import QUEUE_TABLE

log = structlog.get_logger(__name__)

STATEMENT_TIMEOUT = 5.0  # seconds; PgQueuer's statements take milliseconds
RECONNECT_BACKOFF = (0.1, 0.25, 0.5, 1.0)  # seconds between attempts; the last one repeats
LISTEN_TICK = 0.5  # seconds: how often the listener checks for channels to add
PROBE_INTERVAL = 5.0  # seconds of listener silence before it probes itself
PROBE_TIMEOUT = 3.0  # seconds a probe notification may take to arrive


class DriverStopped(Exception):
    """The driver was told to stop retrying, and the database is unreachable."""


def wake_event(channel: str) -> str:
    """A table-changed event in PgQueuer's own NOTIFY format: subscribers re-check the queue."""
    return json.dumps(
        {
            "channel": channel,
            "operation": "update",
            "sent_at": datetime.now(UTC).isoformat(),
            "table": QUEUE_TABLE,
            "type": "table_changed_event",
        }
    )


class ResilientDriver:
    """Implements PgQueuer's `Driver` protocol over replaceable psycopg connections."""

    def __init__(
        self,
        conninfo: str,
        *,
        application_name: str,
        statement_timeout: float = STATEMENT_TIMEOUT,
        probe_interval: float = PROBE_INTERVAL,
        probe_timeout: float = PROBE_TIMEOUT,
    ) -> None:
        self._conninfo = conninfo
        self._application_name = application_name
        self._statement_timeout = statement_timeout
        self._probe_interval = probe_interval
        self._probe_timeout = probe_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._statement_lock = asyncio.Lock()
        self._shutdown = asyncio.Event()
        self._retrying = True
        self._abandoned = False
        self._tm = TaskManager()
        self._entered = 0
        self._callbacks: dict[str, list[NotifyCallback]] = {}
        self._listened: dict[str, asyncio.Event] = {}
        self._listen_conn: psycopg.AsyncConnection[Any] | None = None
        self._probe_channel = f"zilean.queue.probe.{uuid.uuid4().hex}"
        self._probe_heard: asyncio.Event | None = None
        self._last_heard = 0.0
        self._statement_losses = 0  # statement connections found dead or half-open
        self.reconnects = 0  # for tests and logs: connections replaced after a loss
        self.listener_attachments = 0  # LISTEN sessions so far: 1 + re-attachments
        self.statements_sent = 0  # for tests: every statement this driver sent
        self.listening = asyncio.Event()  # set once every subscribed channel is listened to

    # --- PgQueuer's Driver protocol -------------------------------------------------

    @property
    def shutdown(self) -> asyncio.Event:
        return self._shutdown

    @property
    def tm(self) -> TaskManager:
        return self._tm

    async def fetch(self, query: str, *args: object) -> list[dict[str, object]]:
        result = await self._send(query, args, rows=True)
        assert isinstance(result, list)
        return result

    async def execute(self, query: str, *args: object) -> str:
        result = await self._send(query, args, rows=False)
        assert isinstance(result, str)
        return result

    async def notify(self, channel: str, payload: str) -> None:
        await self.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def add_listener(self, channel: str, callback: NotifyCallback) -> None:
        """Subscribe `callback` to `channel`; return once the channel is listened to."""
        self._callbacks.setdefault(channel, []).append(callback)
        listened = self._listened.setdefault(channel, asyncio.Event())
        if self._entered:
            await listened.wait()

    async def remove_listener(self, channel: str, callback: NotifyCallback) -> None:
        callbacks = self._callbacks.get(channel, [])
        if callback in callbacks:
            callbacks.remove(callback)

    async def __aenter__(self) -> ResilientDriver:
        self._entered += 1
        if self._entered == 1:
            self._shutdown.clear()
            self._tm.add(asyncio.create_task(self._listen(), name="zilean-queue-listener"))
            self._tm.add(asyncio.create_task(self._probe(), name="zilean-queue-probe"))
        return self

    async def __aexit__(self, *_: object) -> None:
        """Stop listening; statements still work (a consumer may still write its last ends)."""
        self._entered -= 1
        if self._entered > 0:
            return
        self._shutdown.set()
        for task in list(self._tm.tasks):
            task.cancel()
        await self._tm.gather_tasks()
        self._listened = {channel: asyncio.Event() for channel in self._callbacks}

    # --- Ours --------------------------------------------------------------------------

    def stop_retrying(self) -> None:
        """From now on a statement that cannot reach the database fails instead of waiting."""
        self._retrying = False

    def abandon(self) -> None:
        """Refuse every further statement: what has not been written stays unwritten."""
        self._abandoned = True
        self._retrying = False

    async def close(self) -> None:
        """Close the statement connection (after `__aexit__` and the consumer's last turn)."""
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await self._conn.close()
            self._conn = None

    async def _send(self, query: str, args: tuple[object, ...], *, rows: bool) -> list[Any] | str:
        async with self._statement_lock:
            while True:
                if self._abandoned:
                    raise DriverStopped("the driver was abandoned")
                conn = await self._statement_connection()
                try:
                    with deadline(conn, self._statement_timeout) as guard:
                        cursor = psycopg.AsyncRawCursor(conn, row_factory=dict_row)
                        self.statements_sent += 1
                        await cursor.execute(query, args or None)
                        if rows:
                            return await cursor.fetchall()
                        return cursor.statusmessage or ""
                except psycopg.OperationalError as exc:
                    if not (conn.broken or conn.closed):
                        raise  # the statement failed, not the connection
                    why = "statement timed out" if guard.expired else _first_line(exc)
                    log.warning(
                        "queue engine connection lost; sending the statement again",
                        action="queue.connection_lost",
                        role="statements",
                        error=why,
                    )
                    self._statement_losses += 1
                    self._conn = None

    async def _statement_connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = await self._connect("statements")
        return self._conn

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        """Connect, retrying with backoff until it works or retrying has been stopped."""
        failures = 0
        while True:
            try:
                conn = await connect(
                    self._conninfo,
                    application_name=self._application_name,
                    synchronous_commit=False,
                )
            except psycopg.OperationalError as exc:
                if not self._retrying:
                    raise DriverStopped(_first_line(exc)) from exc
                if failures == 0:
                    log.warning(
                        "queue engine cannot reach the database; retrying",
                        action="queue.connect_failed",
                        role=role,
                        error=_first_line(exc),
                    )
                delay = RECONNECT_BACKOFF[min(failures, len(RECONNECT_BACKOFF) - 1)]
                failures += 1
                await asyncio.sleep(delay)
                continue
            if failures:
                self.reconnects += 1
                log.info("queue engine reconnected", action="queue.reconnected", role=role)
            return conn

    async def _listen(self) -> None:
        """Hold a listening connection for as long as the driver is entered."""
        attached_before = False
        while not self._shutdown.is_set():
            try:
                conn = await self._connect("listener")
            except DriverStopped:
                return
            self._listen_conn = conn
            listened: set[str] = set()
            try:
                for channel in [self._probe_channel, *self._callbacks]:
                    await self._listen_to(conn, channel, listened)
                self.listener_attachments += 1
                if attached_before:
                    self.reconnects += 1
                    self._wake_all()
                attached_before = True
                while not self._shutdown.is_set():
                    for channel in list(self._callbacks):
                        await self._listen_to(conn, channel, listened)
                    async for note in conn.notifies(timeout=LISTEN_TICK):
                        self._last_heard = asyncio.get_running_loop().time()
                        self._dispatch(note.channel, note.payload)
            except psycopg.OperationalError as exc:
                log.warning(
                    "queue engine listener lost; re-attaching",
                    action="queue.connection_lost",
                    role="listener",
                    error=_first_line(exc),
                )
            finally:
                self._listen_conn = None
                for event in self._listened.values():
                    event.clear()
                with contextlib.suppress(psycopg.Error, OSError):
                    await conn.close()

    async def _listen_to(
        self, conn: psycopg.AsyncConnection[Any], channel: str, listened: set[str]
    ) -> None:
        if channel in listened:
            return
        with deadline(conn, self._statement_timeout):
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        listened.add(channel)
        if channel in self._listened:
            self._listened[channel].set()
            if not self.listening.is_set():
                log.info("queue engine listening", action="queue.listening", channel=channel)
                self.listening.set()

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == self._probe_channel:
            if self._probe_heard is not None:
                self._probe_heard.set()
            return
        for callback in list(self._callbacks.get(channel, [])):
            _call(callback, payload, channel)

    def _wake_all(self) -> None:
        for channel, callbacks in self._callbacks.items():
            for callback in list(callbacks):
                _call(callback, wake_event(channel), channel)

    async def _probe(self) -> None:
        """Send the listener a notification when it has been silent; sever it if none comes."""
        loop = asyncio.get_running_loop()
        while not self._shutdown.is_set():
            await asyncio.sleep(self._probe_interval / 2)
            conn = self._listen_conn
            if conn is None or loop.time() - self._last_heard < self._probe_interval:
                continue
            heard = self._probe_heard = asyncio.Event()
            losses = self._statement_losses
            try:
                await self.notify(self._probe_channel, "probe")
                if self._statement_losses != losses and conn is self._listen_conn:
                    # The probe's own connection was dead or half-open: whatever did that
                    # (a restart, a frozen server) most likely took the listener too, and
                    # an idle consumer hears nothing until it is replaced.
                    log.warning(
                        "queue engine statement connection was lost; replacing the listener",
                        action="queue.listener_suspect",
                    )
                    sever(conn)
                    continue
                async with asyncio.timeout(self._probe_timeout):
                    await heard.wait()
            except TimeoutError:
                if conn is self._listen_conn:
                    log.warning(
                        "queue engine listener did not hear its probe; replacing it",
                        action="queue.listener_silent",
                    )
                    sever(conn)
            except (psycopg.Error, DriverStopped):
                continue  # the statement side is down; its own retries report it
            finally:
                self._probe_heard = None


def _call(callback: Callable[[str], None], payload: str, channel: str) -> None:
    try:
        callback(payload)
    except Exception:  # a subscriber's bug must not end the listener
        log.exception("queue notification handler failed", channel=channel)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
