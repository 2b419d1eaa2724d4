"""Call-volume series read from the one-minute `job_call_stats` buckets.

Each read is one statement, whatever the number of jobs: the jobs list polls
heartbeats on a timer, so its cost must not grow with a round-trip per job.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, Integer, Select, case, cast, func, literal, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import job_call_stats, job_events, scheduled_jobs
from zilean.errors import NotFound
from zilean.monitoring.window import MAX_SINCE_SECONDS, Window, utc_text

stats = job_call_stats.c


def _slots(
    window: Window,
    *,
    job_id: uuid.UUID | None = None,
    latency: bool = False,
    held: tuple[datetime, datetime] | None = None,
) -> Select[Any]:
    """Per (job, slot) sums of the buckets inside the window.

    `held` is the (first, through) range of settled slots a cache holds: when the window
    starts inside it, only the buckets from `through` on are read.
    """
    slot = window.slot_of(stats.bucket_start).label("slot_start")
    columns = [
        stats.job_id,
        slot,
        func.sum(stats.total).label("total"),
        func.sum(stats.completed).label("completed"),
        func.sum(stats.failed).label("failed"),
    ]
    if latency:
        columns += [
            func.sum(stats.duration_sum_ms).label("duration_sum_ms"),
            func.max(stats.duration_max_ms).label("duration_ms_max"),
        ]
    lower = window.start()
    if held is not None:
        first, through = (literal(value, DateTime(timezone=True)) for value in held)
        lower = case((lower >= first, func.greatest(lower, through)), else_=lower)
    query = select(*columns).where(stats.bucket_start >= lower).group_by(stats.job_id, slot)
    if job_id is not None:
        query = query.where(stats.job_id == job_id)
    return query


def _bucket(row: Any, *, latency: bool = False) -> dict[str, Any]:
    total = int(row.total)
    bucket = {
        "bucket_start": row.slot_start,
        "total": total,
        "completed": int(row.completed),
        "failed": int(row.failed),
        "duration_ms_avg": 0,
        "duration_ms_max": 0,
    }
    if latency and total:
        bucket["duration_ms_avg"] = round(int(row.duration_sum_ms) / total)
        bucket["duration_ms_max"] = int(row.duration_ms_max)
    return bucket


Bucket = dict[str, Any]  # a heartbeat bucket, timestamps already as text
COMPACT = (",", ":")  # JSON separators


def _bucket_list_text(buckets: list[Bucket]) -> str:
    """Buckets as JSON array items, without the brackets (joined with others later)."""
    return json.dumps(buckets, separators=COMPACT)[1:-1]


@dataclass
class _CachedWidth:
    first: datetime  # the earliest slot start held
    through: datetime  # slots starting before this are complete and held
    slots: dict[datetime, dict[uuid.UUID, Bucket]] = field(default_factory=dict)
    # Each job's held buckets of one window, already encoded: (window_start, through).
    texts_key: tuple[datetime, datetime] | None = None
    texts: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Held:
    """What one request uses of the cache, whatever other requests change meanwhile."""

    cached: _CachedWidth
    first: datetime
    through: datetime

    def covers(self, window_start: datetime) -> bool:
        return window_start >= self.first

    def texts(self, window_start: datetime) -> dict[uuid.UUID, str]:
        """Each job's held buckets in [window_start, through), encoded once per window."""
        cached, key = self.cached, (window_start, self.through)
        if cached.texts_key == key:
            return cached.texts
        per_job: dict[uuid.UUID, list[Bucket]] = {}
        for slot_start in sorted(cached.slots):  # below `through`, the slots never change
            if window_start <= slot_start < self.through:
                for job_id, bucket in cached.slots[slot_start].items():
                    per_job.setdefault(job_id, []).append(bucket)
        texts = {job_id: _bucket_list_text(buckets) for job_id, buckets in per_job.items()}
        cached.texts_key, cached.texts = key, texts
        return texts


class HeartbeatCache:
    """The folded sums of complete display slots, per slot width.

    A one-minute bucket only changes while it is the current minute (attempts record
    into the minute they finish in), so a display slot that ended more than `SETTLED`
    ago never changes again. The jobs list polls heartbeats on a timer: after the first
    request, each one reads only the minutes since the last settled slot instead of a
    whole day of buckets. Jobs are always read live, so a deleted job disappears at once.
    """

    SETTLED = timedelta(minutes=2)  # a late commit into an ended minute is long done by then
    WIDTHS = 4  # slot widths kept (the UI asks for one or two)

    def __init__(self) -> None:
        self._widths: dict[int, _CachedWidth] = {}

    def held(self, window: Window) -> _Held | None:
        """What is held for this width now; a request uses this even if others update it."""
        cached = self._widths.get(window.bucket_width_seconds)
        return None if cached is None else _Held(cached, cached.first, cached.through)

    def remember(
        self,
        window: Window,
        window_start: datetime,
        now: datetime,
        fresh: dict[datetime, dict[uuid.UUID, Bucket]],
        read_from: datetime,
    ) -> None:
        """Keep the slots of `fresh` (read from `read_from` on) that have settled by `now`."""
        width = timedelta(seconds=window.bucket_width_seconds)
        settled = now - self.SETTLED
        epoch = datetime.fromtimestamp(0, UTC)
        through = epoch + (settled - epoch) // width * width
        cached = self._widths.get(window.bucket_width_seconds)
        if cached is None or window_start < cached.first or read_from != cached.through:
            cached = _CachedWidth(first=window_start, through=read_from)
        for slot_start, counts in fresh.items():
            if cached.through <= slot_start < through:
                cached.slots[slot_start] = counts
        cached.through = max(cached.through, through)
        # Nothing older than the longest window is ever asked for again.
        oldest = now - timedelta(seconds=MAX_SINCE_SECONDS) - width
        for slot_start in [start for start in cached.slots if start < oldest]:
            del cached.slots[slot_start]
        cached.first = max(cached.first, oldest)
        self._widths.pop(window.bucket_width_seconds, None)
        self._widths[window.bucket_width_seconds] = cached
        while len(self._widths) > self.WIDTHS:
            del self._widths[next(iter(self._widths))]


async def heartbeats(
    conn: AsyncConnection, window: Window, cache: HeartbeatCache | None = None
) -> str:
    """Every job's buckets in the window, jobs in list order; `[]` for a job with none.

    One statement. With a `cache`, it reads only the buckets after the settled slots
    the cache holds for this width, and merges the two. The answer is the encoded JSON:
    a day of buckets for a thousand jobs is megabytes, so each job's held buckets are
    encoded once per window and reused.
    """
    held = cache.held(window) if cache is not None else None
    geometry = select(window.start().label("window_start"), func.now().label("now")).cte("geometry")
    slots = _slots(window, held=None if held is None else (held.first, held.through)).cte("slots")
    jobs = scheduled_jobs.c
    # The geometry row survives even with no jobs at all: the outer join keeps it.
    listed = (
        select(jobs.id, jobs.group_name, jobs.name, slots.c.slot_start, slots.c.total,
               slots.c.completed, slots.c.failed)
        .select_from(scheduled_jobs.outerjoin(slots, slots.c.job_id == jobs.id))
        .subquery("listed")
    )  # fmt: skip
    query = (
        select(geometry.c.window_start, geometry.c.now, listed)
        .select_from(geometry.outerjoin(listed, true()))
        .order_by(listed.c.group_name, listed.c.name, listed.c.id, listed.c.slot_start)
    )
    rows = (await conn.execute(query)).all()
    window_start: datetime = rows[0].window_start
    order: list[uuid.UUID] = []
    fresh: dict[datetime, dict[uuid.UUID, Bucket]] = {}
    stamps: dict[datetime, str] = {}
    for row in rows:
        if row.id is None:
            continue
        if not order or order[-1] != row.id:
            order.append(row.id)
        if row.slot_start is not None:
            stamp = stamps.get(row.slot_start) or stamps.setdefault(
                row.slot_start, utc_text(row.slot_start)
            )
            bucket = _heartbeat_bucket(stamp, int(row.total), int(row.completed), int(row.failed))
            fresh.setdefault(row.slot_start, {})[row.id] = bucket
    read_from = window_start
    settled: dict[uuid.UUID, str] = {}
    if held is not None and held.covers(window_start):
        # The statement read from `through` on (it made the same test, in SQL).
        read_from = max(window_start, held.through)
        settled = held.texts(window_start)
    if cache is not None:
        cache.remember(window, window_start, rows[0].now, fresh, read_from)
    recent: dict[uuid.UUID, list[Bucket]] = {}
    for slot_start in sorted(fresh):
        for job_id, bucket in fresh[slot_start].items():
            recent.setdefault(job_id, []).append(bucket)
    jobs_text = []
    for job_id in order:  # jobs deleted since their slots were held are not listed
        parts = [settled.get(job_id, ""), _bucket_list_text(recent.get(job_id, []))]
        buckets = ",".join(part for part in parts if part)
        jobs_text.append(f'{{"job_id":"{job_id}","buckets":[{buckets}]}}')
    head = json.dumps(window.geometry(utc_text(window_start)), separators=COMPACT)
    return f'{head[:-1]},"jobs":[{",".join(jobs_text)}]}}'


def _heartbeat_bucket(stamp: str, total: int, completed: int, failed: int) -> Bucket:
    return {
        "bucket_start": stamp,
        "total": total,
        "completed": completed,
        "failed": failed,
        "duration_ms_avg": 0,
        "duration_ms_max": 0,
    }


async def job_activity(conn: AsyncConnection, job_id: uuid.UUID, window: Window) -> dict[str, Any]:
    """One job's buckets with latency, and its lifetime counters; 404 for an unknown job."""
    geometry = select(window.start().label("window_start")).cte("geometry")
    slots = _slots(window, job_id=job_id, latency=True).cte("slots")
    jobs = scheduled_jobs.c
    query = (
        select(
            geometry.c.window_start,
            jobs.id,
            jobs.invocations_total,
            jobs.invocations_completed,
            jobs.invocations_failed,
            slots.c.slot_start,
            slots.c.total,
            slots.c.completed,
            slots.c.failed,
            slots.c.duration_sum_ms,
            slots.c.duration_ms_max,
        )
        .select_from(geometry.outerjoin(scheduled_jobs, jobs.id == job_id).outerjoin(slots, true()))
        .order_by(slots.c.slot_start)
    )
    rows = (await conn.execute(query)).all()
    first = rows[0]
    if first.id is None:
        raise NotFound("job not found")
    return {
        "job_id": job_id,
        **window.geometry(first.window_start),
        "events": await job_event_rows(conn, job_id, since=first.window_start),
        "buckets": [_bucket(row, latency=True) for row in rows if row.slot_start is not None],
        "invocations_total": first.invocations_total,
        "invocations_completed": first.invocations_completed,
        "invocations_failed": first.invocations_failed,
    }


def invocations_series(window: Window) -> Select[Any]:
    """Every job's buckets summed per slot: the worker-wide invocation series."""
    slot = window.slot_of(stats.bucket_start).label("slot_start")
    return (
        select(
            slot,
            cast(func.sum(stats.total), Integer).label("total"),
            cast(func.sum(stats.completed), Integer).label("completed"),
            cast(func.sum(stats.failed), Integer).label("failed"),
        )
        .where(stats.bucket_start >= window.start())
        .group_by(slot)
        .order_by(slot)
    )


async def worker_invocations(conn: AsyncConnection, window: Window) -> list[dict[str, Any]]:
    return [_bucket(row) for row in await conn.execute(invocations_series(window))]


EVENTS_SHOWN = 100  # the newest job events a response carries


async def job_event_rows(
    conn: AsyncConnection, job_id: uuid.UUID, *, since: Any = None, limit: int = EVENTS_SHOWN
) -> list[dict[str, Any]]:
    """The job's capped loops and skipped firings, newest first (since `since`, if given)."""
    query = select(job_events.c.kind, job_events.c.detail, job_events.c.occurred_at).where(
        job_events.c.job_id == job_id
    )
    if since is not None:
        query = query.where(job_events.c.occurred_at >= since)
    rows = await conn.execute(query.order_by(job_events.c.id.desc()).limit(limit))
    return [dict(row) for row in rows.mappings()]
