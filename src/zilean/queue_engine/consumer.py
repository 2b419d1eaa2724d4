"""One queue's consumer: claims due queue jobs in batches, runs their handlers, settles them.

`QueueConsumer.run` works PgQueuer's tables with statements of its own (`statements.py`)
and hands each queue job to an engine-neutral handler as a `Delivery`. PgQueuer's
`QueueManager` is not used: per batch it sends a dequeue, a due-time probe, completion
and heartbeat writes of its own, and builds a pydantic model and a few tasks per job,
which cost the worker more than the attempt's own statements (docs/performance.md).
Here each turn is one statement (`statements.CLAIM`):

- **Claiming and settling together.** A turn writes the ends of the handlers that
  finished since the last one (finished jobs deleted, failed ones held, each logged)
  and claims as many due jobs as there are free slots, a crashed worker's stale claims
  included. A handler that ends frees a slot and starts the next turn, so under load
  completions ride on claims; a turn for only a few free slots waits up to 5 ms for more
  handlers to end (`_gather`), so a steady stream still claims and settles in batches.
- **Timing.** A turn that claims fewer jobs than it asked for also says when the next job
  falls due and when the oldest other claim goes stale; the consumer sleeps exactly that
  long. Notifications wake it before that: the triggers (revisions 0009, 0014 and 0015)
  send them on this queue's channel only for jobs inserted or re-queued as waiting, the
  changes that can make a job due; never for claims, heartbeats, deletions or a job
  inserted already claimed.
- **Heartbeats.** One statement every `heartbeat_timeout / 3` refreshes every running
  claim, so no other worker re-picks a job that still runs however long it takes.
- **Adoption.** A handler may insert a queue job already claimed with `claimant` (a loop
  iteration due at once, inserted by its predecessor's recording) and hand it over with
  `adopt`: it runs in the adopting handler's slot, and from then on is a claim like any
  other. The adopting statement settles the adopter's own queue job, so its end is
  neither written nor woken for.
- **Connections.** `ResilientDriver` replaces any connection that breaks, re-attaches
  LISTEN, and severs half-open ones; a turn never sees a connection fault.
- **Supervision.** A turn that fails anyway (a bug, a schema that is not there) ends the
  loop, which is replaced after `RESTART_BACKOFF`; running handlers keep running, and
  their ends are written by the next loop. Only `stop` ends the consumer.
- **Stopping.** On `stop` no new job is claimed and running ones get `soft_stop`
  seconds; the ends of those that finish are written. Those still running then are
  handed to `on_overrun` (the attempt runner records them as interrupted), and the
  driver is cut off before their ends could be written: their rows stay claimed, so
  whichever worker re-picks them after the heartbeat timeout finds the record, or
  records them as lost. Nothing is deleted unrecorded.

Delivery is at least once: a job whose claim is older than `heartbeat_timeout` without a
heartbeat is claimed again, whatever happened to the worker that held it. The handler
must recognise a job it has seen (the attempt runner does, by its start marker).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import traceback
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

import structlog

from zilean.queue_engine.driver import ResilientDriver
from zilean.queue_engine.statements import (
    CLAIM,
    ENDED_FAILED,
    ENDED_FINISHED,
    HEARTBEAT,
    RETRY,
    channel_for,
)

log = structlog.get_logger(__name__)

HEARTBEAT_TIMEOUT = 10.0  # seconds without a heartbeat before a claimed job is re-picked
IDLE_RECHECK = 30.0  # seconds: the backstop wake-up of an idle consumer
RESTART_BACKOFF = 1.0  # seconds before a consumer loop that failed is replaced
# Seconds past a due time to wake at: the wait counts from when the statement was sent,
# a little before its `now()`, and a turn that came a moment early would find nothing due.
DUE_MARGIN = 0.0005
GATHER = 0.005  # seconds a turn for a few free slots waits for more (`_gather`)


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


@dataclasses.dataclass(frozen=True)
class _Ended:
    """A handler's end, waiting for the next turn to write it."""

    queue_job_id: int
    status: str
    traceback: str | None = None  # JSON, in PgQueuer's traceback record shape


class QueueConsumer:
    """Consumes one queue until `stop`; see the module docstring."""

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
        self._channel = channel_for(queue)
        self._handler = handler
        self._concurrency = concurrency
        self._application_name = application_name
        self._on_overrun = on_overrun
        self._soft_stop = soft_stop
        self._heartbeat_timeout = heartbeat_timeout
        self._driver_options = dict(driver_options or {})
        self._worker_id = uuid.uuid4()  # the claims' `queue_manager_id`, across restarts
        self._gather_slots = max(1, concurrency // 4)  # see `_gather`
        self._running: dict[int, Delivery] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._ended: list[_Ended] = []
        self._handed_over: set[int] = set()  # handlers whose slot went to an adopted job
        self._wake = asyncio.Event()
        self._stopping = False
        self.started = asyncio.Event()  # set once the first loop listens
        self.restarts = 0
        self.driver: ResilientDriver | None = None

    @property
    def running(self) -> list[Delivery]:
        """The deliveries whose handler is running now."""
        return list(self._running.values())

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def claimant(self) -> uuid.UUID | None:
        """The id this worker's claims carry, for a handler that claims a queue job itself
        (`adopt`); None once stopping, when nothing new may start."""
        return None if self._stopping else self._worker_id

    def adopt(self, delivery: Delivery, *, replacing: int) -> None:
        """Run `delivery`, a queue job a handler inserted already claimed by `claimant`.

        It is then one of this worker's claims like any other: heart-beaten, settled by a
        turn when its handler ends, drained on stop. It takes the slot of the handler of
        queue job `replacing`, which is about to end and whose queue job the adopting
        statement settled itself: that end is neither written nor woken for.
        """
        self._handed_over.add(replacing)
        self._run_handler(delivery)

    def _run_handler(self, delivery: Delivery) -> None:
        self._running[delivery.queue_job_id] = delivery
        self._tasks[delivery.queue_job_id] = asyncio.create_task(
            self._deliver(delivery), name=f"zilean-queue-job-{delivery.queue_job_id}"
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then drain (see the module docstring)."""
        while not stop.is_set():
            driver = self.driver = ResilientDriver(
                self._conninfo, application_name=self._application_name, **self._driver_options
            )
            consuming = asyncio.create_task(self._consume(driver), name="zilean-queue")
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({consuming, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if consuming.done():
                ended = _ending(consuming)
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
            await self._drain(driver, consuming)
            return

    # --- The loop ------------------------------------------------------------------------

    async def _consume(self, driver: ResilientDriver) -> None:
        async with driver:
            await driver.add_listener(self._channel, self._notified)
            self.started.set()
            beating = asyncio.create_task(self._heartbeat(driver), name="zilean-queue-heartbeat")
            try:
                while not (self._stopping and not self._running):
                    wake_at = await self._turn(driver)
                    await self._sleep_until(wake_at)
                    await self._gather()
                await self._turn(driver)  # the ends of the last handlers
            finally:
                beating.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beating

    async def _turn(self, driver: ResilientDriver) -> float | None:
        """Write the ends so far and claim what there is room for; return when to turn again
        (the event loop's clock; None: when a handler ends or a notification comes)."""
        free = 0 if self._stopping else max(0, self._concurrency - len(self._running))
        if free == 0 and not self._ended:
            return None
        ended, self._ended = self._ended, []
        loop = asyncio.get_running_loop()
        sent_at = loop.time()  # the waits below count from the statement's `now()`
        try:
            rows = await driver.fetch(
                CLAIM,
                [end.queue_job_id for end in ended],
                [end.status for end in ended],
                [end.traceback for end in ended],
                self._queue,
                self._worker_id,
                free,
                self._heartbeat_timeout,
            )
        except BaseException:
            self._ended[:0] = ended  # not written: the next turn (or loop) writes them
            raise
        claimed = sorted(
            (row for row in rows if row["id"] is not None),
            key=lambda row: (-int(str(row["priority"])), int(str(row["id"]))),
        )
        for row in claimed:
            self._start(row)
        if free == 0 or len(claimed) == free:
            return None if len(self._running) >= self._concurrency else sent_at
        [summary] = [row for row in rows if row["id"] is None]
        waits = [
            float(str(summary[key])) for key in ("due_in", "stale_in") if summary[key] is not None
        ]
        wait = min([*waits, IDLE_RECHECK])
        return sent_at + wait + DUE_MARGIN if wait > 0 else sent_at

    async def _sleep_until(self, wake_at: float | None) -> None:
        timeout = None if wake_at is None else wake_at - asyncio.get_running_loop().time()
        if timeout is not None and timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=timeout)
        self._wake.clear()

    async def _gather(self) -> None:
        """Before a turn for only a few free slots, wait a moment for more handlers to end.

        Under a steady stream handlers end one by one, and a turn per end would claim one
        job each: a round-trip per attempt, and no batch for the attempt's own statements
        to share. Waiting up to `GATHER` for a quarter of the slots to free up gives every
        turn a batch; an idle worker, or one with that many free already, turns at once.
        """
        loop = asyncio.get_running_loop()
        until = loop.time() + GATHER
        while (
            self._running
            and not self._stopping
            and self._concurrency - len(self._running) < self._gather_slots
            and (left := until - loop.time()) > 0
        ):
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=left)

    def _notified(self, payload: str | bytes | bytearray) -> None:
        self._wake.set()  # an insert or a re-queue: something may be due

    async def _heartbeat(self, driver: ResilientDriver) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_timeout / 3)
            if not self._running:
                continue
            try:
                await driver.execute(HEARTBEAT, list(self._running), self._worker_id)
            except Exception as exc:  # the next beat tries again; the claims last a timeout
                log.warning(
                    "queue heartbeat failed",
                    action="queue.heartbeat_failed",
                    queue=self._queue,
                    error=f"{type(exc).__name__}: {exc}",
                )

    # --- Handlers ------------------------------------------------------------------------

    def _start(self, row: Mapping[str, object]) -> None:
        due_at, payload = row["execute_after"], row["payload"]
        assert isinstance(due_at, datetime)
        assert isinstance(payload, bytes | None)
        delivery = Delivery(
            queue_job_id=int(str(row["id"])),
            queue=self._queue,
            due_at=due_at,
            payload=payload or b"",
            retries=int(str(row["attempts"])),
        )
        self._run_handler(delivery)

    async def _deliver(self, delivery: Delivery) -> None:
        end: _Ended | None = None
        handed_over = False
        try:
            await self._handler(delivery)
            handed_over = delivery.queue_job_id in self._handed_over
            if not handed_over:
                end = _Ended(delivery.queue_job_id, ENDED_FINISHED)
        except RetryLater as retry:
            await self._retry(delivery, retry)
        except asyncio.CancelledError:
            raise  # the driver was cut off (the soft stop ran out): nothing is written
        except Exception as exc:
            log.exception(
                "queue job handler failed; holding the job as failed",
                action="queue.handler_failed",
                queue=self._queue,
                queue_job_id=delivery.queue_job_id,
            )
            end = _Ended(delivery.queue_job_id, ENDED_FAILED, _traceback_record(delivery, exc))
        finally:
            self._handed_over.discard(delivery.queue_job_id)
            self._running.pop(delivery.queue_job_id, None)
            self._tasks.pop(delivery.queue_job_id, None)
            if end is not None:
                self._ended.append(end)
            if not handed_over:  # a slot is free
                self._wake.set()

    async def _retry(self, delivery: Delivery, retry: RetryLater) -> None:
        driver = self.driver
        assert driver is not None
        record = _traceback_record(delivery, retry, delay=retry.delay)
        try:
            await driver.execute(RETRY, delivery.queue_job_id, retry.delay, record, self._worker_id)
        except Exception as exc:  # not re-queued: hold it rather than lose it
            self._ended.append(
                _Ended(delivery.queue_job_id, ENDED_FAILED, _traceback_record(delivery, exc))
            )

    # --- Stopping ------------------------------------------------------------------------

    async def _drain(self, driver: ResilientDriver, consuming: asyncio.Task[None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._soft_stop
        self._stopping = True
        self._wake.set()
        driver.stop_retrying()  # a turn blocked on an unreachable database gives up
        done, _ = await asyncio.wait({consuming}, timeout=self._soft_stop)
        if done:
            _ending(consuming)
        if (
            self._tasks
        ):  # the loop ended early (the database is gone): the handlers still get their time
            await asyncio.wait(list(self._tasks.values()), timeout=max(0.0, deadline - loop.time()))
        if self._running:
            overrun = self.running
            log.warning(
                "jobs still running after the soft stop; interrupting them",
                action="queue.soft_stop_expired",
                queue=self._queue,
                running=len(overrun),
                soft_stop_s=self._soft_stop,
            )
            if self._on_overrun is not None:
                await self._on_overrun(overrun)
            # From here no statement reaches the database, so the interrupted jobs' ends
            # are never written; they are re-picked after the heartbeat timeout.
            driver.abandon()
            await driver.close()
            tasks = [consuming, *self._tasks.values()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        await driver.close()


def _traceback_record(delivery: Delivery, exc: BaseException, **context: object) -> str:
    """PgQueuer's traceback record for `exc`, as JSON: what the queue inspector reads."""
    return json.dumps(
        {
            "job_id": delivery.queue_job_id,
            "timestamp": datetime.now(UTC).isoformat(),
            "exception_type": type(exc).__name__,
            "exception_message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
            "additional_context": {"queue": delivery.queue, "attempt": delivery.retries, **context},
        }
    )


def _ending(task: asyncio.Task[None]) -> str:
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    return "returned" if error is None else f"failed: {type(error).__name__}: {error}"
