"""One queue's consumer: PgQueuer's worker, supervised, waking exactly when work is due.

`QueueConsumer.run` drives a PgQueuer `QueueManager` for one queue (one entrypoint)
and hands each queue job to an engine-neutral handler as a `Delivery`. Around it:

- **Timing.** PgQueuer 1.6 waits at least 100 ms before a job it knows is due sooner,
  and never wakes for a crashed worker's job until its 30 s poll. `_DueTimeManager`
  asks one question instead (`statements.NEXT_DUE`) and sleeps exactly until the next
  job falls due or the oldest claim goes stale; notifications (inserts, re-queues and
  completions on this queue only) wake it before that.
- **Connections.** `ResilientDriver` replaces any connection that breaks, re-attaches
  LISTEN, and severs half-open ones; PgQueuer itself never sees a connection fault.
- **Supervision.** A `QueueManager` that ends anyway (a bug, an unexpected error) is
  replaced after `RESTART_BACKOFF`; only `stop` ends the consumer.
- **Stopping.** On `stop` no new job is taken and running ones get `soft_stop` seconds.
  Those still running then are handed to `on_overrun` (the attempt runner records them
  as interrupted), and the driver is cut off before PgQueuer can mark them finished:
  their rows stay claimed, so whichever worker re-picks them after the heartbeat
  timeout finds the record, or records them as lost. Nothing is deleted unrecorded.

Delivery is at least once: PgQueuer re-picks a job whose heartbeat is older than
`HEARTBEAT_TIMEOUT`, whatever happened to the worker that held it. The handler must
recognise a job it has seen (the attempt runner does, by its start marker).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

import structlog
from pgqueuer.adapters.persistence.qb import (
    DBSettings,
    QueryBuilderEnvironment,
    QueryQueueBuilder,
    QuerySchedulerBuilder,
)
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.core.qm import QueueManager
from pgqueuer.domain import models
from pgqueuer.domain.errors import RetryRequested
from pgqueuer.domain.types import Channel

from zilean.queue_engine.driver import ResilientDriver
from zilean.queue_engine.statements import (
    LOG_TABLE,
    NEXT_DUE,
    QUEUE_TABLE,
    STATISTICS_TABLE,
    channel_for,
)

log = structlog.get_logger(__name__)

HEARTBEAT_TIMEOUT = 10.0  # seconds without a heartbeat before a claimed job is re-picked
IDLE_RECHECK = 30.0  # seconds: the backstop wake-up of an idle consumer
RESTART_BACKOFF = 1.0  # seconds before a QueueManager that ended is replaced


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One queue job handed to a handler."""

    queue_job_id: int
    queue: str
    due_at: datetime  # when it was due (the engine's `execute_after`)
    payload: bytes
    retries: int  # how many times a handler already answered `RetryLater` for it


class RetryLater(Exception):
    """Raised by a handler: deliver this queue job again after `delay` seconds."""

    def __init__(self, delay: float, reason: str) -> None:
        super().__init__(reason)
        self.delay = delay


Handler = Callable[[Delivery], Awaitable[None]]
OverrunHandler = Callable[[list[Delivery]], Awaitable[None]]


def engine_settings(channel: str) -> DBSettings:
    """PgQueuer's object names, all given: nothing is read from `PGQUEUER_*` variables."""
    return DBSettings(
        prefix="",
        channel=Channel(channel),
        function="fn_pgqueuer_changed",
        statistics_table=STATISTICS_TABLE,
        queue_status_type="pgqueuer_status",
        queue_table=QUEUE_TABLE,
        queue_table_log=LOG_TABLE,
        trigger="tg_pgqueuer_changed",
        schedules_table="pgqueuer_schedules",
    )


@dataclasses.dataclass
class _DueTimeManager(QueueManager):
    """PgQueuer's worker, sleeping exactly until the next due job or stale claim."""

    capacity: int = 0
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT

    async def _effective_dequeue_timeout(self, dequeue_timeout: timedelta) -> timedelta:
        [row] = await self.queries.driver.fetch(
            NEXT_DUE, list(self.entrypoint_registry), self.queue_manager_id, self.heartbeat_timeout
        )
        waits = [float(str(row[key])) for key in ("due_in", "stale_in") if row[key] is not None]
        if not waits:
            return dequeue_timeout
        wait = min(waits)
        if wait > 0:
            return min(timedelta(seconds=wait), dequeue_timeout)
        if int(str(row["held"])) < self.capacity:
            return timedelta(0)  # due while we have room: dequeue again at once
        # Full: a completion on this queue notifies us; the floor only bounds a lost one.
        return self.min_dequeue_poll_interval


def batch_and_capacity(concurrency: int) -> tuple[int, int]:
    """PgQueuer's batch size and claim cap for `concurrency` jobs at a time.

    It refuses a cap below twice the batch, so a concurrency of 1 claims up to two jobs
    (the second waits for the first: `QueueConsumer` runs at most `concurrency`).
    """
    batch = max(1, concurrency // 2)
    return batch, max(concurrency, 2 * batch)


class QueueConsumer:
    """Consumes one queue with PgQueuer until `stop`; see the module docstring."""

    def __init__(
        self,
        conninfo: str,
        queue: str,
        handler: Handler,
        *,
        concurrency: int,
        application_name: str,
        soft_stop: float,
        on_overrun: OverrunHandler | None = None,
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        driver_options: Mapping[str, float] | None = None,
    ) -> None:
        """`driver_options` are `ResilientDriver`'s timing knobs, for tests."""
        self._conninfo = conninfo
        self._queue = queue
        self._handler = handler
        self._concurrency = concurrency
        self._application_name = application_name
        self._on_overrun = on_overrun
        self._soft_stop = soft_stop
        self._heartbeat_timeout = heartbeat_timeout
        self._driver_options = dict(driver_options or {})
        self._slots = asyncio.Semaphore(concurrency)
        self._running: dict[int, Delivery] = {}
        self.started = asyncio.Event()  # set once the first QueueManager listens
        self.restarts = 0
        self.driver: ResilientDriver | None = None

    @property
    def running(self) -> list[Delivery]:
        """The deliveries whose handler is running now."""
        return list(self._running.values())

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then drain (see the module docstring)."""
        while not stop.is_set():
            driver = self.driver = ResilientDriver(
                self._conninfo, application_name=self._application_name, **self._driver_options
            )
            manager = self._manager(driver)
            running = asyncio.create_task(self._run_manager(manager, driver), name="zilean-queue")
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if running.done():
                ended = _ending(running)
                await driver.close()
                if stop.is_set():
                    return
                self.restarts += 1
                log.error(
                    "queue consumer ended; starting a new one",
                    action="queue.consumer_restart",
                    queue=self._queue,
                    ended=ended,
                    restarts=self.restarts,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=RESTART_BACKOFF)
                continue
            await self._drain(manager, driver, running)
            return

    def _manager(self, driver: ResilientDriver) -> _DueTimeManager:
        settings = engine_settings(channel_for(self._queue))
        queries = Queries(
            driver,
            qbe=QueryBuilderEnvironment(settings),
            qbq=QueryQueueBuilder(settings),
            qbs=QuerySchedulerBuilder(settings),
        )
        _, capacity = batch_and_capacity(self._concurrency)
        manager = _DueTimeManager(
            queries,
            channel=Channel(channel_for(self._queue)),
            capacity=capacity,
            heartbeat_timeout=self._heartbeat_timeout,
        )
        manager.entrypoint(self._queue, accepts_context=False, on_failure="hold")(self._deliver)
        return manager

    async def _run_manager(self, manager: _DueTimeManager, driver: ResilientDriver) -> None:
        batch, capacity = batch_and_capacity(self._concurrency)
        announce = asyncio.create_task(self._announce(driver))
        try:
            await manager.run(
                dequeue_timeout=timedelta(seconds=IDLE_RECHECK),
                batch_size=batch,
                max_concurrent_tasks=capacity,
                heartbeat_timeout=timedelta(seconds=self._heartbeat_timeout),
                # Nothing reads pgqueuer_statistics; folding the log into it would rewrite
                # every log row once more.
                log_aggregation_interval=timedelta(0),
            )
        finally:
            announce.cancel()

    async def _announce(self, driver: ResilientDriver) -> None:
        await driver.listening.wait()
        self.started.set()

    async def _deliver(self, job: models.Job) -> None:
        delivery = Delivery(
            queue_job_id=int(job.id),
            queue=str(job.entrypoint),
            due_at=job.execute_after,
            payload=job.payload or b"",
            retries=job.attempts,
        )
        async with self._slots:
            self._running[delivery.queue_job_id] = delivery
            try:
                await self._handler(delivery)
            except RetryLater as retry:
                raise RetryRequested(timedelta(seconds=retry.delay), str(retry)) from None
            finally:
                self._running.pop(delivery.queue_job_id, None)

    async def _drain(
        self, manager: _DueTimeManager, driver: ResilientDriver, running: asyncio.Task[None]
    ) -> None:
        manager.shutdown.set()
        driver.stop_retrying()  # a dequeue blocked on an unreachable database gives up
        done, _ = await asyncio.wait({running}, timeout=self._soft_stop)
        if not done:
            overrun = self.running
            log.warning(
                "jobs still running after the soft stop; interrupting them",
                action="queue.soft_stop_expired",
                queue=self._queue,
                running=len(overrun),
                soft_stop_s=self._soft_stop,
            )
            if self._on_overrun is not None and overrun:
                await self._on_overrun(overrun)
            # From here no statement reaches the database, so PgQueuer cannot mark the
            # interrupted jobs finished; they are re-picked after the heartbeat timeout.
            driver.abandon()
            await driver.close()
            running.cancel()
            await asyncio.wait({running})
        else:
            _ending(running)
        await driver.close()


def _ending(task: asyncio.Task[None]) -> str:
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    return "returned" if error is None else f"failed: {type(error).__name__}: {error}"
