"""The stalled-attempt reaper: core's answer to a worker that died mid-attempt.

Procrastinate 3.10 leaves a killed worker's queue jobs in `doing` forever, and a live
worker's too when its final status write fails. The scheduler's leader runs this reaper
every `REAP_INTERVAL`: a queue job of our attempt task that is `doing` while its worker
is gone (pruned or unregistered) or silent for `STALLED_AFTER`, or that started longer
ago than its job's exec timeout plus `STALLED_AFTER` and `OVERRUN_MARGIN`, is recorded
as a failed attempt ("worker lost; outcome unknown") with the same stats and counters a
worker would write, then either retried (attempt + 1, keeping the member's lock) or
ended (lock released, one-off completed), and the queue job is marked `failed`.

Guarantees: each queue job is reaped in one transaction that first locks it and checks it
is still `doing`, so two reapers never both settle it, and Procrastinate's own finish
write (conditional on `doing` too) and the reaper's cannot both succeed. A queue job
whose attempt was already recorded (a `job_attempts` row carries its id) is only marked
finished: its continuation was queued with the record.
Non-guarantees: the call itself may have reached the target, so a retry can repeat it
(delivery is at-least-once). A worker that is alive but whose heartbeat stalled for
longer than `STALLED_AFTER` (a database hiccup) can see its attempt reaped while it still
runs; both outcomes are then recorded, and the attempt rows show it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import exists, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.db.tables import job_attempts, scheduled_jobs
from zilean.execution.enqueue import ATTEMPT_TASK, AttemptArgs, enqueue_attempts
from zilean.execution.recording import (
    AttemptRecord,
    AttemptState,
    Ending,
    one_off_completion,
    record_attempt,
)
from zilean.execution.retry import decide_retry
from zilean.loops import wait_for_stop

log = structlog.get_logger(__name__)

REAP_INTERVAL = 10.0  # seconds between reaper passes while leading
# A worker heartbeats every WORKER_HEARTBEAT_INTERVAL (services/workers.py); five missed
# beats, longer than a Postgres restart, mark it lost.
STALLED_AFTER = 10.0  # seconds
# Beyond its exec timeout, an attempt still needs to record itself; this is its allowance.
OVERRUN_MARGIN = 30.0  # seconds
REAP_BATCH = 100  # queue jobs examined per pass
LOST_ERROR = "worker lost; outcome unknown"

# Stalled: the worker is gone or silent, or the attempt has been running for longer than
# its own timeout allows (a live worker whose final status write failed leaves that).
_STALLED = text(
    """
    SELECT job.id
      FROM procrastinate_jobs job
      LEFT JOIN procrastinate_workers worker ON worker.id = job.worker_id
      LEFT JOIN scheduled_jobs registered
             ON registered.id::text = job.args ->> 'job_id'
     WHERE job.status = 'doing'
       AND job.task_name = :task_name
       AND (worker.id IS NULL
            OR worker.last_heartbeat < now() - make_interval(secs => :stalled_after)
            OR (SELECT max(event.at) FROM procrastinate_events event
                 WHERE event.job_id = job.id AND event.type = 'started')
               < now() - make_interval(
                   secs => coalesce(registered.exec_timeout_ms, 0) / 1000.0
                           + :stalled_after + :overrun_margin))
     ORDER BY job.id
     LIMIT :limit
    """
)
# Lock the queue job and re-check it under the lock: another reaper, or the worker
# finishing it after all, may have got there first.
_CLAIM = text(
    """
    SELECT job.args, job.scheduled_at, now() AS now,
           (SELECT min(event.at) FROM procrastinate_events event
             WHERE event.job_id = job.id AND event.type = 'started') AS started_at
      FROM procrastinate_jobs job
     WHERE job.id = :id AND job.status = 'doing'
       FOR UPDATE
    """
)
_FINISH = text("SELECT procrastinate_finish_job_v1(:id, :status, false)")

_RETRY_COLUMNS = (
    "job_type", "schedule_type", "one_off_after_run", "retry_enabled", "retry_mode",
    "retry_base_delay_ms", "retry_multiplier", "retry_max_delay_ms", "retry_max_attempts",
)  # fmt: skip


class StalledAttemptReaper:
    """Finds queue jobs whose worker is lost and settles them, one transaction each."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        stalled_after: float = STALLED_AFTER,
        overrun_margin: float = OVERRUN_MARGIN,
    ) -> None:
        self._engine = engine
        self._stalled_after = stalled_after
        self._overrun_margin = overrun_margin

    async def run_once(self) -> bool:
        """Reap every stalled attempt found now; return whether any queue job was settled."""
        async with self._engine.connect() as conn:
            found = await conn.execute(
                _STALLED,
                {
                    "task_name": ATTEMPT_TASK,
                    "stalled_after": self._stalled_after,
                    "overrun_margin": self._overrun_margin,
                    "limit": REAP_BATCH,
                },
            )
            queue_job_ids = [int(queue_job_id) for queue_job_id in found.scalars()]
        reaped = False
        for queue_job_id in queue_job_ids:
            async with self._engine.begin() as conn:
                reaped |= await self._reap(conn, queue_job_id)
        return reaped

    async def run(self, stop: asyncio.Event, *, interval: float = REAP_INTERVAL) -> None:
        """Reap every `interval` until `stop` is set; a failed pass is logged and retried."""
        while not stop.is_set():
            try:
                await self.run_once()
            except SQLAlchemyError as exc:
                log.warning("reaper pass failed", action="reaper.failed", error=repr(exc))
            except Exception:  # a bug must not end reaping for the rest of the term
                log.exception("reaper pass crashed", action="reaper.crashed")
            await wait_for_stop(stop, interval)

    async def _reap(self, conn: AsyncConnection, queue_job_id: int) -> bool:
        claimed = (await conn.execute(_CLAIM, {"id": queue_job_id})).mappings().first()
        if claimed is None:
            return False  # finished meanwhile: someone else got there first
        recorded = await conn.scalar(
            select(exists().where(job_attempts.c.queue_job_id == queue_job_id))
        )
        if recorded:
            # The worker recorded the attempt (and queued what follows) but died before
            # Procrastinate marked the queue job: only that mark is missing.
            await conn.execute(_FINISH, {"id": queue_job_id, "status": "succeeded"})
            log.info(
                "reaped a recorded attempt", action="reaper.finished", queue_job_id=queue_job_id
            )
            return True
        args = AttemptArgs.from_args(dict(claimed["args"]))
        retried = await self._record_lost(conn, queue_job_id, args, claimed)
        await conn.execute(_FINISH, {"id": queue_job_id, "status": "failed"})
        log.warning(
            "attempt lost with its worker",
            action="reaper.reaped",
            queue_job_id=queue_job_id,
            job_id=args.job_id,
            pool_index=args.pool_index,
            attempt=args.attempt,
            next="retry" if retried else "end",
        )
        return True

    async def _record_lost(
        self,
        conn: AsyncConnection,
        queue_job_id: int,
        args: AttemptArgs,
        claimed: Any,
    ) -> bool:
        """Record the lost attempt and queue its retry or end its run; return whether retried."""
        job_id = uuid.UUID(args.job_id)
        found = (
            (
                await conn.execute(
                    select(*(scheduled_jobs.c[name] for name in _RETRY_COLUMNS))
                    .where(scheduled_jobs.c.id == job_id)
                    .with_for_update()
                )
            )
            .mappings()
            .first()
        )
        if found is None:
            return False  # the job was deleted: its lock and history went with it
        row = dict(found)
        now: datetime = claimed["now"]
        decision = decide_retry(
            settings=row,
            attempt=args.attempt,
            max_attempts=args.max_attempts,
            permanent=False,
            status_code=None,
            retry_after=None,
            now=now,
        )
        record = AttemptRecord(
            args=args,
            queue_job_id=queue_job_id,
            state=AttemptState.FAILED,
            scheduled_at=claimed["scheduled_at"],
            attempted_at=claimed["started_at"] or now,
            duration_ms=None,
            error=LOST_ERROR,
            last_call=None,
        )
        ending = Ending(
            release=not decision.retry,
            one_off=None if decision.retry else one_off_completion(row, args.trigger),
        )
        recorded_at = await record_attempt(conn, record, ending)
        if not decision.retry or recorded_at is None:
            return False
        await enqueue_attempts(
            conn,
            job_id=job_id,
            job_type=str(row["job_type"]),
            members=[replace(args, attempt=args.attempt + 1)],
            scheduled_at=recorded_at.astimezone(UTC) + timedelta(milliseconds=decision.delay_ms),
        )
        return True
