"""Group commit for the attempt's statements: what arrives while one is in flight goes
together in the next.

Under load a worker runs many attempts at once, and each would send its own read and its
own recording: two round-trips, two transactions and two commits per attempt, which
cost the worker and Postgres more than the attempt's own work (docs/performance.md). A
`StatementBatcher` sends an item at once when nothing is in flight, so an idle worker
waits for nobody; while `max_in_flight` statements are running, new items queue, and
the next statement carries all of them (up to `max_batch`). Batches form only when
there is load to form them.

A batch that fails for a reason other than the connection (one bad value, say) is sent
again item by item, so one item's error is that item's alone; a connection failure is
every item's, as it would have been had each been sent alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import psycopg
import structlog

log = structlog.get_logger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")

Sender = Callable[[Sequence[Item]], Awaitable[Sequence[Result]]]


class StatementBatcher(Generic[Item, Result]):
    """Sends submitted items in batches through `send` (one statement per batch)."""

    def __init__(self, send: Sender[Item, Result], *, max_batch: int, max_in_flight: int) -> None:
        self._send = send
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches_sent = 0  # for tests and benchmarks: statements sent
        self.items_sent = 0

    async def submit(self, item: Item) -> Result:
        """Send `item` with whatever else is waiting; return its own result."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._schedule()
        return await future

    def _schedule(self) -> None:
        # On the next turn of the loop, so that the items of tasks started together (a
        # dequeued batch) join one statement.
        if self._scheduled or not self._pending or self._in_flight >= self._max_in_flight:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._scheduled = False
        while self._pending and self._in_flight < self._max_in_flight:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            self._in_flight += 1
            task = asyncio.create_task(self._flush(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            await self._deliver(batch)
        finally:
            self._in_flight -= 1
            self._schedule()

    async def _deliver(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self.batches_sent += 1
        self.items_sent += len(batch)
        try:
            results = await self._send([item for item, _ in batch])
        except psycopg.OperationalError as exc:
            _fail(batch, exc)  # the database is unreachable: for every item alike
        except psycopg.Error as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            log.warning(
                "a batched statement failed; sending its items one by one",
                action="batch.fallback",
                items=len(batch),
                error=type(exc).__name__,
            )
            for one in batch:  # one item's bad value must not fail the others
                await self._deliver([one])
        except BaseException as exc:
            _fail(batch, exc)
            raise
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)


def _fail(batch: Sequence[tuple[object, asyncio.Future[Result]]], exc: BaseException) -> None:
    for _, future in batch:
        if future.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)
