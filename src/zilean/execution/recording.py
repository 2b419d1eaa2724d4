"""The attempt's two statements: reading what it needs, and recording what it did.

Both are written out here as SQL, so the hot path can be read in one place, and sent
on the worker's own connections (`hot_path.py`), one round-trip each.

`LOAD` reads the job row, whether its group chain is disabled, the global variables it
references, and what the call history already knows of this queue job; in the same
statement it refreshes (or releases) the member's overlap lock and writes the attempt's
start marker, a `running` history row. The marker is how a queue job delivered again
(the engine re-picks a job whose worker stopped heart-beating) is recognised:

- no history row: it never started, so it runs normally;
- a `running` row: it started and its outcome was never written, so its call may have
  gone out; it is recorded as lost and the job's retry policy decides what follows;
- a finished row: it was recorded (and what follows was queued); nothing is done.

`record_sql` finishes the `running` row, adds the per-minute stats bucket and the
lifetime counters, and either queues the continuation or ends the run. It changes only
a `running` row, so it is idempotent per queue job: a repeat records and queues nothing.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any

from psycopg.types.json import Jsonb

from zilean.execution.hot_path import HotConnections
from zilean.execution.payload import AttemptArgs, Trigger
from zilean.queue_engine.statements import CONTINUATION_CTES
from zilean.registry.kinds import OneOffAfterRun
from zilean.schedules import ScheduleType


class AttemptState(StrEnum):
    """An attempt's state, as the call history shows it."""

    RUNNING = "running"  # started; its outcome is not recorded yet
    SUCCEEDED = "succeeded"  # a 2xx response (a looping job may continue)
    FAILED = "failed"  # a failure; retried while the attempt budget lasts
    CANCELLED = "cancelled"  # can never succeed as configured, or retries are off

    @property
    def finished(self) -> bool:
        return self is not AttemptState.RUNNING


# The columns an attempt reads: what it sends, and the settings its decisions use.
_JOB_COLUMNS = (
    "id", "name", "enabled", "group_name", "schedule_type", "one_off_after_run", "job_type",
    "http_method", "url", "query_params", "body", "headers", "auth_type", "auth_config",
    "auth_secret", "exec_timeout_ms", "pool_count", "overlap_policy",
    "loop_enabled", "loop_response_path", "loop_delay_ms", "loop_jitter_ms",
    "loop_max_iterations", "retry_enabled", "retry_mode", "retry_base_delay_ms",
    "retry_multiplier", "retry_max_delay_ms", "retry_max_attempts", "on_failure_url",
)  # fmt: skip

# The column list is the constant above, not input: S608 does not apply.
LOAD = f"""
WITH prior AS (
    SELECT state FROM job_attempts WHERE queue_job_id = %(queue_job_id)s
),
gate AS (
    SELECT job.enabled AND NOT disabled.gated AS runnable, disabled.gated
      FROM scheduled_jobs job
     CROSS JOIN LATERAL (
         SELECT EXISTS (
             SELECT 1 FROM disabled_groups grp
              WHERE grp.group_name = job.group_name
                 OR starts_with(job.group_name, grp.group_name || '/')
         ) AS gated
     ) disabled
     WHERE job.id = %(job_id)s
),
-- A runnable skip job stamps its member's lock, so a long loop never looks stale; a job
-- that can no longer run gives the lock back. A queue job whose attempt was already
-- recorded leaves the lock alone: its run has moved on.
lock_refresh AS (
    UPDATE scheduled_jobs job
       SET running_since_by_pool = CASE
               WHEN gate.runnable THEN jsonb_set(
                   job.running_since_by_pool, ARRAY[%(lock_key)s::text], to_jsonb(now()))
               ELSE job.running_since_by_pool - %(lock_key)s::text
           END
      FROM gate
     WHERE job.id = %(job_id)s
       AND (job.overlap_policy = 'skip' OR NOT gate.runnable)
       AND NOT EXISTS (SELECT 1 FROM prior WHERE prior.state <> 'running')
),
-- The start marker, written before the call is made.
started AS (
    INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts, trigger,
                              pool_index, loop_iteration, scheduled_at, attempted_at)
    SELECT %(job_id)s, %(queue_job_id)s, 'running', %(attempt)s, %(max_attempts)s,
           %(trigger)s, %(pool_index)s, %(loop_iteration)s, %(scheduled_at)s, now()
      FROM gate
     WHERE gate.runnable AND NOT EXISTS (SELECT 1 FROM prior)
    ON CONFLICT (queue_job_id) WHERE queue_job_id IS NOT NULL DO NOTHING
    RETURNING 1
)
SELECT {", ".join(f"job.{name}" for name in _JOB_COLUMNS)},
       gate.gated,
       now() AS now,
       (SELECT state FROM prior) AS prior_state,
       EXISTS (SELECT 1 FROM started) AS started,
       -- The sealed auth secret may itself hold `{{{{name}}}}`: SQL cannot see inside
       -- it, so a job with one loads every variable and the worker opens only those
       -- it references.
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', var.id, 'name', var.name, 'value', var.value,
                   'is_secret', var.is_secret, 'sealed', encode(var.secret_value, 'base64'))),
               '[]'::jsonb)
          FROM global_variables var
         WHERE job.auth_secret IS NOT NULL
            OR concat_ws(' ', job.url, job.body, job.query_params::text, job.headers::text,
                         job.auth_config::text) ~ ('\\{{\\{{\\s*' || var.name || '\\s*\\}}\\}}')
       ) AS variables
  FROM scheduled_jobs job, gate
 WHERE job.id = %(job_id)s
"""  # noqa: S608


@dataclass(frozen=True)
class StoredVariable:
    """A global variable as loaded: plaintext, or the sealed bytes of a secret."""

    id: uuid.UUID
    name: str
    value: str
    sealed: bytes | None
    is_secret: bool


@dataclass(frozen=True)
class LoadedJob:
    """What the first statement returned for a job that still exists."""

    row: Mapping[str, Any]
    gated: bool
    now: datetime  # the database clock when the attempt started
    variables: Sequence[StoredVariable]
    prior: AttemptState | None  # what the history already held for this queue job
    started: bool  # this delivery wrote the start marker: it may make the call

    @property
    def runnable(self) -> bool:
        return bool(self.row["enabled"]) and not self.gated


def _lock_key(pool_index: int) -> str:
    return str(pool_index)


async def load_attempt(
    hot: HotConnections, args: AttemptArgs, queue_job_id: int, due_at: datetime | None
) -> LoadedJob | None:
    """Read everything one attempt needs in one statement; None when the job is gone.

    Side effects, in the same statement: the member's lock is stamped (a runnable
    `skip` job) or released (a job that can no longer run), and the start marker is
    written when this queue job has no history row yet and the job can run.
    """
    row = await hot.fetch_first(
        LOAD,
        {
            "job_id": uuid.UUID(args.job_id),
            "queue_job_id": queue_job_id,
            "lock_key": _lock_key(args.pool_index),
            "attempt": args.attempt,
            "max_attempts": args.max_attempts,
            "trigger": args.trigger,
            "pool_index": args.pool_index,
            "loop_iteration": args.loop_iteration,
            "scheduled_at": due_at,
        },
    )
    if row is None:
        return None
    prior = row["prior_state"]
    return LoadedJob(
        row={name: row[name] for name in _JOB_COLUMNS},
        gated=bool(row["gated"]),
        now=row["now"],
        variables=[_variable(item) for item in row["variables"]],
        prior=None if prior is None else AttemptState(prior),
        started=bool(row["started"]),
    )


def _variable(item: Mapping[str, Any]) -> StoredVariable:
    sealed = item.get("sealed")
    return StoredVariable(
        id=uuid.UUID(item["id"]),
        name=item["name"],
        value=item["value"],
        sealed=base64.b64decode(sealed) if sealed else None,
        is_secret=bool(item["is_secret"]),
    )


@dataclass(frozen=True)
class AttemptRecord:
    """One finished attempt, ready to be written (every text field already redacted)."""

    args: AttemptArgs
    queue_job_id: int
    state: AttemptState
    duration_ms: int | None
    error: str | None
    last_call: dict[str, Any] | None

    @property
    def job_id(self) -> uuid.UUID:
        return uuid.UUID(self.args.job_id)


@dataclass(frozen=True)
class Continuation:
    """The queue job an attempt's loop or retry continues with, `delay_ms` after it."""

    queue: str
    args: AttemptArgs
    delay_ms: int


@dataclass(frozen=True)
class Ending:
    """What the end of a run changes on the job row, beyond the counters.

    `release` gives the pool member's overlap lock back; `one_off` is the completion of a
    one-off run (`keep` disables the row, `delete` removes it), None otherwise.
    """

    release: bool
    one_off: OneOffAfterRun | None = None


def one_off_completion(row: Mapping[str, Any], trigger: str) -> OneOffAfterRun | None:
    """Return how a finished run completes its one-off job, or None when it is not one."""
    if row["schedule_type"] != ScheduleType.ONE_OFF or trigger != Trigger.ONE_OFF:
        return None
    if row["one_off_after_run"] == OneOffAfterRun.DELETE:
        return OneOffAfterRun.DELETE
    return OneOffAfterRun.KEEP


_RECORD = """
WITH history AS (
    UPDATE job_attempts
       SET state = %(state)s, finalized_at = now(), duration_ms = %(duration_ms)s,
           error = %(error)s, last_call = %(last_call)s
     WHERE queue_job_id = %(queue_job_id)s AND state = 'running'
    RETURNING job_id
),
stats AS (
    INSERT INTO job_call_stats AS bucket
           (job_id, bucket_start, total, completed, failed, duration_sum_ms, duration_max_ms)
    SELECT job_id, date_trunc('minute', now()), 1, %(completed)s, %(failed)s,
           %(duration)s, %(duration)s
      FROM history
    ON CONFLICT (job_id, bucket_start) DO UPDATE
       SET total = bucket.total + excluded.total,
           completed = bucket.completed + excluded.completed,
           failed = bucket.failed + excluded.failed,
           duration_sum_ms = bucket.duration_sum_ms + excluded.duration_sum_ms,
           duration_max_ms = greatest(bucket.duration_max_ms, excluded.duration_max_ms)
){continuation}
UPDATE scheduled_jobs job
   SET invocations_total = job.invocations_total + 1,
       invocations_completed = job.invocations_completed + %(completed)s,
       invocations_failed = job.invocations_failed + %(failed)s{ending}
 WHERE job.id = %(job_id)s AND job.id IN (SELECT job_id FROM history)
RETURNING now() AS recorded_at
"""
# A deleted one-off takes its history with it (ON DELETE CASCADE): nothing to add.
_RECORD_DELETING = "DELETE FROM scheduled_jobs WHERE id = %(job_id)s RETURNING now() AS recorded_at"


@cache
def record_sql(release: bool, one_off: OneOffAfterRun | None, continues: bool) -> str:
    """The recording statement for one kind of ending (see the module docstring)."""
    if one_off is OneOffAfterRun.DELETE:
        return _RECORD_DELETING
    ending = ""
    if release:
        ending += ",\n       running_since_by_pool = job.running_since_by_pool - %(lock_key)s::text"
    if one_off is OneOffAfterRun.KEEP:
        ending += ",\n       enabled = false, updated_at = now()"
    continuation = "," + CONTINUATION_CTES if continues else ""
    return _RECORD.format(continuation=continuation, ending=ending)


def _record_params(record: AttemptRecord, continuation: Continuation | None) -> dict[str, Any]:
    succeeded = record.state is AttemptState.SUCCEEDED
    params: dict[str, Any] = {
        "job_id": record.job_id,
        "queue_job_id": record.queue_job_id,
        "state": str(record.state),
        "duration_ms": record.duration_ms,
        "error": record.error,
        "last_call": None if record.last_call is None else Jsonb(record.last_call),
        "completed": int(succeeded),
        "failed": int(not succeeded),
        "duration": record.duration_ms or 0,
        "lock_key": _lock_key(record.args.pool_index),
    }
    if continuation is not None:
        params |= {
            "next_queue": continuation.queue,
            "next_payload": continuation.args.to_payload(),
            "next_priority": continuation.args.priority,
            "next_delay_ms": continuation.delay_ms,
        }
    return params


async def record_attempt(
    hot: HotConnections,
    record: AttemptRecord,
    ending: Ending,
    continuation: Continuation | None = None,
) -> datetime | None:
    """Finish the attempt's history row, add its stats bucket and counters, apply `ending`,
    and queue `continuation` (due `delay_ms` after the recording time).

    One statement, idempotent per queue job. Return the database time it was recorded
    at, or None when the job no longer exists or this queue job's attempt was already
    recorded (nothing is written or queued then).
    """
    sql = record_sql(ending.release, ending.one_off, continuation is not None)
    if ending.one_off is OneOffAfterRun.DELETE:
        params: dict[str, Any] = {"job_id": record.job_id}
    else:
        params = _record_params(record, continuation)
    row = await hot.fetch_first(sql, params)
    return None if row is None else row["recorded_at"]
