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
import json
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import Boolean, DateTime, Text, Uuid, and_, cast, column, func, literal, or_, select
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncEngine

from zilean.db.tables import job_firings, registry_version, scheduled_jobs
from zilean.execution.firing import FIRING_COLUMNS, FiringPlan, apply_firings, plan_firing
from zilean.execution.payload import Trigger
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
FIRE_BATCH = 1000  # due entries taken per `fire_due` call
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


def _claim_statement(entries: Sequence[Entry], stored_zones: Mapping[uuid.UUID, str]) -> Any:
    """Claim many firings at once; return the locked rows of those this caller claimed.

    For each entry, the guard row is inserted only if the job may fire that schedule
    right now: a conflict means another scheduler already fired the instant; no source
    row means the job was disabled, gated, deleted or rescheduled since the entry was
    built. Job rows are locked FOR NO KEY UPDATE first (in id order, so two batches cannot
    deadlock; attempts' history rows, whose foreign keys only share the key, need not
    wait), before the guards' foreign keys take their weaker lock, so a firing never
    upgrades a row lock another writer may be queued behind.
    """
    due = [
        {
            "job_id": str(entry.job_id),
            "scheduled_for": entry.next_fire.isoformat() if entry.next_fire else None,
            "schedule_type": entry.key.schedule_type,
            "expression": entry.key.expression,
            "zone": stored_zones.get(entry.job_id, ""),
            "wall_clock": entry.key.wall_clock,
        }
        for entry in entries
    ]
    rows = (
        func.jsonb_to_recordset(cast(literal(json.dumps(due)), JSONB))
        .table_valued(
            column("job_id", Uuid),
            column("scheduled_for", DateTime(timezone=True)),
            column("schedule_type", Text),
            column("expression", Text),
            column("zone", Text),
            column("wall_clock", Boolean),
        )
        .render_derived("due", with_types=True)
    )
    jobs = scheduled_jobs.c
    eligible = (
        select(*FIRING_COLUMNS, rows.c.scheduled_for)
        .join_from(scheduled_jobs, rows, rows.c.job_id == jobs.id)
        .where(
            jobs.enabled,
            jobs.schedule_type == rows.c.schedule_type,
            jobs.cron_expression == rows.c.expression,
            # An elapsed-time interval ignores the zone, so a zone edit leaves it valid.
            or_(~rows.c.wall_clock, jobs.timezone == rows.c.zone),
            ~gated_clause(jobs.group_name),
        )
        .order_by(jobs.id)
        .with_for_update(of=scheduled_jobs, key_share=True)
        .cte("eligible")
    )
    claimed = (
        insert(job_firings)
        .from_select(["job_id", "scheduled_for"], select(eligible.c.id, eligible.c.scheduled_for))
        .on_conflict_do_nothing()
        .returning(job_firings.c.job_id)
        .cte("claimed")
    )
    return select(eligible, func.now().label("now")).join_from(
        eligible, claimed, claimed.c.job_id == eligible.c.id
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
        # The stored timezone column behind each entry (empty: the process zone).
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

        An `@every` interval starts now. A wall-clock cron entry starts now, except on a
        scheduler's first reconcile, which looks back up to `catch_up` (never before the
        row's last edit, never after now) for an instant missed while no scheduler ran.
        """
        if not first or not key.wall_clock or not self._catch_up:
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

        The entries are split over `FIRE_CONCURRENCY` transactions, each claiming and
        firing its share in three statements (claim, locks, queue inserts). When one
        fails, its entries are fired one by one, so a single bad row cannot hold back the
        others; an entry whose own firing fails is retried after `FIRE_RETRY_DELAY` for
        the same instant. Afterwards each entry advances to its next instant. A return
        value of `limit` means more may be due: call again.
        """
        now = now or _utcnow()
        due = self._queue.pop_due(now, limit)
        if not due:
            return 0
        next_fires = NextFires()
        size = -(-len(due) // FIRE_CONCURRENCY)  # ceiling division
        chunks = [due[start : start + size] for start in range(0, len(due), size)]
        await asyncio.gather(*(self._fire_chunk(chunk, now, next_fires) for chunk in chunks))
        return len(due)

    async def _fire_chunk(self, entries: list[Entry], now: datetime, next_fires: NextFires) -> None:
        try:
            fired = await self._claim_and_fire(entries)
        except Exception:
            if len(entries) > 1:
                log.warning(
                    "batch firing failed; firing its entries one by one",
                    action="scheduler.batch_failed",
                    entries=len(entries),
                )
                for entry in entries:
                    await self._fire_chunk([entry], now, next_fires)
                return
            [entry] = entries
            assert entry.next_fire is not None
            log.exception(
                "firing failed; it will be retried",
                action="scheduler.fire_failed",
                job_id=str(entry.job_id),
                scheduled_for=entry.next_fire.isoformat(),
            )
            if self._entries.get(entry.job_id) is entry:
                self._queue.put(entry, now + FIRE_RETRY_DELAY)
            return
        log.debug(
            "entries fired",
            action="scheduler.fired",
            fired=len(fired),
            skipped=len(entries) - len(fired),  # fired elsewhere, or the job changed
            queued=sum(len(plan.members) for plan in fired.values()),
        )
        for entry in entries:
            if self._entries.get(entry.job_id) is not entry:
                continue  # replaced or removed while firing: the new state already holds
            scheduled_for = entry.next_fire
            assert scheduled_for is not None  # only entries with a next time are queued
            entry.next_fire = next_fires.after(entry.key, entry.schedule, max(now, scheduled_for))
            self._queue.put(entry, entry.next_fire)

    async def _claim_and_fire(self, entries: list[Entry]) -> dict[uuid.UUID, FiringPlan]:
        """One transaction: claim the entries' instants, take locks, queue the attempts."""
        async with self._engine.begin() as conn:
            claimed = await conn.execute(_claim_statement(entries, self._stored_zone))
            plans = [
                plan_firing(dict(row), row["now"], trigger=Trigger.SCHEDULE)
                for row in claimed.mappings()
            ]
            await apply_firings(conn, plans)
        return {plan.job_id: plan for plan in plans}
