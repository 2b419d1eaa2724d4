"""The supervised queue engine: Procrastinate's worker, restarted until we ask it to stop.

Procrastinate 3.10 does not recover from Postgres faults on its own (see
docs/faults.md): its worker may exit, even with no error, or keep running with a dead
listener or heartbeat task. `supervise` runs it in a loop, each run on a fresh
connection pool, and restarts it after `RESTART_BACKOFF` on any end we did not ask for.
A side-task watchdog stops a run whose listener or heartbeat task has died, and a
no-progress watchdog hard-exits the process (for `zilean up` or systemd to restart)
when due work waits, slots are free and nothing has started or finished for
`NO_PROGRESS_AFTER` while Postgres answers: that is a half-open connection, which no
cancellation gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import procrastinate
import structlog
from procrastinate.job_context import JobContext
from procrastinate.worker import Worker
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.execution.queues import create_queue_app

log = structlog.get_logger(__name__)

WORKER_HEARTBEAT_INTERVAL = 2.0  # seconds; the reaper's STALLED_AFTER is five beats
RESTART_BACKOFF = 1.0  # seconds between an engine run's end and the next run
SIDE_TASK_CHECK_INTERVAL = 1.0  # seconds
# Side tasks whose death leaves the worker deaf (listener) or looking dead (heartbeat).
WATCHED_SIDE_TASKS = frozenset({"listener", "update_heartbeats"})
NO_PROGRESS_AFTER = 15.0  # seconds of due work, free slots and no job started or finished
NO_PROGRESS_CHECK_INTERVAL = 2.0  # seconds
PROBE_TIMEOUT = 5.0  # seconds the watchdog's probe query may take
NO_PROGRESS_EXIT_CODE = 70  # EX_SOFTWARE: the supervisor restarts the process

_WAITING = text(
    """
    SELECT EXISTS (
        SELECT 1 FROM procrastinate_jobs job
         WHERE job.status = 'todo'
           AND job.queue_name = ANY(:queues)
           AND coalesce(
                 job.scheduled_at,
                 (SELECT min(event.at) FROM procrastinate_events event
                   WHERE event.job_id = job.id AND event.type = 'deferred')
               ) < now() - make_interval(secs => :after)
    )
    """
)


class WatchedWorker(Worker):
    """Procrastinate's worker, keeping a handle on its side tasks for the watchdog."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.side_tasks: list[asyncio.Task[Any]] = []

    def _start_side_tasks(self) -> list[asyncio.Task[Any]]:
        self.side_tasks = super()._start_side_tasks()
        return self.side_tasks

    def dead_side_task(self) -> asyncio.Task[Any] | None:
        """Return a watched side task that has ended, or None while all run."""
        for task in self.side_tasks:
            if task.get_name() in WATCHED_SIDE_TASKS and task.done():
                return task
        return None


class Progress:
    """When a job last started or finished, and how many are running (a worker middleware)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.running = 0

    def touch(self) -> None:
        self.last = time.monotonic()

    async def middleware(
        self, call_next: Callable[[], Awaitable[Any]], context: JobContext, worker: Worker
    ) -> Any:
        self.running += 1
        self.touch()
        try:
            return await call_next()
        finally:
            self.running -= 1
            self.touch()


class NoProgressWatchdog:
    """Decides whether the engine is stuck: work due, slots free, no progress, Postgres up."""

    def __init__(
        self,
        engine: AsyncEngine,
        queues: Sequence[str],
        progress: Progress,
        concurrency: int,
        *,
        after: float = NO_PROGRESS_AFTER,
    ) -> None:
        self._engine = engine
        self._queues = list(queues)
        self._progress = progress
        self._concurrency = concurrency
        self._after = after
        self._stuck_since: float | None = None

    async def run_once(self) -> bool:
        """Check once; return True when the engine has been stuck for `after` seconds.

        The condition must hold on consecutive checks for `after` seconds, so an engine
        that is just coming back after an outage gets that long to make progress.
        """
        now = time.monotonic()
        if await self._idle_with_work_waiting(now):
            if self._stuck_since is None:
                self._stuck_since = now
            return now - self._stuck_since >= self._after
        self._stuck_since = None
        return False

    async def _idle_with_work_waiting(self, now: float) -> bool:
        if self._progress.running >= self._concurrency:
            return False  # busy with long attempts, not stuck
        if now - self._progress.last < self._after:
            return False
        try:
            async with asyncio.timeout(PROBE_TIMEOUT), self._engine.connect() as conn:
                waiting = await conn.scalar(
                    _WAITING, {"queues": self._queues, "after": self._after}
                )
        except (SQLAlchemyError, OSError, TimeoutError):
            return False  # Postgres itself is unreachable: the engine restarts handle that
        return bool(waiting)

    async def run(self, stop: asyncio.Event) -> None:
        """Check every `NO_PROGRESS_CHECK_INTERVAL`; hard-exit the process when stuck."""
        while not stop.is_set():
            if await self.run_once():
                log.error(
                    "no queue job started or finished while work was due; exiting for a restart",
                    action="worker.no_progress",
                    after_s=self._after,
                )
                sys.stdout.flush()
                sys.stderr.flush()
                # A hung database call inside Procrastinate's shielded loop ignores
                # cancellation, so only leaving the process frees it.
                os._exit(NO_PROGRESS_EXIT_CODE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=NO_PROGRESS_CHECK_INTERVAL)


async def supervise(
    *,
    database_url: str,
    max_connections: int,
    register: Callable[[procrastinate.App], None],
    make_worker: Callable[[procrastinate.App], WatchedWorker],
    stop: asyncio.Event,
    progress: Progress | None = None,
    backoff: float = RESTART_BACKOFF,
) -> int:
    """Run engine after engine until `stop` is set; return how many restarts there were."""
    restarts = 0
    while True:
        app = create_queue_app(database_url, max_connections=max_connections)
        register(app)
        if progress is not None:
            progress.touch()  # a fresh engine gets its full grace period
        try:
            async with app.open_async():
                await run_until_stopped(make_worker(app), stop)
            ended = "returned"
        except Exception as exc:
            ended = f"failed: {type(exc).__name__}: {exc}".strip()
        if stop.is_set():
            return restarts
        restarts += 1
        log.warning(
            "queue engine ended; restarting",
            action="worker.engine_restart",
            ended=ended,
            restarts=restarts,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=backoff)
        if stop.is_set():
            return restarts


async def run_until_stopped(worker: WatchedWorker, stop: asyncio.Event) -> None:
    """Run `worker` until it ends, `stop` is set, or a watched side task dies.

    On `stop` or a dead side task the worker is stopped gracefully (in-flight attempts
    finish); its own end, with or without an error, is returned or raised as is.
    """
    running = asyncio.create_task(worker.run())  # type: ignore[no-untyped-call]
    stopping = asyncio.create_task(stop.wait())
    watching = asyncio.create_task(_side_task_death(worker))
    try:
        done, _ = await asyncio.wait(
            {running, stopping, watching}, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopping.cancel()
        watching.cancel()
    if running in done:
        running.result()
        return
    if watching in done and not watching.cancelled():
        dead = watching.result()
        error = None if dead.cancelled() else dead.exception()
        log.warning(
            "queue engine side task died; restarting the engine",
            action="worker.side_task_died",
            side_task=dead.get_name(),
            error=repr(error),
        )
    worker.stop()  # type: ignore[no-untyped-call]
    await running


async def _side_task_death(worker: WatchedWorker) -> asyncio.Task[Any]:
    while True:
        await asyncio.sleep(SIDE_TASK_CHECK_INTERVAL)
        dead = worker.dead_side_task()
        if dead is not None:
            return dead
