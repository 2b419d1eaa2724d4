"""The scheduler's thin loop: contend for leadership, then reconcile and fire while leading.

While leading, the loop sleeps until the earliest of: the next entry falls due, the
next periodic reconcile (`RECONCILE_INTERVAL`), a notification on `zilean_jobs`, the
loss of the leader's connection, or shutdown. It never polls on a fixed short tick.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.loops import wait_for_stop
from zilean.scheduler.leader import LEADER_RETRY_INTERVAL, Leadership, LeadershipLost
from zilean.scheduler.reconciler import TARGETED_RECONCILE_LIMIT, Scheduler

log = structlog.get_logger(__name__)

RECONCILE_INTERVAL = 30.0  # seconds between full reconciles (the backstop for NOTIFY)
# After losing leadership, wait this long before contending again, so a healthy standby
# (which retries every LEADER_RETRY_INTERVAL) wins over a process whose connection just broke.
LOST_LEADER_BACKOFF = 2 * LEADER_RETRY_INTERVAL  # seconds
STEP_FAILURE_DELAY = 1.0  # seconds to wait after a reconcile that raised


class SchedulerService:
    """Run the scheduler in core until `stop` is set.

    `scheduler` is the current leadership term's Scheduler (None while standing by);
    `leading` is set while this process leads. Both exist for tests and diagnostics.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        database_url: str,
        default_zone: str,
        *,
        reconcile_interval: float = RECONCILE_INTERVAL,
        retry_interval: float = LEADER_RETRY_INTERVAL,
        lost_leader_backoff: float = LOST_LEADER_BACKOFF,
    ) -> None:
        self._engine = engine
        self._default_zone = default_zone
        self._reconcile_interval = reconcile_interval
        self._retry_interval = retry_interval
        self._lost_leader_backoff = lost_leader_backoff
        self.leadership = Leadership(database_url)
        self.scheduler: Scheduler | None = None
        self.leading = asyncio.Event()
        self._wake = asyncio.Event()
        self._notified: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Contend for leadership and lead until `stop` is set; release the lock on the way out."""
        try:
            while not stop.is_set():
                if await self.leadership.try_acquire():
                    try:
                        lost = await self._lead(stop)
                    except Exception:
                        # A bug must not end scheduling for good: step down and try again.
                        log.exception("scheduler failed", action="scheduler.failed")
                        lost = True
                    delay = self._lost_leader_backoff if lost else 0.0
                else:
                    delay = self._retry_interval
                await wait_for_stop(stop, delay)
        finally:
            await self.leadership.release()

    def _on_notify(self, payload: str) -> None:
        if len(self._notified) < TARGETED_RECONCILE_LIMIT:
            self._notified.add(payload)
        else:
            self._notified = {""}  # too many to re-read one by one: re-read everything
        self._wake.set()

    async def _lead(self, stop: asyncio.Event) -> bool:
        """Schedule for one leadership term; return True if the term ended by losing the lock."""
        scheduler = Scheduler(self._engine, self._default_zone)
        self._notified.clear()
        self._wake.clear()
        listener = asyncio.create_task(self.leadership.listen(self._on_notify))
        self.scheduler = scheduler
        self.leading.set()
        try:
            await self._steps(scheduler, stop, listener)
        finally:
            self.leading.clear()
            self.scheduler = None
            # The listener only ends on its own when the connection failed.
            lost = listener.done()
            listener.cancel()
            try:
                await listener
            except (asyncio.CancelledError, LeadershipLost):
                pass
            except Exception:
                log.exception("scheduler listener failed", action="scheduler.listener_failed")
            await self.leadership.release()
        if lost:
            log.warning(
                "scheduler leadership lost with the database connection",
                action="scheduler.leader_lost",
            )
        return lost

    async def _steps(
        self, scheduler: Scheduler, stop: asyncio.Event, listener: asyncio.Task[None]
    ) -> None:
        next_full = 0.0  # monotonic time of the next full reconcile; 0 = now
        while not stop.is_set() and not listener.done():
            try:
                if time.monotonic() >= next_full or "" in self._notified:
                    self._wake.clear()
                    self._notified.clear()
                    await scheduler.reconcile_once()
                    next_full = time.monotonic() + self._reconcile_interval
                elif self._notified:
                    self._wake.clear()
                    await self._reconcile_notified(scheduler)
            except Exception:
                log.exception("scheduler reconcile failed", action="scheduler.reconcile_failed")
                next_full = 0.0  # notifications may have been consumed: re-read everything
                await wait_for_stop(stop, STEP_FAILURE_DELAY)
                continue
            # Fire in batches, yielding between them, until nothing more is due now. Edits
            # notified meanwhile wait for the backlog; the claim refuses stale entries.
            while not stop.is_set() and not listener.done():
                if await scheduler.fire_due() == 0:
                    break
                await asyncio.sleep(0)
            timeout = next_full - time.monotonic()
            due = scheduler.next_due()
            if due is not None:
                timeout = min(timeout, due.timestamp() - time.time())
            await _wait_any(stop, self._wake, listener, max(timeout, 0.0))

    async def _reconcile_notified(self, scheduler: Scheduler) -> None:
        payloads, self._notified = self._notified, set()
        try:
            job_ids = {uuid.UUID(payload) for payload in payloads}
        except ValueError:
            job_ids = set()
        if not job_ids or len(job_ids) > TARGETED_RECONCILE_LIMIT:
            await scheduler.reconcile_once()
        else:
            await scheduler.reconcile_once(job_ids=job_ids)


async def _wait_any(
    stop: asyncio.Event, wake: asyncio.Event, listener: asyncio.Task[None], seconds: float
) -> None:
    """Sleep up to `seconds`, returning early on shutdown, a wake-up or a lost connection."""
    if seconds <= 0 or wake.is_set():
        return
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(wake.wait())]
    try:
        await asyncio.wait(
            [*waiters, listener], timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
