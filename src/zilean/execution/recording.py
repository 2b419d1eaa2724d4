"""The attempt's two statements: reading what it needs, and recording what it did.

`load_attempt` is one statement: the job row, whether its group chain is disabled, the
global variables it references, and the overlap lock refresh (or release, when the job
can no longer run). `record_attempt` writes the call-history row, the per-minute stats
bucket, the lifetime counters, and either the lock release or the continuation's queue
job. Both statements are built here and nowhere else, so the hot path's SQL can be read
in one place; the worker sends them on its own connections (`record_attempt_hot`,
`execution/hot_path.py`), the reaper within its own transaction (`record_attempt`).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from itertools import chain
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    RowMapping,
    Text,
    Uuid,
    and_,
    bindparam,
    case,
    cast,
    column,
    delete,
    exists,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, INTERVAL, JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Delete, Update

from zilean.db.tables import global_variables, job_attempts, job_call_stats, scheduled_jobs
from zilean.execution.enqueue import ATTEMPT_TASK, AttemptArgs, Trigger
from zilean.execution.hot_path import HotConnections, RawStatement
from zilean.registry.groups import gated_clause
from zilean.registry.kinds import OneOffAfterRun, OverlapPolicy
from zilean.schedules import ScheduleType

MAX_CALLS_LIMIT = 100
DEFAULT_CALLS_LIMIT = 20


class AttemptState(StrEnum):
    """How one attempt ended, as the call history shows it."""

    SUCCEEDED = "succeeded"  # a 2xx response (a looping job may continue)
    FAILED = "failed"  # a failure; retried while the attempt budget lasts
    CANCELLED = "cancelled"  # can never succeed as configured, or retries are off


# The columns an attempt reads: what it sends, and the settings its decisions use.
_JOB_COLUMNS = (
    "id", "name", "enabled", "group_name", "schedule_type", "one_off_after_run", "job_type",
    "http_method", "url", "query_params", "body", "headers", "auth_type", "auth_config",
    "auth_secret", "exec_timeout_ms", "pool_count", "overlap_policy",
    "loop_enabled", "loop_response_path", "loop_delay_ms", "loop_jitter_ms",
    "loop_max_iterations", "retry_enabled", "retry_mode", "retry_base_delay_ms",
    "retry_multiplier", "retry_max_delay_ms", "retry_max_attempts", "on_failure_url",
)  # fmt: skip

# Procrastinate writes a `deferred` event when a job is inserted; an attempt queued for
# "as soon as possible" has no scheduled_at of its own, so that is when it was due.
_queue_events = table("procrastinate_events", column("job_id"), column("type"), column("at"))
_queue_jobs = table(
    "procrastinate_jobs",
    column("queue_name"),
    column("task_name"),
    column("args"),
    column("scheduled_at"),
)


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
    deferred_at: datetime | None
    variables: Sequence[StoredVariable]

    @property
    def runnable(self) -> bool:
        return bool(self.row["enabled"]) and not self.gated


def _lock_key(pool_index: int) -> str:
    return str(pool_index)


@cache
def _load_statement() -> Any:
    """The attempt's read, built once with bound parameters (`load_attempt` fills them).

    Building a statement of this size costs about 2 ms of CPU, so it is built and
    compiled once (`_hot_load_statement`) and only its parameters change.
    """
    jobs = scheduled_jobs
    job_id = bindparam("job_id", type_=Uuid)
    key = bindparam("lock_key", type_=Text)
    queue_job_id = bindparam("queue_job_id", type_=BigInteger)
    locks = jobs.c.running_since_by_pool
    runnable = and_(jobs.c.enabled, not_(gated_clause(jobs.c.group_name)))
    # A runnable skip job refreshes its member's lock, so a long loop never looks stale;
    # a job that can no longer run gives the lock back at once, whatever its policy.
    lock_refresh = (
        update(jobs)
        .where(jobs.c.id == job_id)
        .where(or_(jobs.c.overlap_policy == str(OverlapPolicy.SKIP), not_(runnable)))
        .values(
            running_since_by_pool=case(
                (
                    runnable,
                    func.jsonb_set(
                        locks,
                        bindparam("lock_path", type_=ARRAY(Text)),
                        func.to_jsonb(func.now()),
                        True,
                    ),
                ),
                else_=locks.op("-")(key),
            )
        )
        .returning(jobs.c.id)
        .cte("lock_refresh")
    )
    variables = global_variables
    texts = func.concat_ws(
        " ",
        jobs.c.url,
        jobs.c.body,
        cast(jobs.c.query_params, Text),
        cast(jobs.c.headers, Text),
        cast(jobs.c.auth_config, Text),
    )
    placeholder = literal(r"\{\{\s*") + variables.c.name + literal(r"\s*\}\}")
    # The sealed auth secret may itself hold `{{name}}`: SQL cannot see inside it, so a
    # job with one loads every variable and the worker opens only those it references.
    referenced = or_(jobs.c.auth_secret.is_not(None), texts.regexp_match(placeholder))
    shape = {
        "id": variables.c.id,
        "name": variables.c.name,
        "value": variables.c.value,
        "is_secret": variables.c.is_secret,
        "sealed": func.encode(variables.c.secret_value, "base64"),
    }
    loaded_variables = (
        select(
            func.coalesce(
                func.jsonb_agg(func.jsonb_build_object(*chain.from_iterable(shape.items()))),
                cast(literal("[]"), JSONB),
            )
        )
        .where(referenced)
        .scalar_subquery()
    )
    deferred_at = (
        select(func.min(_queue_events.c.at))
        .where(
            _queue_events.c.job_id == queue_job_id,
            _queue_events.c.type == literal_column("'deferred'"),
        )
        .scalar_subquery()
    )
    return (
        select(
            *(jobs.c[name] for name in _JOB_COLUMNS),
            gated_clause(jobs.c.group_name).label("gated"),
            func.now().label("now"),
            deferred_at.label("deferred_at"),
            loaded_variables.label("variables"),
        )
        .where(jobs.c.id == job_id)
        .add_cte(lock_refresh)
    )


@cache
def _hot_load_statement() -> RawStatement:
    return RawStatement.of(_load_statement())


async def load_attempt(
    hot: HotConnections, args: AttemptArgs, queue_job_id: int | None
) -> LoadedJob | None:
    """Read everything one attempt needs in one statement; None when the job is gone.

    Side effect, in the same statement: a runnable `skip` job's lock for this pool member
    is stamped with the current time; a disabled or gated job's lock is released.
    """
    params = {
        "job_id": uuid.UUID(args.job_id),
        "lock_key": _lock_key(args.pool_index),
        "lock_path": [_lock_key(args.pool_index)],
        "queue_job_id": queue_job_id,
    }
    row = await hot.fetch_first(_hot_load_statement(), params)
    if row is None:
        return None
    return LoadedJob(
        row={name: row[name] for name in _JOB_COLUMNS},
        gated=bool(row["gated"]),
        now=row["now"],
        deferred_at=row["deferred_at"],
        variables=[_variable(item) for item in row["variables"]],
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
    queue_job_id: int | None
    state: AttemptState
    scheduled_at: datetime | None
    attempted_at: datetime
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


# The history row's columns, each bound as a parameter of the same name.
_HISTORY_COLUMNS = (
    "job_id", "queue_job_id", "state", "attempt", "max_attempts", "trigger", "pool_index",
    "loop_iteration", "scheduled_at", "attempted_at", "duration_ms", "error", "last_call",
)  # fmt: skip


def _history_types() -> list[tuple[str, Any]]:
    return [(name, job_attempts.c[name].type) for name in _HISTORY_COLUMNS]


@cache
def _record_statement(
    release: bool, one_off: OneOffAfterRun | None, continues: bool = False
) -> Update | Delete:
    """The recording statement for one kind of ending, built once (see `_record_params`).

    With `continues`, the same statement also queues the continuation (the `next_*`
    parameters), but only if it recorded the attempt: a repeated recording queues
    nothing twice. Inserting into Procrastinate's table directly, as its defer function
    does, keeps the whole step one statement and one round-trip.
    """
    jobs = scheduled_jobs
    job_id = bindparam("job_id", type_=Uuid)
    if one_off is OneOffAfterRun.DELETE:
        # The row's history goes with it (ON DELETE CASCADE), so there is nothing to add.
        return delete(jobs).where(jobs.c.id == job_id).returning(func.now().label("recorded_at"))
    # The history insert selects from the job row, so a job deleted mid-attempt records
    # nothing; the stats and counters follow the history row.
    history = (
        insert(job_attempts)
        .from_select(
            [*_HISTORY_COLUMNS, "finalized_at"],
            select(
                *(
                    cast(
                        bindparam(name, type_=job_attempts.c[name].type), job_attempts.c[name].type
                    )
                    for name in _HISTORY_COLUMNS
                ),
                func.now(),
            ).where(jobs.c.id == job_id),
        )
        # One history row per queue job: a repeated recording (a retry after a lost
        # connection, or the reaper racing the worker) inserts nothing, and everything
        # below selects from what this inserted, so it changes nothing either.
        .on_conflict_do_nothing(
            index_elements=[job_attempts.c.queue_job_id],
            index_where=job_attempts.c.queue_job_id.isnot(None),
        )
        .returning(job_attempts.c.job_id)
        .cte("history")
    )
    completed = bindparam("completed", type_=Integer)
    failed = bindparam("failed", type_=Integer)
    duration = bindparam("duration", type_=Integer)
    bucket = func.date_trunc("minute", func.now())
    stats_insert = insert(job_call_stats).from_select(
        ["job_id", "bucket_start", "total", "completed", "failed", "duration_sum_ms",
         "duration_max_ms"],
        select(history.c.job_id, bucket, literal(1), completed, failed, duration, duration),
    )  # fmt: skip
    stats = stats_insert.on_conflict_do_update(
        index_elements=[job_call_stats.c.job_id, job_call_stats.c.bucket_start],
        set_={
            "total": job_call_stats.c.total + stats_insert.excluded.total,
            "completed": job_call_stats.c.completed + stats_insert.excluded.completed,
            "failed": job_call_stats.c.failed + stats_insert.excluded.failed,
            "duration_sum_ms": job_call_stats.c.duration_sum_ms
            + stats_insert.excluded.duration_sum_ms,
            "duration_max_ms": func.greatest(
                job_call_stats.c.duration_max_ms, stats_insert.excluded.duration_max_ms
            ),
        },
    ).cte("stats")
    row_values: dict[str, Any] = {
        "invocations_total": jobs.c.invocations_total + 1,
        "invocations_completed": jobs.c.invocations_completed + completed,
        "invocations_failed": jobs.c.invocations_failed + failed,
    }
    row_values.update(_ending_values(Ending(release=release, one_off=one_off)))
    ctes = [history, stats]
    if continues:
        delay_ms = bindparam("next_delay_ms", type_=Integer)
        delay = cast(func.concat(delay_ms, literal(" milliseconds")), INTERVAL)
        ctes.append(
            insert(_queue_jobs)
            .from_select(
                ["queue_name", "task_name", "args", "scheduled_at"],
                select(
                    bindparam("next_queue", type_=Text),
                    literal(ATTEMPT_TASK),
                    cast(bindparam("next_args", type_=Text), JSONB),
                    func.now() + delay,
                ).where(exists(select(history.c.job_id))),
            )
            .cte("queued")
        )
    return (
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.id.in_(select(history.c.job_id)))
        .values(**row_values)
        .returning(func.now().label("recorded_at"))
        .add_cte(*ctes)
    )


def _record_params(record: AttemptRecord) -> dict[str, Any]:
    succeeded = record.state is AttemptState.SUCCEEDED
    args = record.args
    return {
        "job_id": record.job_id,
        "queue_job_id": record.queue_job_id,
        "state": str(record.state),
        "attempt": args.attempt,
        "max_attempts": args.max_attempts,
        "trigger": args.trigger,
        "pool_index": args.pool_index,
        "loop_iteration": args.loop_iteration,
        "scheduled_at": record.scheduled_at,
        "attempted_at": record.attempted_at,
        "duration_ms": record.duration_ms,
        "error": record.error,
        "last_call": record.last_call,
        "completed": int(succeeded),
        "failed": int(not succeeded),
        "duration": record.duration_ms or 0,
        "lock_key": _lock_key(args.pool_index),
    }


def _ending_values(ending: Ending) -> dict[str, Any]:
    """The row changes an ending makes; the lock key is the `lock_key` parameter."""
    values: dict[str, Any] = {}
    if ending.release:
        key = bindparam("lock_key", type_=Text)
        values["running_since_by_pool"] = scheduled_jobs.c.running_since_by_pool.op("-")(key)
    if ending.one_off is OneOffAfterRun.KEEP:
        values.update(enabled=False, updated_at=func.now())
    return values


def _recording(
    record: AttemptRecord, ending: Ending, continuation: Continuation | None
) -> tuple[tuple[bool, OneOffAfterRun | None, bool], dict[str, Any]]:
    """Which recording statement applies (its variant) and its parameters."""
    variant = (ending.release, ending.one_off, continuation is not None)
    if ending.one_off is OneOffAfterRun.DELETE:
        return variant, {"job_id": record.job_id}
    params = _record_params(record)
    if continuation is not None:
        params |= {
            "next_queue": continuation.queue,
            "next_args": continuation.args.to_json(),
            "next_delay_ms": continuation.delay_ms,
        }
    return variant, params


async def record_attempt(
    conn: AsyncConnection,
    record: AttemptRecord,
    ending: Ending,
    continuation: Continuation | None = None,
) -> datetime | None:
    """Write the attempt's history row, stats bucket and counters, apply `ending`, and
    queue `continuation` (scheduled from the recording time).

    One statement, idempotent per queue job. Return the database time it was recorded at,
    or None when the job no longer exists or this queue job's attempt was already
    recorded (nothing is written or queued then). The worker sends the same statement on
    its own connections (`record_attempt_hot`); this form joins the caller's transaction.
    """
    variant, params = _recording(record, ending, continuation)
    recorded: datetime | None = (
        await conn.execute(_record_statement(*variant), params)
    ).scalar_one_or_none()
    return recorded


@cache
def _hot_record_statement(
    release: bool, one_off: OneOffAfterRun | None, continues: bool
) -> RawStatement:
    return RawStatement.of(_record_statement(release, one_off, continues))


async def record_attempt_hot(
    hot: HotConnections,
    record: AttemptRecord,
    ending: Ending,
    continuation: Continuation | None = None,
) -> datetime | None:
    """`record_attempt` on the worker's hot-path connections (autocommit)."""
    variant, params = _recording(record, ending, continuation)
    row = await hot.fetch_first(_hot_record_statement(*variant), params)
    return None if row is None else row["recorded_at"]


async def end_run(
    conn: AsyncConnection, job_id: uuid.UUID, pool_index: int, ending: Ending
) -> None:
    """Apply only `ending` (no history, no counters): the fallback when recording failed."""
    if ending.one_off is OneOffAfterRun.DELETE:
        await conn.execute(delete(scheduled_jobs).where(scheduled_jobs.c.id == job_id))
        return
    values = _ending_values(ending)
    if values:
        await conn.execute(
            update(scheduled_jobs).where(scheduled_jobs.c.id == job_id).values(**values),
            {"lock_key": _lock_key(pool_index)},
        )


def call_entry(row: RowMapping) -> dict[str, Any]:
    """Return one attempt as `/api/jobs/{id}/calls` shows it.

    `job_id` is the queue job's id, as the spec names it; the registry id is the path.
    """
    return {
        "job_id": row["queue_job_id"],
        "state": row["state"],
        "attempt": row["attempt"],
        "max_attempts": row["max_attempts"],
        "trigger": row["trigger"],
        "scheduled_at": row["scheduled_at"],
        "attempted_at": row["attempted_at"],
        "finalized_at": row["finalized_at"],
        "duration_ms": row["duration_ms"],
        "last_error": row["error"],
        "pool_index": row["pool_index"],
        "loop_iteration": row["loop_iteration"],
        "last_call": row["last_call"],
    }


async def recent_calls(
    conn: AsyncConnection, job_id: uuid.UUID, limit: int
) -> list[dict[str, Any]]:
    """Return the job's newest `limit` attempts, newest first."""
    rows = await conn.execute(
        select(job_attempts)
        .where(job_attempts.c.job_id == job_id)
        .order_by(job_attempts.c.id.desc())
        .limit(limit)
    )
    return [call_entry(row) for row in rows.mappings()]
