"""The attempt's two statements: reading what it needs, and recording what it did.

Both are written out here as SQL, so the hot path can be read in one place, and sent
on the worker's own connections (`hot_path.py`). Each takes arrays, one element per
attempt: `AttemptStatements` sends the attempts that arrive together in one statement
(`batching.py`), one round-trip for the lot, and a lone attempt by itself at once.

`LOAD` reads the job row, whether its group chain is disabled, the global variables it
references, and what the call history already knows of this queue job; in the same
statement it refreshes (or releases) the member's overlap lock and writes the attempt's
start marker, a `running` history row. The marker is how a queue job delivered again
(the engine re-picks a job whose worker stopped heart-beating) is recognised:

- no history row: it never started, so it runs normally;
- a `running` row: it started and its outcome was never written, so its call may have
  gone out; it is recorded as lost and the job's retry policy decides what follows;
- a finished row: it was recorded (and what follows was queued); nothing is done.

`RECORD` finishes the `running` row, adds to the per-minute stats bucket and the
lifetime counters, and either queues the continuation or ends the run. It changes only
a `running` row, so it is idempotent per queue job: a repeat records and queues nothing.
Attempts of one job in one batch (pool members, say) are added up per job first, since
a statement may change a row only once.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from zilean.execution.batching import StatementBatcher
from zilean.execution.hot_path import HotConnections, join
from zilean.execution.payload import AttemptArgs, Trigger
from zilean.queue_engine.statements import (
    ADOPTED_BEFORE,
    ADOPTING_CONTINUATION_CTES,
    CONTINUATION_CTES,
    SETTLED_BY_ADOPTION,
)
from zilean.registry.kinds import OneOffAfterRun
from zilean.schedules import ScheduleType

Item = TypeVar("Item")
Result = TypeVar("Result")


class AttemptState(StrEnum):
    """An attempt's state, as the call history shows it (docs/state_machine.md)."""

    RUNNING = "running"  # started; its outcome is not recorded yet
    SUCCEEDED = "succeeded"  # a 2xx response (a looping job may continue)
    RETRYING = "retrying"  # failed, and the next attempt of its run is queued
    FAILED = "failed"  # failed, and its run ends failed: the attempt budget is spent
    CANCELLED = "cancelled"  # failed, and its run ends: it can never succeed as
    # configured (a configuration error), or retries are off

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
    "script_body", "script_args", "script_secret_vars", "capabilities", "notify_on",
)  # fmt: skip

# Whether the job's group, or a group above it, is disabled (`disabled`, per job row).
_GATED = """     CROSS JOIN LATERAL (
         SELECT EXISTS (
             SELECT 1 FROM disabled_groups grp
              WHERE grp.group_name = job.group_name
                 OR starts_with(job.group_name, grp.group_name || '/')
         ) AS gated
     ) disabled
"""

# The global variables the job references, and every secret one: what the attempt
# records is redacted of every secret's value, referenced or not. The sealed auth secret
# may itself hold `{{name}}`: SQL cannot see inside it, so a job with one loads every
# variable and the worker substitutes only those it references.
_VARIABLES = """       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', var.id, 'name', var.name, 'value', var.value,
                   'is_secret', var.is_secret, 'sealed', encode(var.secret_value, 'base64'),
                   'script_sealed', encode(var.script_secret_value, 'base64'))),
               '[]'::jsonb)
          FROM global_variables var
         WHERE CASE WHEN job.job_type = 'http' THEN
                   var.is_secret
                   OR job.auth_secret IS NOT NULL
                   OR concat_ws(' ', job.url, job.body, job.query_params::text,
                                job.headers::text, job.auth_config::text)
                      ~ ('\\{\\{\\s*' || var.name || '\\s*\\}\\}')
               -- A script gets every plain variable, and a secret only when both the
               -- variable allows scripts and the job names it.
               ELSE NOT var.is_secret
                   OR (var.allow_in_scripts AND job.script_secret_vars ? var.name)
               END
       ) AS variables,
       -- The catalog entries of the volumes a script declares, read on every attempt
       -- (CASE: an HTTP attempt never reads the catalog).
       CASE WHEN job.job_type <> 'http' THEN
           (SELECT jsonb_object_agg(vol.name, vol.max_mode)
              FROM script_volumes vol
             WHERE job.capabilities -> 'volumes' @> jsonb_build_array(
                       jsonb_build_object('name', vol.name)))
       END AS volume_catalog
"""

# Whether a pool member's lock (`{locks} ->> {key}`) was stamped within the last minute:
# an attempt then leaves it be, so that back-to-back attempts of a job neither rewrite its
# row nor queue behind a firing's lock on it. A minute is far inside the hour after which
# a lock counts as stale, so a long loop still never looks stale. Stamps are ISO 8601 in
# UTC, as both the firing and this statement write them, so comparing their first 19
# characters as text compares them as times; a stamp in any other shape is refreshed.
_FRESH_LOCK = """coalesce(({locks} ->> {key}) >= to_char(now() AT TIME ZONE 'UTC'
                     - interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SS'), false)"""

_MEMBER_FRESH = _FRESH_LOCK.format(locks="job.running_since_by_pool", key="input.lock_key")
_ONE_MEMBER_FRESH = _FRESH_LOCK.format(locks="job.running_since_by_pool", key="%(lock_key)s::text")

# The column list is the constant above, not input: S608 does not apply.
LOAD = f"""
WITH input AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
        ord int, job_id uuid, queue_job_id bigint, lock_key text, attempt int,
        max_attempts int, trigger text, pool_index int, loop_iteration int,
        scheduled_at timestamptz)
),
-- The statement may wait for job rows: the start markers' foreign keys share-lock them
-- (which only FOR UPDATE conflicts with: a delete, a registry edit), and a skip job
-- whose member's stamp is over a minute old updates its row. A batch that waits for one
-- while holding others could deadlock with a transaction that locks several jobs; so it
-- waits at most `BATCH_LOCK_TIMEOUT`, well before Postgres would look for a deadlock
-- (1 s), then fails (LockNotAvailable), and its attempts are sent again one by one, each
-- waiting for its single job row (`LOAD_ONE`), which cannot deadlock. The rows it
-- updates it locks first, in id order, so two batches of ours only queue behind each
-- other.
job_locks AS MATERIALIZED (
    SELECT id FROM scheduled_jobs job
     WHERE id IN (SELECT job_id FROM input) AND overlap_policy = 'skip'
       AND EXISTS (SELECT 1 FROM input
                    WHERE input.job_id = job.id
                      AND NOT {_MEMBER_FRESH})
     ORDER BY id
       FOR NO KEY UPDATE
),
-- A CTE is read only as far as its reader asks; counting takes every lock now.
locked AS (
    SELECT count(*) AS jobs FROM job_locks
),
prior AS (
    SELECT queue_job_id, state FROM job_attempts
     WHERE queue_job_id IN (SELECT queue_job_id FROM input)
),
gate AS (
    SELECT input.ord, job.overlap_policy, disabled.gated,
           job.enabled AND NOT disabled.gated AS runnable,
           {_MEMBER_FRESH} AS fresh
      FROM input
      JOIN scheduled_jobs job ON job.id = input.job_id
{_GATED}     WHERE (SELECT jobs FROM locked) IS NOT NULL
),
-- A runnable skip job stamps its member's lock unless it is fresh (`_FRESH_LOCK`), so a
-- long loop never looks stale; a job that can no longer run gives the lock back. A queue
-- job whose attempt was already recorded leaves the lock alone: its run has moved on.
locks AS (
    SELECT input.job_id,
           jsonb_object_agg(input.lock_key, to_jsonb(now()))
               FILTER (WHERE gate.runnable AND gate.overlap_policy = 'skip' AND NOT gate.fresh)
               AS stamped,
           array_agg(input.lock_key) FILTER (WHERE NOT gate.runnable) AS released
      FROM input JOIN gate USING (ord)
     WHERE NOT EXISTS (SELECT 1 FROM prior
                        WHERE prior.queue_job_id = input.queue_job_id
                          AND prior.state <> 'running')
     GROUP BY input.job_id
),
lock_refresh AS (
    UPDATE scheduled_jobs job
       SET running_since_by_pool = (job.running_since_by_pool || coalesce(locks.stamped, '{{}}'))
                                   - coalesce(locks.released, '{{}}')
      FROM locks
     WHERE job.id = locks.job_id
       AND (locks.stamped IS NOT NULL OR locks.released IS NOT NULL)
),
-- The start marker, written before the call is made.
started AS (
    INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts, trigger,
                              pool_index, loop_iteration, scheduled_at, attempted_at)
    SELECT input.job_id, input.queue_job_id, 'running', input.attempt, input.max_attempts,
           input.trigger, input.pool_index, input.loop_iteration, input.scheduled_at, now()
      FROM input JOIN gate USING (ord)
     WHERE gate.runnable
       AND NOT EXISTS (SELECT 1 FROM prior WHERE prior.queue_job_id = input.queue_job_id)
    ON CONFLICT (queue_job_id) WHERE queue_job_id IS NOT NULL DO NOTHING
    RETURNING queue_job_id
)
SELECT input.ord,
       {", ".join(f"job.{name}" for name in _JOB_COLUMNS)},
       gate.gated,
       now() AS now,
       (SELECT state FROM prior WHERE prior.queue_job_id = input.queue_job_id) AS prior_state,
       EXISTS (SELECT 1 FROM started WHERE started.queue_job_id = input.queue_job_id)
           AS started,
{_VARIABLES}  FROM input
  JOIN gate USING (ord)
  JOIN scheduled_jobs job ON job.id = input.job_id
"""  # noqa: S608


# One attempt alone: the same read, without the arrays (about half the server time).
LOAD_ONE = f"""
WITH prior AS (
    SELECT state FROM job_attempts WHERE queue_job_id = %(queue_job_id)s
),
gate AS (
    SELECT job.enabled AND NOT disabled.gated AS runnable, disabled.gated
      FROM scheduled_jobs job
{_GATED}     WHERE job.id = %(job_id)s
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
       AND (NOT gate.runnable OR NOT {_ONE_MEMBER_FRESH})
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
{_VARIABLES}  FROM scheduled_jobs job, gate
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
    # A secret opted into scripts, sealed with the script key: all a script worker can open.
    script_sealed: bytes | None = None


@dataclass(frozen=True)
class LoadedJob:
    """What the first statement returned for a job that still exists."""

    row: Mapping[str, Any]
    gated: bool
    now: datetime  # the database clock when the attempt started
    variables: Sequence[StoredVariable]
    volume_catalog: Mapping[str, str]  # each declared volume's `max_mode`, if it still exists
    prior: AttemptState | None  # what the history already held for this queue job
    started: bool  # this delivery wrote the start marker: it may make the call

    @property
    def runnable(self) -> bool:
        return bool(self.row["enabled"]) and not self.gated


def _lock_key(pool_index: int) -> str:
    return str(pool_index)


@dataclass(frozen=True)
class AttemptToLoad:
    """One attempt's part of a `LOAD`: which queue job, for which run, due when."""

    args: AttemptArgs
    queue_job_id: int
    due_at: datetime | None


def _load_params(batch: Sequence[AttemptToLoad]) -> str:
    return json.dumps(
        [
            {
                "ord": ord,
                "job_id": item.args.job_id,
                "queue_job_id": item.queue_job_id,
                "lock_key": _lock_key(item.args.pool_index),
                "attempt": item.args.attempt,
                "max_attempts": item.args.max_attempts,
                "trigger": str(item.args.trigger),
                "pool_index": item.args.pool_index,
                "loop_iteration": item.args.loop_iteration,
                "scheduled_at": None if item.due_at is None else item.due_at.isoformat(),
            }
            for ord, item in enumerate(batch, start=1)
        ]
    )


async def _load_one(hot: HotConnections, item: AttemptToLoad) -> LoadedJob | None:
    args = item.args
    row = await hot.fetch_first(
        LOAD_ONE,
        {
            "job_id": uuid.UUID(args.job_id),
            "queue_job_id": item.queue_job_id,
            "lock_key": _lock_key(args.pool_index),
            "attempt": args.attempt,
            "max_attempts": args.max_attempts,
            "trigger": str(args.trigger),
            "pool_index": args.pool_index,
            "loop_iteration": args.loop_iteration,
            "scheduled_at": item.due_at,
        },
    )
    return None if row is None else _loaded(row)


def _loaded(row: Mapping[str, Any]) -> LoadedJob:
    prior = row["prior_state"]
    return LoadedJob(
        row={name: row[name] for name in _JOB_COLUMNS},
        gated=bool(row["gated"]),
        now=row["now"],
        variables=[_variable(item) for item in row["variables"]],
        volume_catalog=dict(row["volume_catalog"] or {}),
        prior=None if prior is None else AttemptState(prior),
        started=bool(row["started"]),
    )


def _variable(item: Mapping[str, Any]) -> StoredVariable:
    sealed, script_sealed = item.get("sealed"), item.get("script_sealed")
    return StoredVariable(
        id=uuid.UUID(item["id"]),
        name=item["name"],
        value=item["value"],
        sealed=base64.b64decode(sealed) if sealed else None,
        is_secret=bool(item["is_secret"]),
        script_sealed=base64.b64decode(script_sealed) if script_sealed else None,
    )


def last_call(
    *,
    job_name: str,
    timeout_ms: int,
    duration_ms: int | None,
    error: str | None,
    kind_fields: Mapping[str, Any],
) -> dict[str, Any]:
    """Return an attempt's `last_call`: the fields every job kind records, then its own.

    `timeout_ms` is the timeout the attempt ran under, `duration_ms` None when unknown (a
    lost attempt), `error` None after a success. Each kind adds what it sent and got back
    (an HTTP job: `jobkinds.http.call.request_fields`); every text is already redacted.
    """
    return {
        "job_name": job_name,
        "timeout_ms": timeout_ms,
        "duration_ms": duration_ms,
        "error": error,
        **kind_fields,
    }


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


RECORD = f"""
WITH input AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
        ord int, queue_job_id bigint, job_id uuid, state text, duration_ms int, error text,
        last_call jsonb, lock_key text, release bool, disable bool, next_queue text,
        next_payload text, next_priority int, next_delay_ms int)
),
-- The batch's job rows first, in id order, waiting at most `BATCH_LOCK_TIMEOUT` (see
-- `LOAD`); every statement of ours takes job rows before stats rows, and stats rows in
-- job order, so two of ours never deadlock either.
job_locks AS MATERIALIZED (
    SELECT id FROM scheduled_jobs
     WHERE id IN (SELECT job_id FROM input)
     ORDER BY id
       FOR NO KEY UPDATE
),
-- A CTE is read only as far as its reader asks; counting takes every lock now.
locked AS (
    SELECT count(*) AS jobs FROM job_locks
),
history AS (
    UPDATE job_attempts attempt
       SET state = input.state, finalized_at = now(), duration_ms = input.duration_ms,
           error = input.error, last_call = input.last_call
      FROM input
     WHERE attempt.queue_job_id = input.queue_job_id AND attempt.state = 'running'
       AND (SELECT jobs FROM locked) IS NOT NULL
    RETURNING attempt.queue_job_id
),
-- Only what this statement recorded: a repeat, or a job deleted meanwhile, adds nothing.
recorded AS (
    SELECT input.* FROM input JOIN history USING (queue_job_id)
),
per_job AS (
    SELECT job_id, count(*) AS total,
           count(*) FILTER (WHERE state = 'succeeded') AS completed,
           count(*) FILTER (WHERE state <> 'succeeded') AS failed,
           sum(coalesce(duration_ms, 0)) AS duration_sum,
           max(coalesce(duration_ms, 0)) AS duration_max,
           coalesce(array_agg(lock_key) FILTER (WHERE release), '{{}}') AS released,
           bool_or(disable) AS disable
      FROM recorded GROUP BY job_id
),
stats AS (
    INSERT INTO job_call_stats AS bucket
           (job_id, bucket_start, total, completed, failed, duration_sum_ms, duration_max_ms)
    SELECT job_id, date_trunc('minute', now()), total, completed, failed,
           duration_sum, duration_max
      FROM per_job
     ORDER BY job_id
    ON CONFLICT (job_id, bucket_start) DO UPDATE
       SET total = bucket.total + excluded.total,
           completed = bucket.completed + excluded.completed,
           failed = bucket.failed + excluded.failed,
           duration_sum_ms = bucket.duration_sum_ms + excluded.duration_sum_ms,
           duration_max_ms = greatest(bucket.duration_max_ms, excluded.duration_max_ms)
),
counters AS (
    UPDATE scheduled_jobs job
       SET invocations_total = job.invocations_total + per_job.total,
           invocations_completed = job.invocations_completed + per_job.completed,
           invocations_failed = job.invocations_failed + per_job.failed,
           running_since_by_pool = job.running_since_by_pool - per_job.released,
           -- A `keep` one-off is disabled when its run ends.
           enabled = job.enabled AND NOT per_job.disable,
           updated_at = CASE WHEN per_job.disable THEN now() ELSE job.updated_at END
      FROM per_job
     WHERE job.id = per_job.job_id
),
continuations AS (
    SELECT next_queue, convert_to(next_payload, 'UTF8') AS next_payload, next_priority,
           next_delay_ms
      FROM recorded WHERE next_queue IS NOT NULL
),{CONTINUATION_CTES}
SELECT input.ord, CASE WHEN history.queue_job_id IS NULL THEN NULL ELSE now() END
           AS recorded_at
  FROM input LEFT JOIN history USING (queue_job_id)
"""  # noqa: S608 (a constant from the queue engine's boundary)
# A deleted one-off takes its history with it (ON DELETE CASCADE): nothing to add. Rare
# (the end of a one-off run), so sent on its own.
RECORD_DELETING = "DELETE FROM scheduled_jobs WHERE id = %(job_id)s RETURNING now() AS recorded_at"

# The end of a run whose attempt could never read its job (`AttemptRunner.give_up`):
# the member's lock, a start marker left behind, a one-off's completion. Rare, so each is
# a plain statement of its own.
RELEASE = """
UPDATE scheduled_jobs
   SET running_since_by_pool = running_since_by_pool - %(lock_key)s::text
 WHERE id = %(job_id)s
RETURNING name, job_type, exec_timeout_ms, on_failure_url, schedule_type, one_off_after_run,
          notify_on
"""
FINISH_MARKER = """
UPDATE job_attempts
   SET state = 'failed', finalized_at = now(), error = %(error)s, last_call = %(last_call)s
 WHERE queue_job_id = %(queue_job_id)s AND state = 'running'
RETURNING queue_job_id
"""
ONE_OFF_KEEP = """
UPDATE scheduled_jobs SET enabled = false, updated_at = now() WHERE id = %(job_id)s RETURNING id
"""

# One attempt alone: the same recording without the arrays and sums (about half the
# server time, which a looping job pays on every iteration). It waits for its job row,
# which is safe: it holds no other row of a job while it waits.
_ONE_RECORDED = """
WITH job_lock AS MATERIALIZED (
    SELECT id FROM scheduled_jobs WHERE id = %(job_id)s FOR NO KEY UPDATE
),
history AS (
    UPDATE job_attempts
       SET state = %(state)s, finalized_at = now(), duration_ms = %(duration_ms)s,
           error = %(error)s, last_call = %(last_call)s
     WHERE queue_job_id = %(queue_job_id)s AND state = 'running'
       AND EXISTS (SELECT 1 FROM job_lock)
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
)"""
_RECORD_ONE = f"""{_ONE_RECORDED}{{continuation}}
UPDATE scheduled_jobs job
   SET invocations_total = job.invocations_total + 1,
       invocations_completed = job.invocations_completed + %(completed)s,
       invocations_failed = job.invocations_failed + %(failed)s{{ending}}
 WHERE job.id = %(job_id)s AND job.id IN (SELECT job_id FROM history)
RETURNING now() AS recorded_at
"""  # noqa: S608 (constants only)
_ONE_CONTINUATION = """,
continuations AS (
    SELECT %(next_queue)s::text AS next_queue, %(next_payload)s::bytea AS next_payload,
           %(next_priority)s::int AS next_priority, %(next_delay_ms)s::int AS next_delay_ms
      FROM history
),"""
_CONTINUATION_ONE = _ONE_CONTINUATION + CONTINUATION_CTES


# One attempt alone whose loop (or retry) continues at once, on a worker that can run
# the next attempt itself: the recording above, and in the same statement what the next
# iteration's `LOAD_ONE` would do. Its queue job goes in claimed by this worker (when
# the job can still run), with its start marker and the member's lock stamp, the
# recorded attempt's own queue job is settled, and the answer carries what the next
# attempt reads. A looping job's chain is then one statement and one call per
# iteration, where it was a claim, a read, a call, a recording and a settle.
# A repeat whose first run's answer was lost (nothing recorded now) finds the queue job
# that run claimed (`ADOPTED_BEFORE`), so the iteration still runs here. The final
# SELECT reads the job as the statement began, which is all an attempt reads of it: the
# recording changes only counters and the lock stamp.
_RECORD_ONE_ADOPTING = f"""{_ONE_RECORDED},
gate AS (
    SELECT job.enabled AND NOT disabled.gated AS runnable, disabled.gated
      FROM scheduled_jobs job
{_GATED}     WHERE job.id = %(job_id)s
),
continuations AS (
    SELECT %(next_queue)s::text AS next_queue, %(next_payload)s::bytea AS next_payload,
           %(next_priority)s::int AS next_priority, 0 AS next_delay_ms,
           gate.runnable AS adopted
      FROM history, gate
),{ADOPTING_CONTINUATION_CTES},{SETTLED_BY_ADOPTION},
started AS (
    INSERT INTO job_attempts (job_id, queue_job_id, state, attempt, max_attempts, trigger,
                              pool_index, loop_iteration, scheduled_at, attempted_at)
    SELECT %(job_id)s, id, 'running', %(next_attempt)s, %(next_max_attempts)s,
           %(next_trigger)s, %(next_pool_index)s, %(next_loop_iteration)s, now(), now()
      FROM queued WHERE adopted
    RETURNING queue_job_id
),
adopted_before AS (
    SELECT before.id FROM ({ADOPTED_BEFORE}) before
      JOIN job_attempts marker ON marker.queue_job_id = before.id AND marker.state = 'running'
     WHERE NOT EXISTS (SELECT 1 FROM history)
),
counters AS (
    UPDATE scheduled_jobs job
       SET invocations_total = job.invocations_total + 1,
           invocations_completed = job.invocations_completed + %(completed)s,
           invocations_failed = job.invocations_failed + %(failed)s,
           running_since_by_pool = CASE
               WHEN job.overlap_policy = 'skip' AND EXISTS (SELECT 1 FROM started)
                    AND NOT {_ONE_MEMBER_FRESH}
               THEN jsonb_set(job.running_since_by_pool, ARRAY[%(lock_key)s::text],
                              to_jsonb(now()))
               ELSE job.running_since_by_pool
           END
     WHERE job.id = %(job_id)s AND job.id IN (SELECT job_id FROM history)
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM history) THEN now() END AS recorded_at,
       coalesce((SELECT queue_job_id FROM started), (SELECT id FROM adopted_before))
           AS adopted_id,
       {", ".join(f"job.{name}" for name in _JOB_COLUMNS)},
       gate.gated,
       now() AS now,
       NULL::text AS prior_state,
       true AS started,
{_VARIABLES}  FROM scheduled_jobs job, gate
 WHERE job.id = %(job_id)s
"""  # noqa: S608 (constants only)


@cache
def record_one_sql(release: bool, disable: bool, continues: bool) -> str:
    """The single-attempt recording for one kind of ending (built once per kind)."""
    ending = ""
    if release:
        ending += ",\n       running_since_by_pool = job.running_since_by_pool - %(lock_key)s::text"
    if disable:
        ending += ",\n       enabled = false, updated_at = now()"
    continuation = _CONTINUATION_ONE if continues else ""
    return _RECORD_ONE.format(continuation=continuation, ending=ending)


@dataclass(frozen=True)
class AttemptToRecord:
    """One attempt's part of a `RECORD`; `claimant` is the worker that may run its loop's
    next iteration itself (`_RECORD_ONE_ADOPTING`), None when it may not."""

    record: AttemptRecord
    ending: Ending
    continuation: Continuation | None
    claimant: uuid.UUID | None = None

    @property
    def adopting(self) -> bool:
        follows = self.continuation
        return self.claimant is not None and follows is not None and follows.delay_ms == 0


@dataclass(frozen=True)
class Adopted:
    """A loop iteration its predecessor's recording claimed for this worker, already read
    (as `LOAD_ONE` would) and marked started: the worker runs it without a claim or a read."""

    queue_job_id: int
    payload: bytes
    loaded: LoadedJob


@dataclass(frozen=True)
class Recorded:
    """What a recording did: `at` is the database time it was written, None when nothing
    was (the job is gone, or this queue job's attempt was recorded already)."""

    at: datetime | None
    adopted: Adopted | None = None


def _record_params(batch: Sequence[AttemptToRecord]) -> str:
    return json.dumps([_recorded_item(ord, item) for ord, item in enumerate(batch, start=1)])


def _recorded_item(ord: int, item: AttemptToRecord) -> dict[str, Any]:
    record, follows = item.record, item.continuation
    return {
        "ord": ord,
        "queue_job_id": record.queue_job_id,
        "job_id": record.args.job_id,
        "state": str(record.state),
        "duration_ms": record.duration_ms,
        "error": record.error,
        "last_call": record.last_call,
        "lock_key": _lock_key(record.args.pool_index),
        "release": item.ending.release,
        "disable": item.ending.one_off is OneOffAfterRun.KEEP,
        "next_queue": None if follows is None else follows.queue,
        "next_payload": None if follows is None else follows.args.to_payload().decode(),
        "next_priority": None if follows is None else follows.args.priority,
        "next_delay_ms": None if follows is None else follows.delay_ms,
    }


def _recorded(row: Mapping[str, Any]) -> Recorded:
    return Recorded(row["recorded_at"])


async def _record_one(hot: HotConnections, item: AttemptToRecord) -> Recorded:
    record, continuation = item.record, item.continuation
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
    if item.adopting:
        assert continuation is not None
        follows = continuation.args
        params |= {
            "claimant": item.claimant,
            "next_attempt": follows.attempt,
            "next_max_attempts": follows.max_attempts,
            "next_trigger": str(follows.trigger),
            "next_pool_index": follows.pool_index,
            "next_loop_iteration": follows.loop_iteration,
        }
        row = await hot.fetch_first(_RECORD_ONE_ADOPTING, params)
        if row is None:
            return Recorded(None)
        adopted_id = row["adopted_id"]
        if adopted_id is None:
            return Recorded(row["recorded_at"])
        adopted = Adopted(int(adopted_id), params["next_payload"], _loaded(row))
        return Recorded(row["recorded_at"], adopted)
    sql = record_one_sql(
        item.ending.release, item.ending.one_off is OneOffAfterRun.KEEP, continuation is not None
    )
    row = await hot.fetch_first(sql, params)
    return Recorded(None if row is None else row["recorded_at"])


async def _send(
    single: HotConnections,
    batched: HotConnections,
    batch: Sequence[Item],
    *,
    one: Callable[[HotConnections, Item], Awaitable[Result | None]],
    sql: str,
    params: Callable[[Sequence[Item]], str],
    result: Callable[[Mapping[str, Any]], Result],
) -> list[Result | None]:
    """Send a lone item's own statement, or `sql` for the whole batch, whose rows carry
    the 1-based `ord` of their item (an item without a row gets None). A batch whose job
    rows stay busy past `BATCH_LOCK_TIMEOUT` is sent again one by one, each waiting."""
    if len(batch) == 1:
        return [await one(single, batch[0])]
    try:
        rows = await batched.fetch_all(sql, (params(batch),))
    except psycopg.errors.LockNotAvailable:
        return [await one(single, item) for item in batch]
    results: list[Result | None] = [None] * len(batch)
    for row in rows:
        results[int(row["ord"]) - 1] = result(row)
    return results


# Statements of each kind running at once, and attempts per statement at most. Two in
# flight keep Postgres busy while the next batch forms; the worker's connections follow.
STATEMENTS_IN_FLIGHT = 2
MAX_BATCH = 20
# How long a batch waits for its job rows before it falls back to one by one. Well below
# Postgres's `deadlock_timeout` (1 s by default), so a batch gives way before a deadlock
# with another transaction is even looked for.
BATCH_LOCK_TIMEOUT = 0.1  # seconds


class AttemptStatements:
    """The two statements of every attempt this worker runs, batched when they coincide.

    `max_in_flight` statements of each kind run at once; attempts arriving meanwhile go
    in the next one, up to `max_batch` of them. Batches run on connections of their own
    whose lock waits end after `BATCH_LOCK_TIMEOUT`; a lone attempt's statement waits
    for its one job row as long as it must. Call `close` when done.
    """

    def __init__(
        self,
        database_url: str,
        *,
        max_batch: int = MAX_BATCH,
        max_in_flight: int = STATEMENTS_IN_FLIGHT,
    ) -> None:
        # Lone loads, plus the rare statements (a one-off's delete, a release, the outbox).
        self.singles = HotConnections(database_url, max_size=max_in_flight + 2)
        self.batches = HotConnections(
            database_url, max_size=max_in_flight, lock_timeout=BATCH_LOCK_TIMEOUT
        )
        # Recordings commit without waiting for the disk. Safe because the start marker
        # is durable: a recording that a Postgres crash loses leaves its `running` row and
        # its queue job claimed, so the job comes back and is recorded as lost, its call
        # never made again; and the next start marker's commit makes every recording
        # before it durable too (WAL is written in order). Under load that halves the
        # waits for the disk (docs/faults.md).
        self.recording_singles = HotConnections(
            database_url, max_size=max_in_flight, synchronous_commit=False
        )
        self.recording_batches = HotConnections(
            database_url,
            max_size=max_in_flight,
            lock_timeout=BATCH_LOCK_TIMEOUT,
            synchronous_commit=False,
        )
        join(*self._pools)
        singles, batches = self.singles, self.batches
        recording_singles, recording_batches = self.recording_singles, self.recording_batches
        self.loads: StatementBatcher[AttemptToLoad, LoadedJob | None] = StatementBatcher(
            lambda batch: _send(
                singles,
                batches,
                batch,
                one=_load_one,
                sql=LOAD,
                params=_load_params,
                result=_loaded,
            ),
            max_batch=max_batch,
            max_in_flight=max_in_flight,
        )
        self.records: StatementBatcher[AttemptToRecord, Recorded | None] = StatementBatcher(
            lambda batch: _send(
                recording_singles,
                recording_batches,
                batch,
                one=_record_one,
                sql=RECORD,
                params=_record_params,
                result=_recorded,
            ),
            max_batch=max_batch,
            max_in_flight=max_in_flight,
        )

    @property
    def statements_sent(self) -> int:
        """For tests: the round-trips the hot path made."""
        return sum(pool.statements_sent for pool in self._pools)

    @property
    def _pools(self) -> tuple[HotConnections, ...]:
        return (self.singles, self.batches, self.recording_singles, self.recording_batches)

    async def close(self) -> None:
        for pool in self._pools:
            await pool.close()

    async def load(
        self, args: AttemptArgs, queue_job_id: int, due_at: datetime | None
    ) -> LoadedJob | None:
        """Read everything one attempt needs; None when the job is gone.

        Side effects, in the same statement: the member's lock is stamped (a runnable
        `skip` job) or released (a job that can no longer run), and the start marker is
        written when this queue job has no history row yet and the job can run. Raise
        `psycopg.OperationalError` when the database cannot be reached.
        """
        return await self.loads.submit(AttemptToLoad(args, queue_job_id, due_at))

    async def record(
        self,
        record: AttemptRecord,
        ending: Ending,
        continuation: Continuation | None = None,
        *,
        claimant: uuid.UUID | None = None,
    ) -> Recorded:
        """Finish the attempt's history row, add its stats and counters, apply `ending`,
        and queue `continuation` (due `delay_ms` after the recording time).

        Idempotent per queue job. `Recorded.at` is None when the job no longer exists or
        this queue job's attempt was already recorded (nothing is written or queued then).
        With a `claimant`, a continuation due at once that is recorded by itself (no other
        recording shares its statement) is claimed for that worker and returned as
        `Recorded.adopted`, which the claimant must then run.
        """
        if ending.one_off is OneOffAfterRun.DELETE:
            row = await self.singles.fetch_first(RECORD_DELETING, {"job_id": record.job_id})
            return Recorded(None if row is None else row["recorded_at"])
        item = AttemptToRecord(record, ending, continuation, claimant)
        return await self.records.submit(item) or Recorded(None)

    async def release(self, args: AttemptArgs) -> dict[str, Any] | None:
        """Give the member's lock back; return the job's name, timeout, failure URL and
        one-off settings, or None when the job is gone."""
        params = {"job_id": uuid.UUID(args.job_id), "lock_key": _lock_key(args.pool_index)}
        return await self.singles.fetch_first(RELEASE, params)

    async def finish_marker(self, queue_job_id: int, error: str, last_call: dict[str, Any]) -> None:
        """Finish this queue job's start marker, if one is left, as failed with `error`."""
        params = {"queue_job_id": queue_job_id, "error": error, "last_call": Jsonb(last_call)}
        await self.singles.fetch_first(FINISH_MARKER, params)

    async def complete_one_off(self, job_id: str, completion: OneOffAfterRun | None) -> None:
        """Apply a one-off's completion (`one_off_completion`) outside a recording."""
        if completion is None:
            return
        sql = RECORD_DELETING if completion is OneOffAfterRun.DELETE else ONE_OFF_KEEP
        await self.singles.fetch_first(sql, {"job_id": uuid.UUID(job_id)})
