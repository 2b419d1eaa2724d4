"""Reading the stored process samples: the latest one, a windowed series, and liveness."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import ARRAY, Text, func, literal, select, true
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.config import ScriptRuntime, Service, script_worker_service
from zilean.db.tables import worker_metrics
from zilean.errors import InvalidInput
from zilean.monitoring.window import Window

log = structlog.get_logger(__name__)

# Health lists services in this order: the workers first, as the spec's table does.
SERVICES: tuple[Service, ...] = (
    Service.WORKER,
    *(script_worker_service(runtime) for runtime in ScriptRuntime),
    Service.CORE,
    Service.UI,
    Service.MCP,
    Service.WEBHOOK,
)
ALL = "all"
LIVE_WITHIN = timedelta(minutes=2)  # two sampling intervals: one missed tick is tolerated
SAMPLE_FIELDS = (
    "cpu_percent",
    "rss_bytes",
    "anon_rss_bytes",
    "python_allocated_blocks",
    "threads",
    "asyncio_tasks",
    "open_fds",
)
_SERVICE_MESSAGE = "service: must be one of " + ", ".join(str(s) for s in SERVICES)

metrics = worker_metrics.c


def parse_service(raw: str | None, *, allow_all: bool = False) -> Service | None:
    """The `service` query parameter: empty means `worker`; `all` (where allowed) is None."""
    text = (raw or "").strip()
    if not text:
        return Service.WORKER
    if allow_all and text == ALL:
        return None
    try:
        return Service(text)
    except ValueError:
        accepted = f"{_SERVICE_MESSAGE} or {ALL}" if allow_all else _SERVICE_MESSAGE
        raise InvalidInput(accepted) from None


async def latest_sample(conn: AsyncConnection, service: Service) -> dict[str, Any] | None:
    """The service's newest sample; `process_services` lists every label sharing it."""
    row = (
        await conn.execute(
            select(
                metrics.service, metrics.sampled_at, metrics.hostname, metrics.pid,
                *(metrics[name] for name in SAMPLE_FIELDS), metrics.process_services,
            )
            .where(metrics.service == str(service))
            .order_by(metrics.sampled_at.desc(), metrics.id.desc())
            .limit(1)
        )
    ).first()  # fmt: skip
    return dict(row._mapping) if row is not None else None


async def sample_history(
    conn: AsyncConnection, window: Window, services: tuple[Service, ...]
) -> tuple[datetime, dict[Service, list[dict[str, Any]]]]:
    """Per service, the samples averaged per display slot (CPU and memory also at peak)."""
    geometry = select(window.start().label("window_start")).cte("geometry")
    slot = window.slot_of(metrics.sampled_at).label("slot_start")
    slots = (
        select(
            metrics.service,
            slot,
            func.count().label("sample_count"),
            *(func.avg(metrics[name]).label(name) for name in SAMPLE_FIELDS),
            func.max(metrics.cpu_percent).label("cpu_percent_max"),
            func.max(metrics.rss_bytes).label("rss_bytes_max"),
        )
        .where(
            metrics.sampled_at >= window.start(),
            metrics.service.in_([str(s) for s in services]),
        )
        .group_by(metrics.service, slot)
        .subquery("slots")
    )
    # The outer join keeps the geometry row even when there is no sample at all.
    query = (
        select(geometry.c.window_start, slots)
        .select_from(geometry.outerjoin(slots, true()))
        .order_by(slots.c.service, slots.c.slot_start)
    )
    rows = (await conn.execute(query)).all()
    series: dict[Service, list[dict[str, Any]]] = {service: [] for service in services}
    for row in rows:
        if row.service is not None:
            series[Service(row.service)].append(_slot(row))
    return rows[0].window_start, series


def _slot(row: Any) -> dict[str, Any]:
    return {
        "bucket_start": row.slot_start,
        "sample_count": int(row.sample_count),
        "cpu_percent": round(float(row.cpu_percent), 3),
        "cpu_percent_max": round(float(row.cpu_percent_max), 3),
        "rss_bytes": round(float(row.rss_bytes)),
        "rss_bytes_max": round(float(row.rss_bytes_max)),
        # NULL in a slot holding only samples from before revision 0010.
        "anon_rss_bytes": None if row.anon_rss_bytes is None else round(float(row.anon_rss_bytes)),
        "python_allocated_blocks": round(float(row.python_allocated_blocks)),
        "threads": round(float(row.threads), 1),
        "asyncio_tasks": round(float(row.asyncio_tasks), 1),
        "open_fds": round(float(row.open_fds), 1),
    }


def _last_sampled(services: tuple[Service, ...]) -> Any:
    """SQL: each service's newest sample time (NULL when never sampled), one index probe each."""
    labels = literal([str(s) for s in services], ARRAY(Text))
    names = func.unnest(labels).table_valued("service").render_derived("names")
    newest = (
        select(func.max(metrics.sampled_at))
        .where(metrics.service == names.c.service)
        .scalar_subquery()
    )
    return select(names.c.service, newest.label("last_sample_at"), func.now().label("now"))


def liveness(last_sample_at: datetime | None, now: datetime) -> dict[str, Any]:
    live = last_sample_at is not None and now - last_sample_at <= LIVE_WITHIN
    return {"live": live, "last_sample_at": last_sample_at}


async def last_seen(
    conn: AsyncConnection, services: tuple[Service, ...]
) -> dict[Service, dict[str, Any]]:
    """Each service's `{"live", "last_sample_at"}`, judged against the database clock."""
    rows = (await conn.execute(_last_sampled(services))).all()
    return {Service(row.service): liveness(row.last_sample_at, row.now) for row in rows}


async def system_health(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every service's liveness; a service whose read fails is shown as never seen.

    One statement reads them all. If it fails, each service is read on its own inside
    a savepoint, so one bad read degrades only its own entry.
    """
    try:
        async with conn.begin_nested():
            seen = await last_seen(conn, SERVICES)
    except DBAPIError:
        log.warning("system health read failed; reading each service", action="health.read_failed")
        seen = {}
        for service in SERVICES:
            try:
                async with conn.begin_nested():
                    seen.update(await last_seen(conn, (service,)))
            except DBAPIError:
                log.warning(
                    "system health read failed for a service",
                    action="health.read_failed",
                    service=str(service),
                )
    never = {"live": False, "last_sample_at": None}
    return [{"service": str(s), **seen.get(s, never)} for s in SERVICES]
