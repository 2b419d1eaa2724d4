"""Call-volume series read from the one-minute `job_call_stats` buckets.

Each read is one statement, whatever the number of jobs: the jobs list polls
heartbeats on a timer, so its cost must not grow with a round-trip per job.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Integer, Select, cast, func, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.db.tables import job_call_stats, scheduled_jobs
from zilean.errors import NotFound
from zilean.monitoring.window import Window

stats = job_call_stats.c


def _slots(
    window: Window, *, job_id: uuid.UUID | None = None, latency: bool = False
) -> Select[Any]:
    """Per (job, slot) sums of the buckets inside the window."""
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
    query = (
        select(*columns).where(stats.bucket_start >= window.start()).group_by(stats.job_id, slot)
    )
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


async def heartbeats(conn: AsyncConnection, window: Window) -> dict[str, Any]:
    """Every job's buckets in the window, jobs in list order; `[]` for a job with none."""
    geometry = select(window.start().label("window_start")).cte("geometry")
    slots = _slots(window).cte("slots")
    jobs = scheduled_jobs.c
    # The geometry row survives even with no jobs at all: the outer join keeps it.
    listed = (
        select(jobs.id, jobs.group_name, jobs.name, slots.c.slot_start, slots.c.total,
               slots.c.completed, slots.c.failed)
        .select_from(scheduled_jobs.outerjoin(slots, slots.c.job_id == jobs.id))
        .subquery("listed")
    )  # fmt: skip
    query = (
        select(geometry.c.window_start, listed)
        .select_from(geometry.outerjoin(listed, true()))
        .order_by(listed.c.group_name, listed.c.name, listed.c.id, listed.c.slot_start)
    )
    rows = (await conn.execute(query)).all()
    entries: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for row in rows:
        if row.id is None:
            continue
        buckets = entries.setdefault(row.id, [])
        if row.slot_start is not None:
            buckets.append(_bucket(row))
    return {
        **window.geometry(rows[0].window_start),
        "jobs": [{"job_id": job_id, "buckets": buckets} for job_id, buckets in entries.items()],
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
