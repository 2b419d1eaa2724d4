"""Every statement Zilean sends to PgQueuer's tables, and the names and status words in them.

PgQueuer 1.6 (pinned in pyproject.toml) keeps a queue job in `pgqueuer` while it waits
(`queued`) or runs (`picked`), deletes it when it finishes, and writes each transition to
`pgqueuer_log`. Its schema is used as it is; its worker is not: `consumer.py` claims,
heart-beats and settles queue jobs with the statements below, in one round-trip per
turn where PgQueuer's `QueueManager` takes several. Also here: inserting queue jobs
inside the caller's transaction, the continuation insert the attempt's recording
statement embeds, queue depth, the inspector's view and the retention sweep. They are
psycopg statements (`%(name)s` placeholders; the consumer's, run through its driver's raw
cursor, `$n`), so the HTTP worker, which never loads SQLAlchemy, runs them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.rows import dict_row

QUEUE_TABLE = "pgqueuer"
LOG_TABLE = "pgqueuer_log"
STATISTICS_TABLE = "pgqueuer_statistics"
CHANNEL_PREFIX = "zilean.queue."  # + queue name: one NOTIFY channel per queue


class QueueJobState(StrEnum):
    """Our engine-neutral words for where a queue job is, as metrics and tests say it."""

    QUEUED = "queued"  # waiting for its due time or a free worker
    RUNNING = "running"  # claimed by a worker
    FINISHED = "finished"  # its handler returned
    FAILED = "failed"  # its handler raised (held for inspection, or dropped)
    CANCELLED = "cancelled"  # cancelled while running, or deleted unrun

    @property
    def unfinished(self) -> bool:
        return self in (QueueJobState.QUEUED, QueueJobState.RUNNING)


_ENGINE_TO_STATE = {
    "queued": QueueJobState.QUEUED,
    "picked": QueueJobState.RUNNING,
    "successful": QueueJobState.FINISHED,
    "exception": QueueJobState.FAILED,
    "failed": QueueJobState.FAILED,
    "canceled": QueueJobState.CANCELLED,
    "deleted": QueueJobState.CANCELLED,
}


def channel_for(queue: str) -> str:
    """The NOTIFY channel our triggers wake `queue`'s workers on (revision 0009)."""
    return f"{CHANNEL_PREFIX}{queue}"


@dataclass(frozen=True)
class NewQueueJob:
    """One queue job to insert: its queue, payload, priority and due time (None: now)."""

    queue: str
    payload: bytes
    priority: int = 0
    due_at: datetime | None = None


# Ids are drawn first, in input order, so the caller gets them back in that order (a
# multi-row INSERT's RETURNING order is not guaranteed). The log row is what PgQueuer's
# own enqueue writes, so its log and statistics stay complete.
_ENQUEUE = """
WITH input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('pgqueuer', 'id')) AS id, job.*
      FROM unnest(%(queues)s::text[], %(priorities)s::int[], %(payloads)s::bytea[],
                  %(due)s::timestamptz[]) WITH ORDINALITY
           AS job(entrypoint, priority, payload, due_at, ord)
),
inserted AS (
    INSERT INTO pgqueuer (id, priority, entrypoint, payload, execute_after, status)
    SELECT id, priority, entrypoint, payload, coalesce(due_at, now()), 'queued' FROM input
    RETURNING id, entrypoint, priority
),
logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued', entrypoint, priority FROM inserted
)
SELECT id FROM input ORDER BY ord
"""


async def enqueue(conn: psycopg.AsyncConnection[Any], jobs: Sequence[NewQueueJob]) -> list[int]:
    """Insert `jobs` on `conn`, in its current transaction; return their ids in order.

    One statement whatever the number of jobs. The insert trigger wakes each queue's
    workers when the transaction commits, so nothing is visible (or run) before then.
    """
    if not jobs:
        return []
    cursor = await conn.execute(
        _ENQUEUE,
        {
            "queues": [job.queue for job in jobs],
            "priorities": [job.priority for job in jobs],
            "payloads": [job.payload for job in jobs],
            "due": [job.due_at for job in jobs],
        },
    )
    return [int(row[0]) for row in await cursor.fetchall()]


# CTEs that queue one job per row of the statement's CTE named `continuations` (columns
# `next_queue`, `next_payload`, `next_priority`, `next_delay_ms`). Embedded in the
# attempt's recording statement, so a loop iteration or a retry is queued by the
# statement that records its attempt, and a repeated recording queues nothing. The log
# rows are what PgQueuer's own enqueue writes.
CONTINUATION_CTES = """
queued AS (
    INSERT INTO pgqueuer (priority, entrypoint, payload, execute_after, status)
    SELECT next_priority, next_queue, next_payload,
           now() + next_delay_ms * interval '1 millisecond', 'queued'
      FROM continuations
    RETURNING id, entrypoint, priority
),
queued_log AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued', entrypoint, priority FROM queued
)"""

# The same, for a continuation the recording worker may run itself (a loop iteration or
# retry due at once): `continuations` also has `adopted`, and an adopted one goes in
# claimed by `%(claimant)s`, its heartbeat fresh, logged as queued and then picked,
# exactly as a claim by `CLAIM` would leave it; so a worker that dies running it is
# covered like any other claim (re-picked after the heartbeat timeout). `queued`
# returns `adopted`. (Not one template with `CONTINUATION_CTES`: that one is also
# embedded in the batched recording, whose placeholders are `$n`, not `%(name)s`.)
ADOPTING_CONTINUATION_CTES = """
queued AS (
    INSERT INTO pgqueuer (priority, entrypoint, payload, execute_after, status,
                          queue_manager_id)
    SELECT next_priority, next_queue, next_payload,
           now() + next_delay_ms * interval '1 millisecond',
           CASE WHEN adopted THEN 'picked' ELSE 'queued' END::pgqueuer_status,
           CASE WHEN adopted THEN %(claimant)s::uuid END
      FROM continuations
    RETURNING id, entrypoint, priority, status = 'picked' AS adopted
),
queued_log AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued'::pgqueuer_status, entrypoint, priority FROM queued
    UNION ALL
    SELECT id, 'picked'::pgqueuer_status, entrypoint, priority FROM queued WHERE adopted
)"""

# The queue job `%(queue_job_id)s` whose handler adopted its continuation, settled in the
# same statement as a turn would settle it (deleted, logged as finished), when this
# worker still holds it; one that another worker took over is that worker's to settle.
# Either way the consumer has nothing left to write for it.
SETTLED_BY_ADOPTION = """
settled AS (
    DELETE FROM pgqueuer
     WHERE id = %(queue_job_id)s AND queue_manager_id = %(claimant)s::uuid
       AND EXISTS (SELECT 1 FROM queued WHERE adopted)
    RETURNING id, entrypoint, priority
),
settled_log AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'successful', entrypoint, priority FROM settled
)"""

# The claimed continuation an earlier run of the adopting recording left, when a repeat
# of that statement (its answer was lost) finds the attempt recorded already: the same
# queue job, still held by `%(claimant)s`, so the worker can still run it rather than let
# it go stale and be recorded as lost. Read only when nothing was recorded.
ADOPTED_BEFORE = """
SELECT id FROM pgqueuer
 WHERE entrypoint = %(next_queue)s::text AND status = 'picked'
   AND queue_manager_id = %(claimant)s::uuid AND payload = %(next_payload)s::bytea
"""


# The consumer's one statement per turn (`consumer.py`): it settles the queue jobs whose
# handlers ended since the last turn (finished ones deleted, failed ones held, each
# transition logged as PgQueuer's own worker logs it), then claims up to `$6` due jobs,
# a crashed worker's stale claims included, oldest first within each priority. When it
# claims fewer than it asked for, one extra row says when the queue's next job falls due
# and when its oldest other claim goes stale (seconds from now; negative: already), so
# the consumer knows how long it may sleep without another round-trip. Completions are
# only ever written for claims this worker still holds: a claim another worker took over
# after a missed heartbeat is that worker's to finish.
# $1 ended ids, $2 their statuses, $3 their tracebacks (JSON text or NULL), $4 the queue,
# $5 this worker's id, $6 how many to claim, $7 the heartbeat timeout in seconds.
CLAIM = """
WITH ended AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) AS e(id, status, traceback)
),
deleted AS (
    DELETE FROM pgqueuer
     WHERE id IN (SELECT id FROM ended WHERE status <> 'failed') AND queue_manager_id = $5
    RETURNING id, entrypoint, priority
),
held AS (
    UPDATE pgqueuer SET status = 'failed', updated = now(), queue_manager_id = NULL
     WHERE id IN (SELECT id FROM ended WHERE status = 'failed') AND queue_manager_id = $5
    RETURNING id, entrypoint, priority
),
ended_log AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)
    SELECT ended.id, ended.status::pgqueuer_status, settled.entrypoint, settled.priority,
           ended.traceback::jsonb
      FROM ended
      JOIN (SELECT * FROM deleted UNION ALL SELECT * FROM held) settled USING (id)
),
due AS (
    SELECT id, priority FROM pgqueuer
     WHERE entrypoint = $4 AND status = 'queued' AND execute_after < now()
     ORDER BY priority DESC, id LIMIT $6::int FOR UPDATE SKIP LOCKED
),
stale AS (
    SELECT id, priority FROM pgqueuer
     WHERE entrypoint = $4 AND status = 'picked' AND execute_after < now()
       AND heartbeat < now() - make_interval(secs => $7::float8)
       AND id <> ALL($1::bigint[])
     ORDER BY priority DESC, id LIMIT $6::int FOR UPDATE SKIP LOCKED
),
eligible AS MATERIALIZED (
    SELECT id FROM (SELECT * FROM due UNION ALL SELECT * FROM stale) candidate
     ORDER BY priority DESC, id LIMIT $6::int
),
claimed AS (
    UPDATE pgqueuer
       SET status = 'picked', updated = now(), heartbeat = now(), queue_manager_id = $5
     WHERE id IN (SELECT id FROM eligible)
    RETURNING id, priority, entrypoint, execute_after, payload, attempts
),
claimed_log AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'picked', entrypoint, priority FROM claimed
)
SELECT id, priority, execute_after, payload, attempts,
       NULL::float8 AS due_in, NULL::float8 AS stale_in
  FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL,
       extract(epoch FROM (SELECT min(execute_after) FROM pgqueuer
                            WHERE entrypoint = $4 AND status = 'queued'
                              AND id NOT IN (SELECT id FROM eligible)) - now())::float8,
       extract(epoch FROM (SELECT min(heartbeat) FROM pgqueuer
                            WHERE entrypoint = $4 AND status = 'picked'
                              AND id NOT IN (SELECT id FROM eligible)
                              AND id <> ALL($1::bigint[]))
                          + make_interval(secs => $7::float8) - now())::float8
 WHERE (SELECT count(*) FROM claimed) < $6::int
"""

# Keeps this worker's claims fresh, so no other worker re-picks a job still running.
HEARTBEAT = """
UPDATE pgqueuer SET heartbeat = now()
 WHERE id = ANY($1::bigint[]) AND status = 'picked' AND queue_manager_id = $2
"""

# A handler asked for its queue job back later: queued again after $2 seconds, its
# delivery count raised, the reason logged, as PgQueuer's own retry does.
RETRY = """
WITH retried AS (
    UPDATE pgqueuer
       SET status = 'queued', execute_after = now() + make_interval(secs => $2::float8),
           attempts = attempts + 1, updated = now(), queue_manager_id = NULL
     WHERE id = $1::bigint AND queue_manager_id = $4
    RETURNING id, entrypoint, priority
)
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)
SELECT id, 'queued', entrypoint, priority, $3::text::jsonb FROM retried
"""

# How a handler's end is logged: the engine's status words for it.
ENDED_FINISHED = "successful"
ENDED_FAILED = "failed"  # the job is held as failed, for inspection


async def queue_depth(conn: psycopg.AsyncConnection[Any]) -> dict[tuple[str, QueueJobState], int]:
    """Unfinished queue jobs per queue and state; held failures are not counted."""
    cursor = await conn.execute(
        "SELECT entrypoint, status::text, count(*) FROM pgqueuer "
        "WHERE status IN ('queued', 'picked') GROUP BY 1, 2"
    )
    return {
        (str(queue), _ENGINE_TO_STATE[status]): int(count)
        for queue, status, count in await cursor.fetchall()
    }


async def unfinished(conn: psycopg.AsyncConnection[Any]) -> int:
    """How many queue jobs wait or run, on every queue."""
    cursor = await conn.execute(
        "SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')"
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def queue_job_states(conn: psycopg.AsyncConnection[Any]) -> list[tuple[int, QueueJobState]]:
    """Every queue job the engine still knows of, oldest first, with where it is now.

    A finished job survives only in the log, whose newest entry says how it ended.
    """
    cursor = await conn.execute(
        """
        SELECT id, status::text FROM pgqueuer
        UNION ALL
        (SELECT DISTINCT ON (log.job_id) log.job_id, log.status::text
           FROM pgqueuer_log log
          WHERE NOT EXISTS (SELECT 1 FROM pgqueuer job WHERE job.id = log.job_id)
          ORDER BY log.job_id, log.created DESC, log.id DESC)
        """
    )
    rows = await cursor.fetchall()
    return sorted((int(job_id), _ENGINE_TO_STATE[status]) for job_id, status in rows)


async def queue_jobs(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    """Every queue job row still in the table, oldest first (tests and diagnostics)."""
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        "SELECT id, entrypoint AS queue, status::text AS status, priority, execute_after, "
        "payload, attempts FROM pgqueuer ORDER BY id"
    )
    return await cursor.fetchall()


async def take_queued(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    """Delete every waiting queue job and return it (id, queue, due_at, payload), oldest
    first: for running attempts by hand, in tests and diagnostics."""
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        "DELETE FROM pgqueuer WHERE status = 'queued' "
        "RETURNING id, entrypoint AS queue, execute_after AS due_at, payload"
    )
    return sorted(await cursor.fetchall(), key=lambda row: int(row["id"]))


SWEEP_BATCH = 5_000  # rows deleted per statement, so no delete runs long

# What retention removes: the log of finished jobs, the per-second statistics, and jobs
# held as failed. Jobs still queued or picked, and their log, are never touched, however
# old they are.
_SWEEPS = (
    """
    DELETE FROM pgqueuer_log WHERE id IN (
        SELECT log.id FROM pgqueuer_log log
         WHERE log.created < %(cutoff)s
           AND NOT EXISTS (SELECT 1 FROM pgqueuer job
                            WHERE job.id = log.job_id AND job.status IN ('queued', 'picked'))
         ORDER BY log.id LIMIT %(batch)s
    )
    """,
    """
    DELETE FROM pgqueuer_statistics WHERE id IN (
        SELECT id FROM pgqueuer_statistics
         WHERE created < %(cutoff)s ORDER BY id LIMIT %(batch)s
    )
    """,
    """
    DELETE FROM pgqueuer WHERE id IN (
        SELECT id FROM pgqueuer
         WHERE status = 'failed' AND updated < %(cutoff)s ORDER BY id LIMIT %(batch)s
    )
    """,
)


async def sweep_finished_batch(conn: psycopg.AsyncConnection[Any], cutoff: datetime) -> int:
    """Delete one batch of each kind of finished row older than `cutoff`; return the count.

    The caller repeats this, committing between batches, until it returns 0.
    """
    removed = 0
    for statement in _SWEEPS:
        cursor = await conn.execute(statement, {"cutoff": cutoff, "batch": SWEEP_BATCH})
        removed += cursor.rowcount
    return removed


# The queue inspector's view (docs/queue.md). A queue job is its row while the engine
# holds it (waiting, claimed or held as failed) and, once the engine has deleted the row,
# its newest log entry. Engine status words per inspector state:
STATUSES_OF: dict[QueueJobState, tuple[str, ...]] = {
    state: tuple(word for word, mapped in _ENGINE_TO_STATE.items() if mapped is state)
    for state in QueueJobState
}

_KNOWN_JOBS = """
known AS (
    SELECT job.id, job.entrypoint AS queue, job.status::text AS status, job.priority,
           job.created, job.updated, job.execute_after, job.attempts, job.payload,
           true AS kept
      FROM pgqueuer job
    UNION ALL
    SELECT last.job_id, last.entrypoint, last.status::text, last.priority,
           first_seen.created, last.created, NULL, NULL, NULL, false
      FROM (SELECT DISTINCT ON (log.job_id) log.job_id, log.entrypoint, log.status,
                   log.priority, log.created
              FROM pgqueuer_log log
             ORDER BY log.job_id, log.created DESC, log.id DESC) last
      JOIN LATERAL (SELECT min(created) AS created FROM pgqueuer_log
                     WHERE job_id = last.job_id) first_seen ON true
     WHERE NOT EXISTS (SELECT 1 FROM pgqueuer job WHERE job.id = last.job_id)
)"""

_INSPECT = (
    "WITH"
    + _KNOWN_JOBS
    + """
SELECT id, queue, status, priority, created, updated, execute_after, attempts, payload, kept
  FROM known
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s))
   AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
 ORDER BY id DESC
 LIMIT %(limit)s
"""
)

_INSPECT_COUNTS = "WITH" + _KNOWN_JOBS + "\nSELECT queue, status, count(*) FROM known GROUP BY 1, 2"


@dataclass(frozen=True)
class InspectedQueueJob:
    """One queue job as the inspector shows it; `payload` is None once the row is gone."""

    id: int
    queue: str
    state: QueueJobState
    engine_status: str
    priority: int
    created_at: datetime
    updated_at: datetime
    due_at: datetime | None
    deliveries: int | None
    payload: bytes | None


def _inspected(row: dict[str, Any]) -> InspectedQueueJob:
    return InspectedQueueJob(
        id=int(row["id"]),
        queue=str(row["queue"]),
        state=_ENGINE_TO_STATE[row["status"]],
        engine_status=str(row["status"]),
        priority=int(row["priority"]),
        created_at=row["created"],
        updated_at=row["updated"],
        due_at=row["execute_after"],
        deliveries=row["attempts"],
        payload=None if row["payload"] is None else bytes(row["payload"]),
    )


async def inspect_queue_jobs(
    conn: psycopg.AsyncConnection[Any],
    *,
    queue: str | None = None,
    state: QueueJobState | None = None,
    ids: Sequence[int] | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[InspectedQueueJob]:
    """Queue jobs newest first, filtered by queue and state, `limit` of them below `before`."""
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        _INSPECT,
        {
            "queue": queue,
            "statuses": None if state is None else list(STATUSES_OF[state]),
            "ids": None if ids is None else list(ids),
            "before": before,
            "limit": limit,
        },
    )
    return [_inspected(row) for row in await cursor.fetchall()]


async def inspect_counts(
    conn: psycopg.AsyncConnection[Any],
) -> dict[tuple[str, QueueJobState], int]:
    """How many queue jobs each queue has in each state (the log's finished ones included)."""
    counts: dict[tuple[str, QueueJobState], int] = {}
    cursor = await conn.execute(_INSPECT_COUNTS)
    for queue, status, count in await cursor.fetchall():
        key = (str(queue), _ENGINE_TO_STATE[status])
        counts[key] = counts.get(key, 0) + int(count)
    return counts


async def queue_job_log(conn: psycopg.AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    """One queue job's transitions, oldest first: when, the state, and the error if any."""
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(
        "SELECT created, status::text AS status, traceback FROM pgqueuer_log "
        "WHERE job_id = %(id)s ORDER BY created, id",
        {"id": job_id},
    )
    return [{**row, "state": _ENGINE_TO_STATE[row["status"]]} for row in await cursor.fetchall()]


async def cancel_waiting(
    conn: psycopg.AsyncConnection[Any], job_id: int
) -> tuple[str, bytes] | None:
    """Delete `job_id` if it is still waiting (not claimed) and log it as deleted, as
    PgQueuer's own cancel of a waiting job does; return its (queue, payload), or None
    when it is not waiting (claimed meanwhile, finished, or unknown)."""
    cursor = await conn.execute(
        """
        WITH gone AS (
            DELETE FROM pgqueuer WHERE id = %(id)s AND status = 'queued'
            RETURNING id, entrypoint, priority, payload
        ), logged AS (
            INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
            SELECT id, 'deleted', entrypoint, priority FROM gone
        )
        SELECT entrypoint, payload FROM gone
        """,
        {"id": job_id},
    )
    row = await cursor.fetchone()
    return None if row is None else (str(row[0]), bytes(row[1] or b""))


async def forget_ended(conn: psycopg.AsyncConnection[Any], job_id: int) -> bool:
    """Remove an ended queue job from the engine: its held row (a failure) and its log.
    Jobs still waiting or claimed are left alone; False when nothing was removed."""
    cursor = await conn.execute(
        """
        WITH held AS (
            DELETE FROM pgqueuer WHERE id = %(id)s AND status NOT IN ('queued', 'picked')
            RETURNING id
        ), log AS (
            DELETE FROM pgqueuer_log
             WHERE job_id = %(id)s
               AND NOT EXISTS (SELECT 1 FROM pgqueuer
                                WHERE id = %(id)s AND status IN ('queued', 'picked'))
            RETURNING id
        )
        SELECT (SELECT count(*) FROM held) + (SELECT count(*) FROM log)
        """,
        {"id": job_id},
    )
    row = await cursor.fetchone()
    return bool(row and int(row[0]))
