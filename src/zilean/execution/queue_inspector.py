"""The queue inspector: queue jobs as the engine holds them, and what an operator may do.

Reads go through `queue_engine.statements`; the actions keep the engine's guarantees
(docs/queue.md):

- **retry** never re-delivers an old queue job. It fires the registry job again for the
  same pool member through the firing path (`firing.plan_firing`, `apply_firings`): the
  member's overlap lock is taken as any firing takes it, the attempt budget is the
  job's current one, and the run keeps its trigger (and a webhook run its payload).
- **cancel** removes a queue job only while it waits. A claimed one is left to its
  worker: pulling it from under the worker would make the at-least-once redelivery
  record it as lost. The member's lock goes with it, and the call history gets a
  `cancelled` attempt so the run's end is visible.
- **delete** removes only the engine's record of an ended queue job (a held failure, the
  log); the call history is the job's and stays.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.db.engine import driver_connection
from zilean.db.tables import job_attempts, scheduled_jobs
from zilean.errors import Conflict, NotFound
from zilean.execution.firing import FiringPlan, apply_firings, plan_firing
from zilean.execution.payload import AttemptArgs, Trigger
from zilean.execution.recording import AttemptState
from zilean.queue_engine import statements
from zilean.queue_engine.statements import InspectedQueueJob, QueueJobState

CANCELLED_ERROR = "cancelled in the queue inspector before it ran"
STILL_RUNNING = (
    "the queue job is claimed by a worker: a running attempt cannot be cancelled; "
    "it ends by itself, at the latest at the job's exec_timeout_ms"
)
# The payload keys the inspector shows; `webhook_payload` only to callers who may read jobs.
SHOWN_PAYLOAD_KEYS = ("job_id", "pool_index", "loop_iteration", "attempt", "max_attempts",
                      "trigger", "webhook_hops", "webhook_metadata")  # fmt: skip


@dataclass(frozen=True)
class Inspected:
    """A queue job with what the registry knows of it: its job and its attempt, if any."""

    queue_job: InspectedQueueJob
    args: AttemptArgs | None
    attempt: dict[str, Any] | None
    job_name: str | None

    @property
    def job_id(self) -> str | None:
        if self.args is not None:
            return self.args.job_id
        return None if self.attempt is None else str(self.attempt["job_id"])


def _args(payload: bytes | None) -> AttemptArgs | None:
    if payload is None:
        return None
    try:
        return AttemptArgs.from_payload(payload)
    except (ValueError, TypeError):
        return None  # not ours, or damaged: shown as having no readable payload


async def _attempts(conn: AsyncConnection, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    rows = await conn.execute(
        select(job_attempts).where(job_attempts.c.queue_job_id.in_(list(ids)))
    )
    return {int(row["queue_job_id"]): dict(row) for row in rows.mappings()}


async def _names(conn: AsyncConnection, job_ids: set[str]) -> dict[str, str]:
    valid = [uuid.UUID(job_id) for job_id in job_ids if _is_uuid(job_id)]
    if not valid:
        return {}
    rows = await conn.execute(
        select(scheduled_jobs.c.id, scheduled_jobs.c.name).where(scheduled_jobs.c.id.in_(valid))
    )
    return {str(job_id): str(name) for job_id, name in rows}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def _enrich(conn: AsyncConnection, found: list[InspectedQueueJob]) -> list[Inspected]:
    attempts = await _attempts(conn, [job.id for job in found])
    partial = [(job, _args(job.payload), attempts.get(job.id)) for job in found]
    job_ids = {a.job_id for _, a, _ in partial if a} | {str(t["job_id"]) for *_, t in partial if t}
    names = await _names(conn, job_ids)
    result = []
    for job, args, attempt in partial:
        item = Inspected(job, args, attempt, None)
        result.append(Inspected(job, args, attempt, names.get(item.job_id or "")))
    return result


async def list_queue_jobs(
    conn: AsyncConnection,
    *,
    queue: str | None,
    state: QueueJobState | None,
    before: int | None,
    limit: int,
) -> tuple[list[Inspected], dict[tuple[str, QueueJobState], int]]:
    """A page of queue jobs, newest first, and the counts per queue and state."""
    driver = await driver_connection(conn)
    found = await statements.inspect_queue_jobs(
        driver, queue=queue, state=state, before=before, limit=limit
    )
    counts = await statements.inspect_counts(driver)
    return await _enrich(conn, found), counts


async def get_queue_job(conn: AsyncConnection, queue_job_id: int) -> Inspected:
    driver = await driver_connection(conn)
    found = await statements.inspect_queue_jobs(driver, ids=[queue_job_id], limit=1)
    if not found:
        raise NotFound("queue job not found")
    return (await _enrich(conn, found))[0]


async def transitions(conn: AsyncConnection, queue_job_id: int) -> list[dict[str, Any]]:
    """The queue job's log, each error cut to its exception type and first message line."""
    log = await statements.queue_job_log(await driver_connection(conn), queue_job_id)
    shown = []
    for entry in log:
        error = None
        trace = entry["traceback"]
        if isinstance(trace, str):
            trace = json.loads(trace)
        if isinstance(trace, dict):
            kind = str(trace.get("exception_type") or "error")
            message = str(trace.get("exception_message") or "").splitlines()[:1]
            error = f"{kind}: {message[0]}"[:500] if message else kind
        shown.append({"at": entry["created"], "state": entry["state"], "error": error})
    return shown


def shown_payload(item: Inspected, *, may_read_jobs: bool) -> dict[str, Any] | None:
    """The payload's fields the inspector shows. It never holds credentials (the worker
    reads those from the job row); a webhook's body is shown only to job readers."""
    if item.args is None:
        return None
    fields = {key: getattr(item.args, key) for key in SHOWN_PAYLOAD_KEYS}
    if may_read_jobs:
        fields["webhook_payload"] = item.args.webhook_payload
    return fields


def _snapshot(item: Inspected) -> dict[str, Any]:
    return {
        "queue": item.queue_job.queue,
        "state": str(item.queue_job.state),
        "job_id": item.job_id,
        "pool_index": None if item.args is None else item.args.pool_index,
    }


async def retry(conn: AsyncConnection, actor: Actor, queue_job_id: int) -> int:
    """Fire the queue job's registry job again for its pool member; return the new id."""
    item = await get_queue_job(conn, queue_job_id)
    if item.queue_job.state.unfinished:
        raise Conflict("the queue job has not ended: it is still waiting or running")
    if item.attempt is not None and item.attempt["state"] == AttemptState.SUCCEEDED:
        raise Conflict("the queue job's attempt succeeded: there is nothing to retry")
    source = item.args
    if source is None and item.attempt is not None:
        source = AttemptArgs(
            job_id=str(item.attempt["job_id"]),
            loop_iteration=0,
            pool_index=int(item.attempt["pool_index"]),
            max_attempts=int(item.attempt["max_attempts"]),
            trigger=str(item.attempt["trigger"]),
        )
    if source is None or not _is_uuid(source.job_id):
        raise Conflict("the queue job names no job to run again")
    if source.trigger == Trigger.WEBHOOK and item.args is None:
        raise Conflict("a webhook run's payload is no longer kept, so it cannot be run again")
    job_id = uuid.UUID(source.job_id)
    row = (
        (
            await conn.execute(
                select(scheduled_jobs, func.now().label("now"))
                .where(scheduled_jobs.c.id == job_id)
                .with_for_update()
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise Conflict("the queue job's job has been deleted")
    if not row["enabled"]:
        raise Conflict("the job is disabled")
    plan = plan_firing(
        dict(row),
        row["now"],
        trigger=Trigger(source.trigger),
        webhook_hops=source.webhook_hops,
        webhook_payload=source.webhook_payload,
        webhook_metadata=source.webhook_metadata,
    )
    member = source.pool_index
    if member >= max(1, int(row["pool_count"])):
        raise Conflict(f"the job no longer has pool member {member}")
    if member in plan.busy:
        raise Conflict(f"pool member {member} of this job is still running")
    only = FiringPlan(
        plan.job_id,
        plan.job_type,
        {key: at for key, at in plan.taken.items() if key == str(member)},
        [args for args in plan.members if args.pool_index == member],
        [],
    )
    (new_id,) = await apply_firings(conn, [only])
    await record(
        conn, actor, "queue_job.retry", "queue_job", queue_job_id,
        before=_snapshot(item), after={"queued_queue_job_id": new_id},
    )  # fmt: skip
    return new_id


async def cancel(conn: AsyncConnection, actor: Actor, queue_job_id: int) -> None:
    """Remove a waiting queue job, release its member's lock, record the run's end."""
    item = await get_queue_job(conn, queue_job_id)
    taken = await statements.cancel_waiting(await driver_connection(conn), queue_job_id)
    if taken is None:
        if item.queue_job.state is QueueJobState.RUNNING:
            raise Conflict(STILL_RUNNING)
        raise Conflict("the queue job has already ended; delete it instead")
    args = _args(taken[1])
    if args is not None and _is_uuid(args.job_id):
        job_id = uuid.UUID(args.job_id)
        await conn.execute(
            text(
                "UPDATE scheduled_jobs SET running_since_by_pool = running_since_by_pool - :key "
                "WHERE id = :id"
            ),
            {"key": str(args.pool_index), "id": job_id},
        )
        exists = await conn.scalar(select(scheduled_jobs.c.id).where(scheduled_jobs.c.id == job_id))
        if exists is not None:
            await conn.execute(
                insert(job_attempts).values(
                    job_id=job_id, queue_job_id=queue_job_id, state=AttemptState.CANCELLED,
                    attempt=args.attempt, max_attempts=args.max_attempts, trigger=args.trigger,
                    pool_index=args.pool_index, loop_iteration=args.loop_iteration,
                    attempted_at=func.now(), finalized_at=func.now(), error=CANCELLED_ERROR,
                )
            )  # fmt: skip
    await record(conn, actor, "queue_job.cancel", "queue_job", queue_job_id, before=_snapshot(item))


async def delete(conn: AsyncConnection, actor: Actor, queue_job_id: int) -> None:
    """Forget an ended queue job in the engine; its attempt stays in the call history."""
    item = await get_queue_job(conn, queue_job_id)
    if item.queue_job.state.unfinished:
        raise Conflict("the queue job is still waiting or running: cancel it first")
    if not await statements.forget_ended(await driver_connection(conn), queue_job_id):
        raise Conflict("the queue job changed meanwhile; reload and try again")
    await record(conn, actor, "queue_job.delete", "queue_job", queue_job_id, before=_snapshot(item))
