"""The scheduler's two steps: reconcile the entries with the registry, and fire due entries.

Both take an optional `now` so tests can pin the clock; the loop in `loop.py` calls
them. One `Scheduler` lives for one leadership term: a new leader starts from an empty
map and a full reconcile.

Guarantees:
* A cron firing is identified by (job, scheduled instant). Its `job_firings` row and its
  queue jobs commit in one transaction, and the row's primary key refuses a second
  insert, so two schedulers (two cores, or a leader and its successor) never both fire
  the same instant.
* A firing queues nothing unless the row, at that moment, is enabled, not gated, and
  still holds the schedule the entry was built from: a stale entry never fires.
* The worker re-checks `enabled` and the group chain anyway, so disabling a job also
  stops work already queued.

Non-guarantees:
* A rate (`@every`) interval is measured from when this scheduler added the entry or
  last fired it, so after a change of leader the new leader starts the interval afresh,
  and the duplicate guard cannot match the two leaders' instants. Only the leadership
  lock keeps rate jobs from firing twice.
* Missed cron instants are not replayed, except those within `CATCH_UP` before a
  scheduler starts (covering a restart or a change of leader). After a firing, the next
  instant is the first one after the later of the scheduled time and now: a scheduler
  that fell behind fires an overdue entry once, not once per missed instant.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import DateTime, and_, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import job_firings, registry_version, scheduled_jobs
from zilean.execution.enqueue import Trigger
from zilean.execution.firing import fire
from zilean.registry.groups import gated_clause
from zilean.scheduler.entries import (
    DueQueue,
    Entry,
    EntryKey,
    NextFires,
    build_schedule,
    entry_key,
)
from zilean.schedules import Schedule, ScheduleError, ScheduleType

log = structlog.get_logger(__name__)

SCHEDULED_TYPES = (ScheduleType.CRON.value, ScheduleType.RATE.value)
# How far back a starting scheduler looks for a cron instant it may have missed while no
# scheduler led; never earlier than the row's last edit. Instants already fired by the
# previous leader are refused by job_firings.
CATCH_UP = timedelta(seconds=60)
FIRE_BATCH = 200  # due entries taken per `fire_due` call
FIRE_CONCURRENCY = 4  # firing transactions in flight at once (each holds a pool connection)
FIRE_RETRY_DELAY = timedelta(seconds=5)  # before a firing that raised is tried again
# Notified job ids beyond this many are applied by a full reconcile instead.
TARGETED_RECONCILE_LIMIT = 500


@dataclass(frozen=True)
class ReconcileResult:
    """What one reconcile changed."""

    added: int = 0
    removed: int = 0
    invalid: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.invalid)


@dataclass(frozen=True)
class StoredSchedule:
    """The columns of one row the scheduler reads."""

    job_id: uuid.UUID
    schedule_type: str
    cron_expression: str
    timezone: str
    updated_at: datetime


def _utcnow() -> datetime:
    return datetime.now(UTC)


_SCHEDULE_COLUMNS = (
    scheduled_jobs.c.id,
    scheduled_jobs.c.schedule_type,
    scheduled_jobs.c.cron_expression,
    scheduled_jobs.c.timezone,
    scheduled_jobs.c.updated_at,
)


def _schedulable() -> Any:
    """The rows that should have entries: enabled, not gated, cron or rate."""
    return and_(
        scheduled_jobs.c.enabled,
        scheduled_jobs.c.schedule_type.in_(SCHEDULED_TYPES),
        ~gated_clause(scheduled_jobs.c.group_name),
    )


def _load_query(job_ids: Collection[uuid.UUID]) -> Any:
    return select(*_SCHEDULE_COLUMNS).where(_schedulable(), scheduled_jobs.c.id.in_(list(job_ids)))


def _load_all_query() -> Any:
    """Every schedulable row with the registry version they make up, in one snapshot.

    The outer join keeps the version row when no job is schedulable.
    """
    return select(registry_version.c.version, *_SCHEDULE_COLUMNS).select_from(
        registry_version.outerjoin(scheduled_jobs, _schedulable())
    )


def _claim_statement(entry: Entry, scheduled_for: datetime, stored_timezone: str) -> Any:
    """Insert the firing's guard row, only if the job may fire that schedule right now.

    Returns a row only when this caller inserted it: a conflict means another scheduler
    already fired this instant; no source row means the job was disabled, gated,
    deleted or rescheduled since the entry was built. The job row is locked FOR UPDATE
    first, before the guard's foreign key takes its weaker lock, so the firing never
    upgrades a row lock another writer may be queued behind.
    """
    jobs = scheduled_jobs.c
    eligible = select(jobs.id).where(
        jobs.id == entry.job_id,
        jobs.enabled,
        jobs.schedule_type == entry.key.schedule_type,
        jobs.cron_expression == entry.key.expression,
        ~gated_clause(jobs.group_name),
    )
    if entry.key.schedule_type == ScheduleType.CRON:
        eligible = eligible.where(jobs.timezone == stored_timezone)
    job = eligible.with_for_update(of=scheduled_jobs).cte("job")
    return (
        insert(job_firings)
        .from_select(
            ["job_id", "scheduled_for"],
            select(job.c.id, literal(scheduled_for, DateTime(timezone=True))),
        )
        .on_conflict_do_nothing()
        .returning(job_firings.c.job_id)
    )


class Scheduler:
    """The in-memory map job id -> entry, reconciled against `scheduled_jobs`.

    Not safe for concurrent `reconcile_once` calls; the loop runs its steps one at a
    time. `fire_due` may overlap a reconcile only in the sense that an entry replaced
    while its firing is in flight is not advanced afterwards.
    """

    def __init__(
        self, engine: AsyncEngine, default_zone: str, *, catch_up: timedelta = CATCH_UP
    ) -> None:
        self._engine = engine
        self._default_zone = default_zone
        self._catch_up = catch_up
        self._entries: dict[uuid.UUID, Entry] = {}
        # The stored timezone column behind each cron entry (empty: the process zone).
        self._stored_zone: dict[uuid.UUID, str] = {}
        # Rows whose schedule failed to parse, by the key that failed: logged once each.
        self._invalid: dict[uuid.UUID, EntryKey] = {}
        self._queue = DueQueue()
        self._started = False
        # The registry version the entries reflect; None until the first full reconcile.
        self._version: int | None = None

    @property
    def entries(self) -> Mapping[uuid.UUID, Entry]:
        return self._entries

    @property
    def invalid(self) -> Mapping[uuid.UUID, EntryKey]:
        return self._invalid

    def next_due(self) -> datetime | None:
        """Return when the earliest entry is due, or None when none will ever be."""
        timestamp = self._queue.next_due()
        return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)

    # Reconcile

    async def reconcile_once(
        self, now: datetime | None = None, *, job_ids: Collection[uuid.UUID] | None = None
    ) -> ReconcileResult:
        """Bring the entries in line with the registry.

        With `job_ids`, only those rows are re-read and only their entries can change
        (the reaction to a NOTIFY naming them). Otherwise the registry version is read
        first, and every row is re-read only when it moved since the last full pass.
        """
        now = now or _utcnow()
        async with self._engine.connect() as conn:
            if job_ids is not None:
                result = await conn.execute(_load_query(job_ids))
                rows = [StoredSchedule(*row) for row in result.all()]
                return self.apply(rows, now, scope=job_ids)
            if self._version is not None:
                current = await conn.scalar(select(registry_version.c.version))
                if current == self._version:
                    return ReconcileResult()
            result = await conn.execute(_load_all_query())
            loaded = result.all()
        self._version = loaded[0].version if loaded else None
        rows = [StoredSchedule(*row[1:]) for row in loaded if row.id is not None]
        return self.apply(rows, now)

    def apply(
        self,
        rows: Iterable[StoredSchedule],
        now: datetime,
        *,
        scope: Collection[uuid.UUID] | None = None,
    ) -> ReconcileResult:
        """Apply the reconcile rules to `rows`, the schedulable rows within `scope`.

        Unchanged key: the entry and its next time stay. New or changed key: a fresh
        entry. Unparseable: no entry, logged once per key. An entry in scope (every
        entry when `scope` is None) whose row is not among `rows` is removed.
        """
        first = not self._started
        self._started = True
        added = invalid = 0
        seen: set[uuid.UUID] = set()
        compiled: dict[EntryKey, Schedule] = {}
        next_fires = NextFires()
        for row in rows:
            seen.add(row.job_id)
            key = entry_key(
                row.schedule_type, row.cron_expression, row.timezone, self._default_zone
            )
            current = self._entries.get(row.job_id)
            if current is not None and current.key == key:
                # The same zone may now be spelled out rather than left to the default.
                self._stored_zone[row.job_id] = row.timezone
                continue
            if self._invalid.get(row.job_id) == key:
                continue
            try:
                schedule = compiled.get(key) or build_schedule(key)
            except ScheduleError as exc:
                self._remove(row.job_id)
                self._invalid[row.job_id] = key
                invalid += 1
                log.warning(
                    "skipping a job whose schedule is invalid",
                    action="scheduler.invalid_schedule",
                    job_id=str(row.job_id),
                    error=str(exc),
                )
                continue
            compiled[key] = schedule
            self._invalid.pop(row.job_id, None)
            start = self._start_after(row, key, now, first)
            self._add(row, key, schedule, next_fires.after(key, schedule, start))
            added += 1
        candidates = list(self._entries) + list(self._invalid) if scope is None else scope
        removed = 0
        for job_id in set(candidates) - seen:
            self._invalid.pop(job_id, None)
            removed += self._remove(job_id)
        if len(self._queue) > 2 * len(self._entries) + 64:
            self._queue.compact(self._entries.values())
        result = ReconcileResult(added=added, removed=removed, invalid=invalid)
        if result.changed:
            log.info(
                "scheduler reconciled",
                action="scheduler.reconciled",
                added=added,
                removed=removed,
                invalid=invalid,
                entries=len(self._entries),
            )
        return result

    def _start_after(
        self, row: StoredSchedule, key: EntryKey, now: datetime, first: bool
    ) -> datetime:
        """Return the instant a new entry's first fire time must follow.

        A rate interval starts now. A cron entry starts now, except on a scheduler's first
        reconcile, which looks back up to `catch_up` (never before the row's last edit,
        never after now) for an instant missed while no scheduler was running.
        """
        if not first or key.schedule_type != ScheduleType.CRON or not self._catch_up:
            return now
        return min(max(row.updated_at, now - self._catch_up), now)

    def _add(
        self, row: StoredSchedule, key: EntryKey, schedule: Schedule, next_fire: datetime | None
    ) -> None:
        self._remove(row.job_id)
        entry = Entry(job_id=row.job_id, key=key, schedule=schedule, next_fire=next_fire)
        self._entries[row.job_id] = entry
        self._stored_zone[row.job_id] = row.timezone
        self._queue.put(entry, next_fire)

    def _remove(self, job_id: uuid.UUID) -> int:
        entry = self._entries.pop(job_id, None)
        self._stored_zone.pop(job_id, None)
        if entry is None:
            return 0
        self._queue.drop(entry)
        return 1

    # Fire

    async def fire_due(self, now: datetime | None = None, *, limit: int = FIRE_BATCH) -> int:
        """Fire up to `limit` entries due at `now`; return how many were taken.

        Each firing is one transaction (guard row, overlap locks, queue jobs). Afterwards
        the entry advances to its next instant; a firing that raised is retried after
        `FIRE_RETRY_DELAY` for the same instant. A return value of `limit` means more
        may be due: call again (the loop yields to other tasks in between).
        """
        now = now or _utcnow()
        due = self._queue.pop_due(now, limit)
        if not due:
            return 0
        slots = asyncio.Semaphore(FIRE_CONCURRENCY)
        next_fires = NextFires()

        async def one(entry: Entry) -> None:
            async with slots:
                await self._fire_entry(entry, now, next_fires)

        await asyncio.gather(*(one(entry) for entry in due))
        return len(due)

    async def _fire_entry(self, entry: Entry, now: datetime, next_fires: NextFires) -> None:
        scheduled_for = entry.next_fire
        assert scheduled_for is not None  # only entries with a next time are queued
        stored_timezone = self._stored_zone.get(entry.job_id, "")
        try:
            async with self._engine.begin() as conn:
                claimed = await conn.execute(
                    _claim_statement(entry, scheduled_for, stored_timezone)
                )
                firing = None
                if claimed.first() is not None:
                    firing = await fire(conn, entry.job_id, trigger=Trigger.SCHEDULE)
        except Exception:
            log.exception(
                "firing failed; it will be retried",
                action="scheduler.fire_failed",
                job_id=str(entry.job_id),
                scheduled_for=scheduled_for.isoformat(),
            )
            if self._entries.get(entry.job_id) is entry:
                self._queue.put(entry, now + FIRE_RETRY_DELAY)
            return
        if firing is None:
            log.debug(
                "firing skipped: already fired elsewhere, or the job changed",
                action="scheduler.fire_skipped",
                job_id=str(entry.job_id),
                scheduled_for=scheduled_for.isoformat(),
            )
        else:
            log.debug(
                "job fired",
                action="scheduler.fired",
                job_id=str(entry.job_id),
                scheduled_for=scheduled_for.isoformat(),
                queued=len(firing.queue_job_ids),
                busy_members=firing.busy_members,
            )
        if self._entries.get(entry.job_id) is not entry:
            return  # replaced or removed while firing: the new state already holds
        entry.next_fire = next_fires.after(entry.key, entry.schedule, max(now, scheduled_for))
        self._queue.put(entry, entry.next_fire)
