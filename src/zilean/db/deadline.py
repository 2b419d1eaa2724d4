"""Statement deadlines that work on a half-open connection.

A connection whose server stopped answering (a frozen backend, a network that drops
packets silently) never errors: a statement on it waits forever. Cancelling the waiting
task does not help quickly either: psycopg then asks the server to cancel the query and
waits up to 5 s for it, twice. So a deadline severs the socket instead (shutdown of a
duplicate descriptor: the connection's own descriptor stays open, so nothing can reuse
its number), and the statement fails at once with a broken connection, which the
caller replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

import psycopg


def sever(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut the connection's socket in both directions; its next read fails at once."""
    if conn.closed:
        return
    with contextlib.suppress(OSError, psycopg.Error):
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


class Deadline:
    """Severs `conn` if the block it guards outlives `seconds`; `expired` says whether it did."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
        self._conn = conn
        self._seconds = seconds
        self.expired = False
        self._handle: asyncio.TimerHandle | None = None

    def _expire(self) -> None:
        self.expired = True
        sever(self._conn)

    def __enter__(self) -> Deadline:
        self._handle = asyncio.get_running_loop().call_later(self._seconds, self._expire)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._handle is not None
        self._handle.cancel()


@contextlib.contextmanager
def deadline(conn: psycopg.AsyncConnection[Any], seconds: float) -> Iterator[Deadline]:
    """Guard one statement on `conn` with a deadline of `seconds`."""
    with Deadline(conn, seconds) as guard:
        yield guard
